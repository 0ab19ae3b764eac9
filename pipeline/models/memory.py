"""vLLM's worker memory budget: what it takes from the memory it requests before the KV cache.

vLLM 0.19.0's worker (``v1/worker/gpu_worker.py: determine_available_memory``,
``utils/mem_utils.py: memory_profiling``) requests ``ceil(total x gpu_memory_utilization)``
bytes of the card, loads the weights, runs one profiling forward pass and gives the KV cache
what is left::

    available KV cache memory = requested - weights - torch peak increase - non-torch increase
                                [- CUDA graph estimate, only with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1]

Each part is a :class:`MemoryPart` with its basis in words and, where it cannot be known
before the weights load, a range:

- ``weights``: the weights one rank holds as vLLM stores them (:mod:`.weights`), what vLLM
  logs as "Model loading took ... GiB";
- ``activation_peak``: the torch peak of the profiling run above what was allocated before it
  (``profile_run``: one forward pass over ``max_num_batched_tokens`` tokens spread over
  ``min(max_num_seqs, tokens)`` requests, then the sampler over one row per request: the LM
  head's logits in the model dtype, a float32 copy, the softmax, the exponential draw and
  their quotient, 18 bytes per vocabulary entry and request, measured at 16 for the float32
  chain on an H200, ``bench/NOTES.md``); the multimodal encoder's profiling where the model
  has one.  The uncertain part: the compiled graph's buffers and a cold compile's scratch are
  not known before the engine runs;
- ``non_torch``: memory in use outside torch's allocator that appeared after the worker's
  first snapshot (cuBLAS handles, loaded kernel modules; the CUDA context and the NCCL buffers
  exist before the snapshot and are not counted);
- ``cuda_graphs``: vLLM's estimate of the CUDA graph pool (``profile_cudagraph_memory``: the
  first capture of each mode and the second's cost for every other size), computed whenever
  graphs are captured but subtracted only under the environment switch in 0.19.0.

:func:`parts_019` gives the parts of a config on a card; :mod:`.v034.memory` adds 0.34.0's
changes.  The estimators (:func:`activation_part`, :func:`non_torch_part`,
:func:`cuda_graph_part`, :func:`weights_part`) are shared by both releases.
"""

from __future__ import annotations

from typing import Any

import attrs

from enginecfg.pipeline.hf import typed
from enginecfg.pipeline.models import kv_cache as kc
from enginecfg.pipeline.models import mamba_state
from enginecfg.pipeline.models.dtypes import dtype_size
from enginecfg.pipeline.models.weights import WeightsEstimate

__all__ = ["MemoryPart", "TITLES", "SAMPLER_BYTES", "batch_defaults", "profile_batch", "capture_sizes",
           "forward_bytes_per_token", "activation_part", "non_torch_part", "cuda_graph_part", "weights_part",
           "parts_019", "ESTIMATE_CUDAGRAPHS_ENV", "budget_range"]

GIB = 2**30
MIB = 2**20

#: the environment switch under which vLLM 0.19.0 subtracts its CUDA graph estimate
ESTIMATE_CUDAGRAPHS_ENV = "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"

#: the parts, in the order vLLM subtracts them, and their names for people
TITLES = {
    "weights": "weights",
    "activation_peak": "activation peak of the profiling run",
    "non_torch": "memory outside torch",
    "cuda_graphs": "CUDA graph estimate",
    "start_baseline": "memory in use before the worker's snapshot",
    "warmup_margin": "margin the extensible KV cache keeps",
}

#: bytes per request and vocabulary entry the sampler's profiling run holds at its peak: the
#: LM head's logits in the model dtype (2), their float32 copy, the softmax, the exponential
#: draw and the quotient (4 each); ``v1/sample/sampler.py``, ``ops/topk_topp_sampler.py``
SAMPLER_BYTES = 2 + 4 * 4

#: streaming multiprocessors of the presets (the sampler's Triton top-k/top-p kernel keeps one
#: float32 row of the vocabulary per program, at most one program per multiprocessor)
_SMS = {"H200": 132, "H100-80GB": 132, "H100-PCIE": 114, "H100-NVL": 132, "H20": 78, "B200": 148, "A100-80GB": 108,
        "A100-40GB": 108, "L40S": 142, "L40": 142, "L4": 58, "A10G": 80, "RTX-4090": 128, "RTX-3090": 82,
        "RTX-5090": 170, "RTX-A6000": 84, "RTX-PRO-6000": 188, "GB10": 48, "GB200": 148, "GB300": 160}

