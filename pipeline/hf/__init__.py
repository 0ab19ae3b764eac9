"""Reading a model the way vLLM reads it from Hugging Face files, and keeping what was read.

- :mod:`.sources` -- where the files come from (a folder, a lone ``config.json``, a hub repo
  id read through the standard hub cache) and the sha256 of each file read;
  :mod:`.safetensors_header` -- a safetensors file's JSON header, never its weights;
- :mod:`.typed` -- typed reads of config fields (the expected kind, the dotted name in the
  error);
- :mod:`.snapshot` and :mod:`.view` -- what vLLM could read of a transformers config object,
  kept as plain data, and the attribute view stages read it through (this run's writes in an
  overlay);
- :mod:`.vllm_classes` -- vLLM's own config classes for the model types where they differ
  from transformers', as data; the worker (``_worker``, ``_classes``) builds the objects with
  transformers, out of process;
- :mod:`.cache` and :mod:`.memo` -- the snapshots in memory and on disk, and the memos of
  figures computed from a config; :func:`clear` forgets all of it.

This room knows nothing of vLLM's rules (:mod:`enginecfg.pipeline.models`) or of the engine
that runs stages; both read through the names below.
"""

from enginecfg.pipeline.hf import cache, typed
from enginecfg.pipeline.hf.cache import (
    clear,
    missing,
    on_clear,
    remember_bytes,
    snapshot_for,
    snapshot_for_bytes,
    snapshot_of_object,
    snapshots_for,
    start_worker,
)
from enginecfg.pipeline.hf.memo import ContentMemo, Unkeyable, content_key, memoised, same_content
from enginecfg.pipeline.hf.safetensors_header import read_header
from enginecfg.pipeline.hf.snapshot import is_snapshot, snapshot_of
from enginecfg.pipeline.hf.sources import (
    ModelSource, forget_files, hub_cache_dir, hub_offline, is_repo_id, open_source,
)
from enginecfg.pipeline.hf.view import HFConfigView
from enginecfg.pipeline.hf.vllm_classes import VLLM_CLASSES, VLLM_REGISTERED_TYPES

# the files kept with their stat facts (:mod:`.sources`) go with the snapshots kept in memory
on_clear(forget_files)

__all__ = [
    # where the files come from
    "ModelSource", "open_source", "is_repo_id", "hub_cache_dir", "hub_offline", "read_header",
    "forget_files",
    # typed reads
    "typed",
    # the snapshot and its view
    "HFConfigView", "snapshot_of", "snapshot_of_object", "is_snapshot", "VLLM_CLASSES",
    "VLLM_REGISTERED_TYPES",
    # the caches and the memos
    "cache", "snapshot_for", "snapshots_for", "snapshot_for_bytes", "missing", "remember_bytes",
    "start_worker", "clear", "on_clear", "ContentMemo", "Unkeyable", "content_key", "same_content", "memoised",
]
