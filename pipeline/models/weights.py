"""How much GPU memory the weights take, estimated from the config alone.

vLLM measures the KV-cache budget after loading the weights: ``gpu_memory_utilization``
times the GPU's memory, minus the weights, minus the activation peak of a profiling run.
To give capacity figures before anything is loaded, this module counts parameters from the
shapes the config implies — embeddings, attention / MLA projections, Mamba / gated-delta-net
/ short-conv mixers (sized from the same state shapes the stages compute), dense or MoE
feed-forward blocks, and a vision tower when the config has one — and prices them by dtype
and quantisation, divided over the tensor-parallel ranks.

It is an estimate and says so: norms, biases and small gates are left out, a quantised
checkpoint is priced at its method's bits for the linear layers of the decoder (embeddings,
LM head and vision tower stay in the model dtype), and the activation peak and CUDA graphs
vLLM also subtracts are not counted (``--kv-cache-memory`` skips the estimate entirely).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from enginecfg.pipeline.hf import typed
from enginecfg.pipeline.models.quant import QUANT_FIELD
from enginecfg.pipeline.models import mamba_state
from enginecfg.pipeline.models.dtypes import dtype_size
from enginecfg.pipeline.models import kv_cache as kc
from enginecfg.pipeline.models import kv_specs

__all__ = ["WeightsEstimate", "estimate_weights", "QUANT_BITS"]

#: bits per weight of a quantised linear layer (block scales included)
QUANT_BITS = {
    "fp8": 8.0, "modelopt": 8.0, "fbgemm_fp8": 8.0, "compressed-tensors": 8.0,
    "modelopt_fp4": 4.5, "nvfp4": 4.5, "mxfp4": 4.25, "awq": 4.25, "gptq": 4.25,
    "bitsandbytes": 4.5, "gguf": 4.5,
}


@dataclass
class WeightsEstimate:
    params: int
    bytes_total: int
    bytes_per_gpu: int
    basis: list[str] = field(default_factory=list)

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


def _quant_bits(cfg) -> tuple[float | None, str]:
    mc = cfg.model_config
    quant = _g(mc.hf_config, "quantization_config")
    method = mc.quantization
    # method and algorithm are read as text and compared, as the loader read them
    if not method and isinstance(quant, dict):
        method = typed.key(quant, QUANT_FIELD, "quant_method", typed.ANY)
    if not method:
        return None, ""
    algo = str(typed.key(quant, QUANT_FIELD, "quant_algo", typed.ANY, default="")).upper() \
        if isinstance(quant, dict) else ""
    if "FP4" in algo or method in ("modelopt_fp4", "nvfp4"):
        return 4.5, f"{method} {algo or 'fp4'}: 4.5 bits per linear weight (4-bit values, fp8 block scales)"
    if algo == "MIXED_PRECISION" or str(method).endswith("mixed"):
        return 4.5, f"{method} mixed precision: priced as 4.5 bits per linear weight (its largest part)"
    bits = QUANT_BITS.get(str(method).lower(), 8.0)
    return bits, f"{method}{' ' + algo if algo else ''}: {bits:g} bits per linear weight"


def estimate_weights(cfg, specs: dict | None = None) -> WeightsEstimate:
    """Parameter count and bytes of the weights for the resolved config (``specs``: the
    layers' KV-cache specs when the caller has them already)."""
    mc = cfg.model_config
    text = mc.hf_text_config
    hidden = _n(text, "hidden_size", 0)
    vocab = _n(text, "vocab_size", _n(mc.hf_config, "vocab_size", 0))
    n_layers = _n(text, "num_hidden_layers", 0)
    tied = _g(text, "tie_word_embeddings", _g(mc.hf_config, "tie_word_embeddings", False))
    embed = vocab * hidden * (1 if tied else 2)
    if specs is None:
        specs = kv_specs.layer_specs(cfg)
    attn, mixer = _mixer_params(cfg, text, hidden, specs)
    mats = _ffn_matrices(text)
    dense = mats * hidden * _n(text, "intermediate_size", 0)
    moe = _moe(text, hidden, mats)
    ffn = 0
    for kind in _ffn_kinds(cfg, text, n_layers):
        ffn += {"dense": dense, "moe": moe, "both": dense + moe}.get(kind, 0)
    if (mc.architecture or "").startswith("Zamba2"):
        ffn += _n(text, "num_mem_blocks", 1) * dense
    vision = _vision(cfg)
    linear = attn + mixer + ffn
    params = embed + linear + vision
    model_bytes = dtype_size(mc.dtype)
    bits, quant_note = _quant_bits(cfg)
    linear_bytes = linear * (bits / 8 if bits else model_bytes)
    total = int(embed * model_bytes + linear_bytes + vision * model_bytes)
    tp = cfg.parallel_config.tensor_parallel_size
    per_gpu = -(-total // tp)
    basis = [
        f"{params / 1e9:.2f} B parameters from the config's shapes: embeddings {embed / 1e9:.2f} B"
        f"{' (tied)' if tied else ''}, attention {attn / 1e9:.2f} B, recurrent mixers "
        f"{mixer / 1e9:.2f} B, feed-forward {ffn / 1e9:.2f} B, vision {vision / 1e9:.2f} B",
        quant_note or f"all weights in {mc.dtype} ({model_bytes} bytes each)",
        f"divided over tensor parallel size {tp}",
        "not counted: norms, biases, the activation peak and CUDA graphs vLLM also subtracts",
    ]
    return WeightsEstimate(params=params, bytes_total=total, bytes_per_gpu=per_gpu, basis=basis)
