"""vLLM 0.34.0's knowledge where it differs from 0.19.0's (the rest of :mod:`enginecfg.pipeline.models`
holds for both), written down in ``tests/data/vllm-0.34.0/RULES.md`` with rule ids the code cites:

- :mod:`.config_time` -- config time (C1-C11): removed architectures, ``is_hybrid``, the
  engine defaults (block size 64, prefix caching for hybrids, the scheduler limits by GPU),
  Gemma 4's FlashAttention-4 rule, NemotronH's SSM fallback, the float KV-dtype check;
- :mod:`.backends` -- the attention backends per GPU capability (B1-B3): the priority lists,
  what each accepts, FlashAttention's version, kernel block sizes and preferences;
- :mod:`.startup` -- the start-up step (B4-B6, S0-S8) and the model classes that cannot be
  built (F1-F7);
- :mod:`.kv_planning` -- the KV-cache planning (K1-K7);
- :mod:`.memory` -- the worker's memory budget (the CUDA graph estimate subtracted, the
  extensible KV cache's sizing after warmup).

A later release is another sub-package beside this one, importing what it keeps from here.
"""

from enginecfg.pipeline.models.v034 import backends, config_time, kv_planning, memory, startup

__all__ = ["backends", "config_time", "kv_planning", "memory", "startup"]