#: the activation estimate's range around its point, as a share: a compiled graph fuses the
#: element-wise temporaries away (low), eager kernels and a cold compile's scratch add to them
_ACTIVATION_RANGE = (0.75, 1.6)
#: the memory outside torch that appears during loading and profiling (GiB): point, low, high
#: (Qwen2.5-72B at tensor parallel size 4 on L40S cards, vLLM 0.19.0: the weights and the
#: profiling run's activation estimate leave 0.04 GiB of what the log says the worker took)
_NON_TORCH = {1: (0.25, 0.05, 0.9), 2: (0.2, 0.0, 1.0)}
#: CUDA graphs: the private memory of one piecewise graph piece and of one full graph (vLLM
#: 0.19.0's logged estimates, 51 piecewise and 35 full sizes: 2.73 GiB for Qwen2.5-72B's 81
#: pieces at TP 4, 2.35 GiB for Qwen3-8B's 37, 0.78 and 1.58 GiB for Qwen3.5-9B's 33: 0.45 to
#: 1.3 MiB a piece)
_PIECE_BYTES = 3 * MIB // 4
_FULL_GRAPH_BYTES = MIB
_GRAPH_RANGE = (0.5, 2.5)


@attrs.frozen
class MemoryPart:
    """One thing vLLM's worker takes from the memory it requests: its ``bytes`` (the point
    estimate), ``low``/``high`` (equal when it is exact), the ``basis`` in words, whether the
    release ``subtracted`` it (0.19.0 computes a CUDA graph estimate it does not subtract), and
    the ``step`` it is taken at: ``profile`` (before vLLM logs "Available KV cache memory") or
    ``warmup`` (0.34.0's extensible KV cache, sized again after warmup)."""

    name: str
    bytes: int
    low: int
    high: int
    basis: tuple[str, ...] = attrs.field(converter=tuple)
    subtracted: bool = True
    step: str = "profile"

    @property
    def title(self) -> str:
        return TITLES.get(self.name, self.name)

    @property
    def exact(self) -> bool:
        return self.low == self.high

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.bytes, "low": self.low, "high": self.high,
                "exact": self.exact, "subtracted": self.subtracted, "step": self.step, "basis": list(self.basis)}


def _gib(n: int | float) -> str:
    return f"{n / GIB:.2f}"


def _n(cfg: Any, name: str, default: int = 0) -> int:
    if cfg is None:
        return default
    v = typed.attr(cfg, name, typed.ANY)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else default


# -- the profiling run's batch ------------------------------------------------------------------

def batch_defaults(card: Any) -> tuple[int, int]:
    """vLLM 0.19.0's ``vllm serve`` defaults (``max_num_batched_tokens``, ``max_num_seqs``) on
    *card* (``EngineArgs.get_batch_defaults``): 8192 and 1024 on a card of 70 GiB or more
    whose name has no "a100", else 2048 and 256."""
    if card.memory_bytes >= 70 * GIB and "a100" not in card.device_name.lower():
        return 8192, 1024
    return 2048, 256


def profile_batch(cfg: Any, card: Any) -> tuple[int, int]:
    """The profiling run's tokens and requests under vLLM 0.19.0 on *card*: the caller's
    ``max_num_batched_tokens`` / ``max_num_seqs``, else the card's defaults (with chunked prefill
    off the budget holds max_model_len), the requests at most the tokens."""
    from enginecfg.pipeline.models.engine_defaults import chunked_prefill

    sc, mc = cfg.scheduler_config, cfg.model_config
    tokens_default, seqs_default = batch_defaults(card)
    seqs = sc.max_num_seqs if sc.max_num_seqs is not None else seqs_default
    tokens = sc.max_num_batched_tokens
    if tokens is None:
        tokens = tokens_default if chunked_prefill(cfg) else max(mc.max_model_len, tokens_default)
        tokens = min(seqs * mc.max_model_len, tokens)
    return tokens, min(seqs, tokens)


def capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, largest: int = 512) -> tuple[int, ...]:
    """vLLM's default CUDA graph capture sizes (``VllmConfig._set_cudagraph_sizes``): 1, 2, 4,
    multiples of 8 below 256, then of 16, up to ``min(2 x max_num_seqs, largest,
    max_num_batched_tokens)`` (*largest*: 512; vLLM 0.34.0 takes 1024 on data-centre Blackwell)."""
    top = min(max_num_seqs * 2, largest, max_num_batched_tokens)
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, largest + 1, 16))
    return tuple(s for s in sizes if s <= top)


# -- the activation peak ------------------------------------------------------------------------

def _experts(text: Any) -> tuple[int, int, int]:
    experts = _n(text, "num_experts", _n(text, "n_routed_experts", _n(text, "num_local_experts")))
    topk = _n(text, "num_experts_per_tok", _n(text, "moe_topk", _n(text, "top_k_experts", 2 if experts else 0)))
    inter = _n(text, "moe_intermediate_size", _n(text, "intermediate_size"))
    return experts, topk, inter


def forward_bytes_per_token(cfg: Any, specs: dict) -> tuple[int, list[str]]:
    """What one token of the profiling forward pass holds at the peak of its largest layer, on
    one rank, in bytes: the residual and the hidden state, and the largest of the layer's
    intermediates (attention's QKV and output, the mixer's projections and its chunked scan
    states, the gated MLP's gate/up output and activation, the fused MoE's three caches over
    the routed copies), as the compiled graph keeps them."""
    mc = cfg.model_config
    text = mc.hf_text_config
    b = dtype_size(mc.dtype)
    tp = cfg.parallel_config.tensor_parallel_size
    hidden = _n(text, "hidden_size")
    heads = -(-_n(text, "num_attention_heads") // tp)
    gate = 2 if typed.attr(text, "attn_output_gate", typed.ANY) else 1
    sub: dict[str, int] = {}
    for s in specs.values():
        if isinstance(s, kc.MLAAttentionSpec):
            rank, rope = _n(text, "kv_lora_rank", 512), _n(text, "qk_rope_head_dim", 64)
            qk = _n(text, "qk_nope_head_dim", 128) + rope
            v = _n(text, "v_head_dim", 128)
            sub["attention"] = max(sub.get("attention", 0),
                                   b * (heads * qk + (rank + rope) + heads * (qk + v) + heads * v + hidden))
        elif isinstance(s, (kc.FullAttentionSpec, kc.SlidingWindowSpec)):
            hd = s.head_size
            sub["attention"] = max(sub.get("attention", 0),
                                   b * ((gate * heads + 2 * s.num_kv_heads) * hd + heads * hd + hidden))
    mamba = [s for s in specs.values() if isinstance(s, kc.MambaSpec)]
    if mamba:
        info = mc.arch_info
        shapes = mamba_state.state_shapes(info, mc.hf_config, mc.hf_text_config, tp)
        kind = info.state_kind
        if kind == "mamba2":
            (_, conv_dim), (nh, hd, ds) = shapes[0], shapes[1]
            d_inner = nh * hd
            chunk = max(mc.mamba_chunk_size, 1)
            sub["mixer"] = b * (d_inner + 2 * conv_dim + nh + 2 * d_inner + hidden) + 4 * nh * hd * ds // chunk
        elif kind in ("gated_delta_net", "kda"):
            (_, conv_dim), (nv, dk, dv) = shapes[0], shapes[1]
            sub["mixer"] = b * (2 * conv_dim + 3 * nv * dv + 2 * nv + hidden) + (nv * dk * dv * b) // 64 + nv * 64 * 4
        else:
            conv_dim = shapes[0][-1] if shapes and shapes[0] else hidden
            sub["mixer"] = b * (4 * conv_dim + hidden)
    from enginecfg.pipeline.models.weights import _ffn_kinds

    inter = _n(text, "intermediate_size")
    experts, topk, moe_inter = _experts(text)
    kinds = set(_ffn_kinds(cfg, text, _n(text, "num_hidden_layers")))
    if inter and kinds & {"dense", "both"}:
        sub["mlp"] = b * (3 * -(-inter // tp) + hidden)
    if experts and kinds & {"moe", "both"}:
        sub["moe"] = b * topk * (3 * -(-moe_inter // tp) + hidden) + 4 * experts + 8 * topk
    largest = max(sub, key=sub.get, default=None)
    per_token = 2 * hidden * b + (sub[largest] if largest else 0)
    words = [f"{per_token:,} bytes per token at the largest layer's peak (the residual and hidden state, "
             f"and the {largest or 'layer'}'s intermediates)"]
    return per_token, words


def _encoder(cfg: Any, tokens: int) -> tuple[int, str | None]:
    """The multimodal encoder's profiling: its largest item run through the vision tower, the
    outputs kept through the decoder's pass (a rough size: patches of four to one output token)."""
    v = typed.attr(cfg.model_config.hf_config, "vision_config", typed.ANY)
    if v is None:
        return 0, None
    h = _n(v, "hidden_size")
    inter = _n(v, "intermediate_size", 4 * h)
    if not h:
        return 0, None
    b = dtype_size(cfg.model_config.dtype)
    patches = 4 * tokens
    size = patches * b * (4 * h + 2 * inter) + tokens * _n(cfg.model_config.hf_text_config, "hidden_size") * b
    return size, (f"the vision encoder's profiling pass, about {_gib(size)} GiB for {patches:,} patches "
                  f"(vLLM profiles it unless every --limit-mm-per-prompt is 0)")


def activation_part(cfg: Any, card: Any, specs: dict, tokens: int, requests: int) -> MemoryPart:
    """The torch peak of the profiling run (see the module doc): the larger of the forward pass
    over *tokens* and the sampler over *requests* rows, plus the encoder's profiling."""
    mc = cfg.model_config
    text = mc.hf_text_config
    b = dtype_size(mc.dtype)
    per_token, words = forward_bytes_per_token(cfg, specs)
    forward = per_token * tokens
    vocab = _n(text, "vocab_size", _n(mc.hf_config, "vocab_size"))
    hidden = _n(text, "hidden_size")
    sms = _SMS.get(card.name.split(" (", 1)[0], 132)
    generate = mc.runner_type != "pooling"
    sampler = requests * vocab * SAMPLER_BYTES + min(sms, requests) * vocab * 4 if generate else 0
    # the forward's hidden states (all tokens) and the sampled rows stay while the sampler runs
    sampler_peak = sampler + (tokens + requests) * hidden * b
    encoder, encoder_words = _encoder(cfg, tokens)
    point = max(forward, sampler_peak) + encoder
    low = int(max(forward, sampler_peak) * _ACTIVATION_RANGE[0] + encoder * 0.3)
    high = int(max(forward, sampler_peak) * _ACTIVATION_RANGE[1] + encoder * 2)
    basis = [f"profiling run of {tokens:,} tokens (max_num_batched_tokens) in {requests:,} requests "
             f"(max_num_seqs): forward pass {_gib(forward)} GiB ({words[0]}); sampler "
             f"{_gib(sampler_peak)} GiB ({requests:,} x {vocab:,} vocabulary x {SAMPLER_BYTES} bytes, "
             f"and a float32 vocabulary row for each of {min(sms, requests)} Triton programs)"
             if generate else
             f"profiling run of {tokens:,} tokens (max_num_batched_tokens): forward pass {_gib(forward)} GiB "
             f"({words[0]}); a pooling model runs no sampler"]
    if encoder_words:
        basis.append(encoder_words)
    basis.append(f"the peak is the larger of the two{' plus the encoder' if encoder else ''}: {_gib(point)} GiB; "
                 f"range {_gib(low)}-{_gib(high)} GiB: uncertain, the compiled graph's buffers and a cold "
                 f"compile's scratch are known only when the engine runs")
    return MemoryPart("activation_peak", int(point), low, high, basis)


def non_torch_part(cfg: Any, card: Any) -> MemoryPart:
    """Memory outside torch's allocator that appears after the worker's first snapshot: a range
    by tensor-parallel size, from real start-up logs and a measurement on an H200."""
    tp = cfg.parallel_config.tensor_parallel_size
    point, low, high = _NON_TORCH[1 if tp == 1 else 2]
    basis = [f"{point:.2f} GiB (range {low:.2f}-{high:.2f}) at tensor parallel size {tp}: the cuBLAS and "
             f"cuBLASLt handles (0.16 GiB measured on an H200) and the kernel modules loaded while the model "
             f"is compiled and profiled" + ("; NCCL's lazily grown buffers with more than one rank" if tp > 1 else ""),
             "the CUDA context and the NCCL set-up are in use before vLLM's first snapshot and are not counted"]
    return MemoryPart("non_torch", int(point * GIB), int(low * GIB), int(high * GIB), basis)


def cuda_graph_part(cfg: Any, specs: dict, tokens: int, requests: int, *, subtracted: bool,
                    enforce_eager: bool = False, why: str = "", largest: int = 512) -> MemoryPart:
    """vLLM's CUDA graph estimate: the first capture of each mode (a forward pass over its
    largest size, kept in the graph pool), and for every other size what a second capture
    costs: one piece per attention or mixer layer (each is a splitting op) and one more for a
    piecewise graph, one graph for a full one."""
    if enforce_eager:
        return MemoryPart("cuda_graphs", 0, 0, 0, ["--enforce-eager: no CUDA graphs are captured"],
                          subtracted=subtracted)
    sizes = capture_sizes(requests, tokens, largest)
    full = [s for s in sizes if s <= requests]
    per_token, _ = forward_bytes_per_token(cfg, specs)
    # every attention and mixer layer is a splitting op: the graph has one piece more than them
    layers = len(specs) or 1
    first = per_token * (sizes[-1] if sizes else 0)
    rest = (len(sizes) - 1) * (layers + 1) * _PIECE_BYTES + max(len(full) - 1, 0) * _FULL_GRAPH_BYTES
    point = first + rest
    low, high = int(point * _GRAPH_RANGE[0]), int(point * _GRAPH_RANGE[1])
    basis = [f"{len(sizes)} piecewise sizes (largest {sizes[-1] if sizes else 0}) and {len(full)} full ones "
             f"(largest {full[-1] if full else 0}): first capture {_gib(first)} GiB, the others "
             f"{_gib(rest)} GiB; range {_gib(low)}-{_gib(high)} GiB (uncertain: measured by capturing)",
             why or ("subtracted" if subtracted else "not subtracted")]
    return MemoryPart("cuda_graphs", int(point), low, high, basis, subtracted=subtracted)


def weights_part(est: WeightsEstimate) -> MemoryPart:
    return MemoryPart("weights", est.bytes_per_gpu, est.low or est.bytes_per_gpu, est.high or est.bytes_per_gpu,
                      est.basis)


def parts_019(cfg: Any, card: Any, weights: WeightsEstimate, specs: dict, *,
              estimate_cudagraphs: bool | None = None, enforce_eager: bool = False) -> tuple[MemoryPart, ...]:
    """vLLM 0.19.0's parts on *card* (see the module doc).  *estimate_cudagraphs*: the
    environment switch (None: unset, vLLM's default, off)."""
    tokens, requests = profile_batch(cfg, card)
    on = bool(estimate_cudagraphs)
    graphs = cuda_graph_part(
        cfg, specs, tokens, requests, subtracted=on, enforce_eager=enforce_eager,
        why=(f"subtracted: {ESTIMATE_CUDAGRAPHS_ENV}=1" if on else
             f"vLLM 0.19.0 computes and logs it but subtracts it only with {ESTIMATE_CUDAGRAPHS_ENV}=1 "
             f"(unset here); the graphs are captured after the KV cache is allocated, from the "
             f"memory the utilization leaves out"))
    return (weights_part(weights), activation_part(cfg, card, specs, tokens, requests),
            non_torch_part(cfg, card), graphs)


def budget_range(requested: int, parts: tuple[MemoryPart, ...], step: str = "profile") -> tuple[int, int, int]:
    """(point, low, high) of what *requested* leaves after the subtracted parts of *step* and
    the steps before it (never below 0)."""
    steps = ("profile",) if step == "profile" else ("profile", "warmup")
    taken = [p for p in parts if p.subtracted and p.step in steps]
    point = requested - sum(p.bytes for p in taken)
    low = requested - sum(p.high for p in taken)
    high = requested - sum(p.low for p in taken)
    return max(point, 0), max(low, 0), max(high, 0)
