"""vLLM 0.19.0's model knowledge, apart from the engine that runs stages.

Each fact about a model family lives here once, as data or a small pure function:

- :mod:`.architectures` -- the architecture table: family (attention, hybrid, attention-free),
  pooling, the config hook vLLM runs, the Mamba state recipe, prefix-caching support, the
  per-layer KV-cache pattern; a new architecture is one row;
- :mod:`.engine_defaults` -- what vLLM fills in for unset engine arguments (chunked prefill,
  prefix caching, the block size, the scheduler's token budget);
- :mod:`.mamba_state` -- the per-rank Mamba / linear-attention state shapes (named
  dimensions), their dtypes, page sizes and kernel block alignment;
- :mod:`.gpus` -- the GPUs deployments run on: the memory each reports, its compute
  capability (what the start-up step picks backends by);
- :mod:`.dtypes` -- dtype names and element sizes, the attention KV dtype;
- :mod:`.derive` -- the model facts vLLM derives while building its model config (dtype,
  max_model_len, head size, KV heads, MLA, quantisation, the checkpoint's KV-cache dtype,
  the Gemma 4 per-layer view) and the model-type tables behind them;
- :mod:`.quant` -- the checkpoint's quantisation config as vLLM reads and checks it;
- :mod:`.pages` -- the page facts of a resolved config (what hybrid alignment sizes and GPU
  validation lays out);
- :mod:`.weights_dtype` -- the checkpoint dtype vLLM reads from safetensors headers;
- :mod:`.pooling` -- the config hooks of the bidirectional pooling models (LlamaNemotronVL,
  LlamaBidirectional): which hooks they are, the checkpoint's pooling names;
- :mod:`.model_files` -- what vLLM reads from the files beside ``config.json`` (tokenizer and
  sentence-transformers settings);
- :mod:`.kv_specs` -- the KV-cache spec every layer declares (full attention, sliding
  window, MLA, Mamba-like state), one function per layer pattern;
- :mod:`.kv_cache` -- vLLM's KV-cache grouping, page and block arithmetic, capacity and
  concurrency (``kv_cache_utils``), re-implemented;
- :mod:`.weights` -- the weights' bytes estimated from the config's shapes;
- :mod:`.memory` -- vLLM's worker memory budget: the weights, the profiling run's activation
  peak, the memory outside torch and the CUDA graph estimate, each with its basis and range;
- :mod:`.capacity` -- the two together with a memory budget: the ``impact`` figures;
- :mod:`.startup` -- the engine start as values (each kind of layer and its attention
  backend, the block size the engine starts with, why it would not start), the same for
  every release;
- :mod:`.backends` -- vLLM 0.19.0's attention backends per GPU capability: what each
  accepts, the priority lists, the selector;
- :mod:`.engine_start` -- vLLM 0.19.0's engine start (backends, the platform's block size,
  the KV-cache specs and groups, the starts that would fail);
- :mod:`.v034` -- vLLM 0.34.0's knowledge where it differs (a sub-package per later release).

Loading reads a config and calls these; stages decide with them; neither defines them.
Figures that cost time (the page facts, the capacity) are memoised here, by the config's
content.  This room reads configs through :mod:`enginecfg.pipeline.hf` and imports nothing
of the engine's run machinery, the store, or the CLI.
"""

from enginecfg.pipeline.models import (
    architectures,
    backends,
    capacity,
    derive,
    dtypes,
    engine_defaults,
    engine_start,
    gpus,
    kv_cache,
    kv_specs,
    mamba_state,
    memory,
    model_files,
    pages,
    pooling,
    quant,
    startup,
    v034,
    weights,
    weights_dtype,
)

__all__ = ["architectures", "backends", "capacity", "derive", "dtypes", "engine_defaults", "engine_start", "gpus",
           "kv_cache", "kv_specs", "mamba_state", "memory", "model_files", "pages", "pooling", "quant", "startup", "v034",
           "weights", "weights_dtype"]
