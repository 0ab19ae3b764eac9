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
  validation lays out).

Loading reads a config and calls these; stages decide with them; neither defines them.
Nothing here imports the engine's run machinery, the store, or the CLI.
"""
