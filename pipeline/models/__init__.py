"""vLLM 0.19.0's model knowledge, apart from the engine that runs stages.

Each fact about a model family lives here once, as data or a small pure function:

- :mod:`.architectures` -- the architecture table: family (attention, hybrid, attention-free),
  pooling, the config hook vLLM runs, the Mamba state recipe, prefix-caching support;
- :mod:`.mamba_state` -- the per-rank Mamba / linear-attention state shapes (named
  dimensions), their dtypes, page sizes and kernel block alignment;
- :mod:`.dtypes` -- dtype names and element sizes, the attention KV dtype;
- :mod:`.derive` -- the model facts vLLM derives while building its model config (dtype,
  max_model_len, head size, KV heads, MLA, quantisation, the checkpoint's KV-cache dtype,
  the Gemma 4 per-layer view) and the model-type tables behind them;
- :mod:`.pages` -- the page facts of a resolved config (what hybrid alignment sizes and GPU
  validation lays out);
- :mod:`.config_defaults` -- what vLLM's own config classes (kimi_linear, qwen3_next, qwen3_5,
  olmo_hybrid, lfm2_moe) make of fields a config leaves out;
- :mod:`.weights_dtype` -- the checkpoint dtype vLLM reads from safetensors headers;
- :mod:`.model_files` -- what vLLM reads from the files beside ``config.json`` (tokenizer and
  sentence-transformers settings);
- :mod:`.kv_specs` -- the KV-cache spec every layer declares (full attention, sliding
  window, MLA, Mamba-like state), per architecture's layer pattern;
- :mod:`.kv_cache` -- vLLM's KV-cache grouping, page and block arithmetic, capacity and
  concurrency (``kv_cache_utils``), re-implemented;
- :mod:`.weights` -- the weights' bytes estimated from the config's shapes;
- :mod:`.capacity` -- the two together with a memory budget: the ``impact`` figures.

Loading reads a config and calls these; stages decide with them; neither defines them.
Nothing here imports the engine's run machinery, the store, or the CLI.
"""
