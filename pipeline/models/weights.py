"""How much GPU memory the weights take on one rank, estimated from the config alone.

vLLM measures the KV-cache budget after loading the weights ("Model loading took ... GiB"):
the memory it requests, minus the weights as loaded, the activation peak of a profiling run
and the memory outside torch (:mod:`.memory` puts the parts together).  To give capacity
figures before anything is loaded, this module counts parameters from the shapes the config
implies — embeddings, attention / MLA projections, Mamba / gated-delta-net / short-conv mixers
(sized from the same state shapes the stages compute), dense or MoE feed-forward blocks, the
routers, the norms, and a vision tower when the config has one — and prices them as vLLM
stores them on each tensor-parallel rank:

- the embeddings and the LM head as ``VocabParallelEmbedding`` shards them: the vocabulary
  padded to a multiple of 64, divided over the ranks (one copy when they are tied);
- the attention projections per rank, KV heads replicated where there are fewer than ranks;
  the mixers, feed-forward and expert weights divided over the ranks; norms and routers
  replicated on every rank;
- quantized linear layers packed as the method stores them, scales included (fp8: 1 byte;
  NVFP4: 4-bit values and an fp8 scale per 16, 4.5 bits; MXFP4: 4.25 bits; GPTQ/AWQ int4:
  4-bit values with a 16-bit scale and a 4-bit zero per group of 128, about 4.16 bits), per
  kind of layer where the checkpoint says so (ModelOpt's ``quantized_layers``, the excluded
  modules); embeddings, LM head, norms, routers and the vision tower stay in the model dtype.

It is an estimate and says so: its range (``low``/``high``) covers the small tensors it does
not count (biases, the Mamba A/D/dt vectors, rotary caches, kernel repacking of quantized
layouts) and the layers it may price in the wrong format.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any

from enginecfg.pipeline.hf import typed
from enginecfg.pipeline.models.quant import QUANT_FIELD
from enginecfg.pipeline.models import mamba_state
from enginecfg.pipeline.models.dtypes import dtype_size
from enginecfg.pipeline.models import kv_cache as kc
from enginecfg.pipeline.models import kv_specs

__all__ = ["WeightsEstimate", "estimate_weights", "QUANT_BITS", "FORMAT_BYTES", "FORMAT_WORDS", "VOCAB_PADDING"]

#: bits per weight of a quantised linear layer (block scales included)
QUANT_BITS = {
    "fp8": 8.0, "modelopt": 8.0, "fbgemm_fp8": 8.0, "compressed-tensors": 8.0,
    "modelopt_fp4": 4.5, "nvfp4": 4.5, "mxfp4": 4.25, "awq": 4.25, "gptq": 4.25,
    "bitsandbytes": 4.5, "gguf": 4.5,
}


#: bytes per parameter of a linear layer stored in each format, scales included
FORMAT_BYTES = {
    "fp8": 1.0,                           # one byte; per-tensor, per-channel or 128x128 block scales
    "nvfp4": 0.5 + 1 / 16,                # 4-bit values, one fp8 scale per 16
    "mxfp4": 0.5 + 1 / 32,                # 4-bit values, one 8-bit exponent per 32
    "int4": 0.5 + (2 + 0.5) / 128,        # GPTQ/AWQ: 4-bit values, fp16 scale and 4-bit zero per 128
    "int8": 1.0 + 2 / 128,
}
#: the formats in words
FORMAT_WORDS = {"fp8": "8 bits", "nvfp4": "4.5 bits: 4-bit values, an fp8 scale per 16",
                "mxfp4": "4.25 bits: 4-bit values, an 8-bit exponent per 32",
                "int4": "4.16 bits: 4-bit values, an fp16 scale and a 4-bit zero per 128", "int8": "8.1 bits"}
#: vLLM pads the vocabulary of its embedding and LM head to a multiple of this
#: (``vocab_parallel_embedding.DEFAULT_VOCAB_PADDING_SIZE``)
VOCAB_PADDING = 64
#: what the estimate may miss, as a share of the weights: unquantized, and quantized checkpoints
_SLACK = {False: (0.01, 0.02), True: (0.03, 0.06)}
#: small tensors the model allocates while it loads beside its weights (rotary cos/sin caches,
#: kernel workspaces), at most
_BUFFERS = 96 * 2**20


@dataclass
class WeightsEstimate:
    params: int
    bytes_total: int
    bytes_per_gpu: int
    basis: list[str] = field(default_factory=list)
    #: the range the weights of one rank lie in (see the module doc)
    low: int = 0
    high: int = 0
    #: bytes of one rank by kind of weight (embeddings, lm_head, attention, ...)
    components: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"params": self.params, "bytes_total": self.bytes_total,
                "bytes_per_gpu": self.bytes_per_gpu, "basis": list(self.basis)}


def _g(cfg, name, default=None):
    """A config attribute of any type (None and absent read as ``default``): the estimate
    tests it for truth, compares it or reads it as text."""
    if cfg is None:
        return default
    v = typed.attr(cfg, name, typed.ANY)
    return default if v is None else v


def _n(cfg, name, default=None):
    """A non-negative integer attribute; anything else is refused, naming the field."""
    if cfg is None:
        return default
    v = typed.attr(cfg, name, typed.INT, allowed=lambda v: v >= 0, expect="a non-negative integer",
                   why="the weights estimate reads it")
    return default if v is None else v


def _ffn_matrices(text) -> int:
    act = str(_g(text, "mlp_hidden_act", _g(text, "hidden_act", "silu")))
    return 2 if act == "relu2" else 3


def _moe(text, hidden: int, mats: int) -> int:
    experts = _n(text, "num_experts", _n(text, "n_routed_experts", _n(text, "num_local_experts", 0)))
    inter = _n(text, "moe_intermediate_size", _n(text, "intermediate_size", 0))
    latent = _n(text, "moe_latent_size")
    width = latent or hidden
    params = experts * mats * width * inter + hidden * experts
    if latent:
        params += 2 * hidden * latent
    shared_inter = _n(text, "shared_expert_intermediate_size",
                      _n(text, "moe_shared_expert_intermediate_size", 0))
    if not shared_inter and _n(text, "n_shared_experts"):
        shared_inter = _n(text, "n_shared_experts") * inter
    return params + mats * hidden * shared_inter


def _ffn_kinds(cfg, text, n_layers: int) -> list[str]:
    """'dense', 'moe', 'both' or 'none' per decoder layer."""
    arch = cfg.model_config.architecture or ""
    has_experts = bool(_n(text, "num_experts", _n(text, "n_routed_experts", _n(text, "num_local_experts", 0))))
    if arch.startswith(("Mamba", "FalconMamba")):
        return ["none"] * n_layers
    if arch.startswith("NemotronH"):
        pattern = _g(text, "hybrid_override_pattern") or _g(text, "layers_block_type") or []
        table = {"-": "dense", "mlp": "dense", "E": "moe", "moe": "moe"}
        return [table.get(k, "none") if isinstance(k, str) else "none" for k in pattern]
    if arch.startswith("Zamba2"):
        return ["none"] * n_layers
    if arch.startswith("Gemma4"):
        return ["both" if _g(text, "enable_moe_block") else "dense"] * n_layers
    if arch.startswith("Jamba") and has_experts:
        period, offset = _n(text, "expert_layer_period", 1), _n(text, "expert_layer_offset", 0)
        return ["moe" if (i - offset) % period == 0 else "dense" for i in range(n_layers)]
    if has_experts:
        first_dense = _n(text, "first_k_dense_replace", 0)
        return ["dense" if i < first_dense else "moe" for i in range(n_layers)]
    return ["dense"] * n_layers


def _mixer_params(cfg, text, hidden: int, specs) -> tuple[int, int]:
    """(attention-like params, recurrent-mixer params) over all layers."""
    mc = cfg.model_config
    heads = _n(text, "num_attention_heads", 0)
    gate = 2 if _g(text, "attn_output_gate") else 1
    tp = cfg.parallel_config.tensor_parallel_size
    attn = 0
    n_attn = 0
    for s in specs.values():
        if isinstance(s, kc.MLAAttentionSpec):
            n_attn += 1
            nope, rope = _n(text, "qk_nope_head_dim", 128), _n(text, "qk_rope_head_dim", 64)
            v, kv_rank, q_rank = _n(text, "v_head_dim", 128), _n(text, "kv_lora_rank", 512), _n(text, "q_lora_rank")
            q = hidden * heads * (nope + rope) if not q_rank else hidden * q_rank + q_rank * heads * (nope + rope)
            attn += q + hidden * (kv_rank + rope) + kv_rank * heads * (nope + v) + heads * v * hidden
        elif isinstance(s, (kc.FullAttentionSpec, kc.SlidingWindowSpec)):
            n_attn += 1
            kv_heads = s.num_kv_heads * tp if s.num_kv_heads * tp <= max(heads, 1) else s.num_kv_heads
            hd = s.head_size
            attn += gate * hidden * heads * hd + 2 * hidden * kv_heads * hd + heads * hd * hidden
    mamba_layers = sum(isinstance(s, kc.MambaSpec) for s in specs.values())
    if not mamba_layers:
        return attn, 0
    info = mc.arch_info
    shapes = mamba_state.state_shapes(info, mc.hf_config, mc.hf_text_config, 1)
    kind = info.state_kind
    if kind == "mamba2":
        (k1, conv_dim), (nheads, hd, _ds) = shapes[0], shapes[1]
        d_inner = nheads * hd
        one = hidden * (d_inner + conv_dim + nheads) + conv_dim * (k1 + 1) + d_inner * hidden
    elif kind == "mamba1":
        (k1, d_inner), (_, ds) = shapes[0], shapes[1]
        rank = math.ceil(hidden / 16)  # "auto"
        for name in ("mamba_dt_rank", "time_step_rank"):
            if _g(text, name, "auto") != "auto":
                rank = _n(text, name)
                break
        one = (hidden * 2 * d_inner + d_inner * (k1 + 1) + d_inner * (rank + 2 * ds)
               + rank * d_inner + d_inner * ds + d_inner * hidden)
    elif kind in ("gated_delta_net", "kda"):
        (k1, conv_dim), (nv, _dk, dv) = shapes[0], shapes[1]
        one = hidden * (conv_dim + nv * dv + 2 * nv) + conv_dim * (k1 + 1) + nv * dv * hidden
    elif kind == "short_conv":
        (k1, dim), = shapes
        one = hidden * 3 * dim + dim * (k1 + 1) + dim * hidden
    else:  # linear attention: q, k, v, gate and output projections
        one = 5 * hidden * hidden
    return attn, mamba_layers * one


def _vision(cfg) -> int:
    v = _g(cfg.model_config.hf_config, "vision_config")
    if v is None:
        return 0
    h = _n(v, "hidden_size", 0)
    depth = _n(v, "depth", _n(v, "num_hidden_layers", 0))
    inter = _n(v, "intermediate_size", 4 * h)
    return depth * (4 * h * h + 2 * h * inter)


def _fmt_name(method: str, algo: str) -> tuple[str | None, str]:
    """(format, words) of a quantization method and algorithm; None: not a linear format
    this module prices (the model dtype)."""
    m, a = method.lower(), algo.upper()
    if "FP4" in a or m in ("modelopt_fp4", "nvfp4"):
        return "nvfp4", f"{method} {algo or 'NVFP4'}"
    if m == "mxfp4" or "MXFP4" in a:
        return "mxfp4", f"{method} MXFP4"
    if a.startswith("FP8") or "FP8" in a or m in ("fp8", "modelopt", "fbgemm_fp8", "ptpc_fp8"):
        return "fp8", f"{method}{' ' + algo if algo else ''}"
    if m in ("awq", "gptq", "awq_marlin", "gptq_marlin", "auto_round", "inc") or "INT4" in a or "W4A16" in a:
        return "int4", f"{method} int4"
    if m in ("bitsandbytes", "gguf"):
        return "nvfp4", f"{method}: priced as 4.5 bits"
    bits = QUANT_BITS.get(m)
    if bits is not None:
        return ("fp8" if bits >= 8 else "nvfp4"), f"{method}: priced as {bits:g} bits"
    return "fp8", f"{method}: priced as fp8"


#: the kinds of linear layer, and the words in a module name that say which one it is (an
#: expert's path says "experts"; a dense or shared-expert MLP "mlp" or "feed_forward")
_KINDS = ("attention", "mixers", "feed-forward", "experts")
_MARKERS = {"experts": (".experts", "experts."),
            "attention": ("self_attn", ".attention", "attn.q", "attn.k", "attn.v", "attn.o"),
            "mixers": ("linear_attn", "mixer", ".mamba", "conv1d", "in_proj", "out_proj"),
            "feed-forward": (".mlp", "mlp.", "feed_forward", "shared_expert", "gate_proj", "up_proj", "down_proj")}


def _kind_of(name: str) -> str | None:
    for kind in ("experts", "attention", "mixers", "feed-forward"):
        if any(m in name for m in _MARKERS[kind]):
            return kind
    return None


def _formats(cfg) -> tuple[dict[str, str | None], str]:
    """The storage format of each kind of linear layer ({kind: format or None for the model
    dtype}) and the words that say so."""
    mc = cfg.model_config
    quant = _g(mc.hf_config, "quantization_config")
    method = mc.quantization
    if not method and isinstance(quant, Mapping):
        method = typed.key(quant, QUANT_FIELD, "quant_method", typed.ANY)
    kinds: dict[str, str | None] = {k: None for k in _KINDS}
    if not method:
        return kinds, ""
    method = str(method)
    algo = str(typed.key(quant, QUANT_FIELD, "quant_algo", typed.ANY, default="")).upper() \
        if isinstance(quant, Mapping) else ""
    layers = typed.key(quant, QUANT_FIELD, "quantized_layers", typed.ANY) if isinstance(quant, Mapping) else None
    if isinstance(layers, Mapping) and layers:
        # ModelOpt mixed precision: each kind of layer in the format most of its entries name
        seen: dict[str, dict[str, int]] = {}
        for name, info in layers.items():
            kind = _kind_of(str(name))
            if kind is None or not isinstance(info, Mapping):
                continue
            a = str(info.get("quant_algo", "")).upper()
            seen.setdefault(kind, {}).setdefault(a, 0)
            seen[kind][a] += 1
        words = []
        for kind in _KINDS:
            if kind in seen:
                a = max(seen[kind], key=seen[kind].get)
                kinds[kind] = _fmt_name(method, a)[0]
                words.append(f"{kind} {a} ({FORMAT_WORDS[kinds[kind]]})" if kinds[kind] else f"{kind} {a} "
                             "(not a format vLLM quantizes: the model dtype)")
        text = f"{method} {algo or 'mixed precision'}, per kind of layer: " + ", ".join(words)
    else:
        fmt, text = _fmt_name(method, algo)
        kinds = {k: fmt for k in _KINDS}
        text += f": {FORMAT_WORDS[fmt]} per linear weight"
    # the checkpoint's exclusions: a pattern that names a kind of layer keeps that kind in the
    # model dtype (patterns name each layer; the kind is what they share)
    kept = []
    if isinstance(quant, Mapping):
        for key in ("ignore", "exclude_modules", "modules_to_not_convert", "ignored_layers"):
            v = typed.key(quant, QUANT_FIELD, key, typed.ANY)
            for pattern in v if isinstance(v, (list, tuple)) else ():
                kind = _kind_of(str(pattern))
                if kind is not None and kinds[kind] is not None:
                    kinds[kind] = None
                    kept.append(kind)
    if kept:
        text += "; left in the model dtype by the checkpoint's exclusions: " + ", ".join(kept)
    return kinds, text


def _attention_per_rank(cfg, text, hidden: int, specs) -> int:
    """The attention projections one rank holds (KV heads replicated where fewer than ranks)."""
    heads = _n(text, "num_attention_heads", 0)
    gate = 2 if _g(text, "attn_output_gate") else 1
    tp = cfg.parallel_config.tensor_parallel_size
    per = 0
    for s in specs.values():
        if isinstance(s, kc.MLAAttentionSpec):
            nope, rope = _n(text, "qk_nope_head_dim", 128), _n(text, "qk_rope_head_dim", 64)
            v, kv_rank, q_rank = _n(text, "v_head_dim", 128), _n(text, "kv_lora_rank", 512), _n(text, "q_lora_rank")
            h = -(-heads // tp)
            q = hidden * h * (nope + rope) if not q_rank else hidden * q_rank + q_rank * h * (nope + rope)
            per += q + hidden * (kv_rank + rope) + kv_rank * h * (nope + v) + h * v * hidden
        elif isinstance(s, (kc.FullAttentionSpec, kc.SlidingWindowSpec)):
            h = -(-heads // tp)
            hd = s.head_size
            per += gate * hidden * h * hd + 2 * hidden * s.num_kv_heads * hd + h * hd * hidden
    return per


def _norms(cfg, text, hidden: int, n_layers: int, specs) -> int:
    """The norm weights, replicated on every rank: two per decoder layer, the final one, and
    the query/key norms of attention layers that have them."""
    qk = 0
    if _g(text, "use_qk_norm") or str(_g(text, "model_type", "")).startswith(("qwen3", "gemma")):
        qk = sum(2 * s.head_size for s in specs.values()
                 if isinstance(s, (kc.FullAttentionSpec, kc.SlidingWindowSpec))
                 and not isinstance(s, kc.MLAAttentionSpec))
    per_layer = 4 if (cfg.model_config.architecture or "").startswith("Gemma") else 2
    return per_layer * hidden * n_layers + hidden + qk


def estimate_weights(cfg, specs: dict | None = None) -> WeightsEstimate:
    """Parameter count and bytes of the weights for the resolved config, per rank as vLLM
    loads them (``specs``: the layers' KV-cache specs when the caller has them already)."""
    mc = cfg.model_config
    text = mc.hf_text_config
    hidden = _n(text, "hidden_size", 0)
    vocab = _n(text, "vocab_size", _n(mc.hf_config, "vocab_size", 0))
    n_layers = _n(text, "num_hidden_layers", 0)
    tied = _g(text, "tie_word_embeddings", _g(mc.hf_config, "tie_word_embeddings", False))
    tp = cfg.parallel_config.tensor_parallel_size
    embed = vocab * hidden * (1 if tied else 2)
    if specs is None:
        specs = kv_specs.layer_specs(cfg)
    attn, mixer = _mixer_params(cfg, text, hidden, specs)
    mats = _ffn_matrices(text)
    dense = mats * hidden * _n(text, "intermediate_size", 0)
    moe = _moe(text, hidden, mats)
    experts_total = _n(text, "num_experts", _n(text, "n_routed_experts", _n(text, "num_local_experts", 0)))
    router = hidden * experts_total
    ffn = experts = routers = 0
    shared_inter = _n(text, "shared_expert_intermediate_size", _n(text, "moe_shared_expert_intermediate_size", 0))
    if not shared_inter and _n(text, "n_shared_experts"):
        shared_inter = _n(text, "n_shared_experts") * _n(text, "moe_intermediate_size", _n(text, "intermediate_size", 0))
    shared = mats * hidden * shared_inter
    for kind in _ffn_kinds(cfg, text, n_layers):
        if kind in ("moe", "both"):
            experts += moe - router - shared
            ffn += shared
            routers += router
        if kind in ("dense", "both"):
            ffn += dense
    if (mc.architecture or "").startswith("Zamba2"):
        ffn += _n(text, "num_mem_blocks", 1) * dense
    vision = _vision(cfg)
    norms = _norms(cfg, text, hidden, n_layers, specs)
    params = embed + attn + mixer + ffn + experts + routers + vision
    model_bytes = dtype_size(mc.dtype)
    formats, quant_note = _formats(cfg)

    def price(kind: str, n: int) -> int:
        fmt = formats.get(kind)
        return int(n * (FORMAT_BYTES[fmt] if fmt else model_bytes))

    padded = -(-vocab // VOCAB_PADDING) * VOCAB_PADDING
    per_vocab = -(-padded // tp) * hidden
    components = {
        "embeddings": per_vocab * model_bytes,
        "lm_head": 0 if tied else per_vocab * model_bytes,
        "attention": price("attention", _attention_per_rank(cfg, text, hidden, specs)),
        "recurrent mixers": price("mixers", -(-mixer // tp)),
        "feed-forward": price("feed-forward", -(-ffn // tp)),
        "experts": price("experts", -(-experts // tp)),
        "routers": routers * model_bytes,
        "norms": norms * model_bytes,
        "vision": -(-vision // tp) * model_bytes,
    }
    per_gpu = sum(components.values())
    total = int(embed * model_bytes + price("attention", attn) + price("mixers", mixer) + price("feed-forward", ffn)
                + price("experts", experts) + (routers + vision + norms) * model_bytes)
    quantized = any(f is not None for f in formats.values())
    lo, hi = _SLACK[quantized]
    low, high = int(per_gpu * (1 - lo)), int(per_gpu * (1 + hi)) + _BUFFERS
    gib = 2**30
    shown = ", ".join(f"{k} {v / gib:.2f}" for k, v in components.items() if v)
    basis = [
        f"{params / 1e9:.2f} B parameters from the config's shapes: embeddings {embed / 1e9:.2f} B"
        f"{' (tied)' if tied else ''}, attention {attn / 1e9:.2f} B, recurrent mixers "
        f"{mixer / 1e9:.2f} B, feed-forward {(ffn + experts + routers) / 1e9:.2f} B, vision {vision / 1e9:.2f} B",
        (quant_note + f"; the rest in {mc.dtype}") if quant_note else
        f"all weights in {mc.dtype} ({model_bytes} bytes each)",
        f"per rank of tensor parallel size {tp} (GiB): {shown}; the vocabulary padded to {padded:,} and "
        f"split over the ranks, KV heads replicated where fewer than ranks, norms and routers on every rank",
        f"range {low / gib:.2f}-{high / gib:.2f} GiB: what the count leaves out (biases, Mamba A/D/dt "
        f"vectors, rotary caches, kernel layouts{' of the quantized layers' if quantized else ''})",
    ]
    return WeightsEstimate(params=params, bytes_total=total, bytes_per_gpu=per_gpu, basis=basis, low=low, high=high,
                           components=components)
