"""vLLM 0.19.0's engine start: the attention backend of every layer on the GPU, the block size
the engine starts with, and the starts that would fail.

When ``vllm serve`` has resolved its config it starts the engine: the executor builds the
model class (every attention layer asks the selector for a backend, :mod:`.backends`), then
calls ``Platform.update_block_size_for_backend``, the model runner declares each layer's
KV-cache spec at that block size, and the engine core groups the specs, plans the KV cache,
writes the smallest group block size back into the cache config and checks it.  In 0.19.0 the
platform step keeps a block size the user gave; sets the default (16) for hybrid models (the
KV-cache planning grows their attention blocks back to the block size the config-time hybrid
alignment computed) and for models with no attention layer; and otherwise takes the block
size the first attention layer's backend prefers (FLASHMLA: 64).

:func:`start` decides all of it from the resolved config, before anything loads, and returns a
:class:`~.startup.Startup`.  What would stop the engine is part of the answer
(:class:`~.startup.StartFailure`): a layer no backend serves, a named backend that refuses, a
model class that cannot be built from the config (vLLM 0.19.0's Bamba with transformers 5.x
layer names, DeepSeek-V2 MoE layers without expert groups or with sizes the tensor-parallel
size does not divide, LlamaNemotronVL without its vision settings), the KV grouping that
cannot serve ``--disable-hybrid-kv-cache-manager``, and the align-mode block check.  Every
answer on an H200 is checked against vLLM 0.19.0 (``tests/issue29_oracle/startup.json``).
"""

from __future__ import annotations

from typing import Any

from enginecfg.pipeline.errors import ConfigRejectedError
from enginecfg.pipeline.hf import ContentMemo, HFConfigView, memoised, typed
from enginecfg.pipeline.models import backends as be
from enginecfg.pipeline.models import kv_cache as kc
from enginecfg.pipeline.models import kv_specs
from enginecfg.pipeline.models.engine_defaults import max_num_batched_tokens
from enginecfg.pipeline.models import vllm_registry_019
from enginecfg.pipeline.models.pages import page_facts
from enginecfg.pipeline.models.startup import (Decision, LayerBackend, LayerKind, StartFailure,
                                               LayerClasses, Startup, layer_kinds, select_layer_backends,
                                               state_page_failure)

__all__ = ["RELEASE", "STARTS", "start", "layer_class", "build_failure", "query_for"]

#: the release whose generated tables these rules read (what a start names when no release is given)
RELEASE = vllm_registry_019.VLLM_VERSION
#: the start-up decisions of configs seen before in this process (a pure function of the
#: config and the GPU)
STARTS = ContentMemo(maxsize=256)

#: the Mamba-like layer classes of vLLM 0.19.0, by state calculator
_MAMBA_CLASSES = {"mamba1": "MambaMixer", "mamba2": "MambaMixer2", "gated_delta_net": "GatedDeltaNetAttention",
                  "kda": "KimiDeltaAttention", "short_conv": "ShortConv",
                  "linear_attention": "MiniMaxText01LinearAttention"}
_CLASSES = LayerClasses(_MAMBA_CLASSES, "OlmoHybridGatedDeltaNet")
#: Bamba's table of layer kinds in vLLM 0.19.0 (transformers 5.x names them otherwise)
_BAMBA_LAYERS = ("attention", "mamba")


def layer_class(kind: LayerKind, architecture: str | None) -> str:
    """The class vLLM 0.19.0 builds a layer of *kind* with."""
    return _CLASSES.of(kind, architecture)


def query_for(cfg: Any, kind: LayerKind) -> be.Query:
    """What a layer of *kind* asks the selector: the block size only when the user gave one."""
    cc = cfg.cache_config
    return be.Query(head_size=kind.head_size, dtype=cfg.model_config.dtype,
                    kv_cache_dtype=kind.kv_cache_dtype or cc.cache_dtype,
                    block_size=cc.block_size if cc.user_specified_block_size else None,
                    use_mla=kind.kind == "mla", attn_type=kind.attn_type or "decoder")


def _context(cfg: Any, capability: tuple[int, int]) -> be.Context:
    mc, cc = cfg.model_config, cfg.cache_config
    fp32 = mc.is_hybrid and "float32" in (cc.mamba_ssm_cache_dtype, cc.mamba_cache_dtype)
    nope = typed.attr(mc.hf_text_config, "qk_nope_head_dim", typed.INT) if mc.use_mla else None
    return be.Context(capability, hybrid_fp32_state=fp32, qk_nope_head_dim=nope)


def _text(view: HFConfigView, name: str, default: Any = None) -> Any:
    return typed.attr(view, name, typed.ANY, default=default) if typed.has(view, name) else default


def _attr_missing(view: HFConfigView, name: str) -> StartFailure:
    cls = view.class_name or "PretrainedConfig"
    return StartFailure("build", "AttributeError", f"'{cls}' object has no attribute '{name}'",
                        "model_executor/models/nemotron_vl.py in LlamaNemotronVLChatModel.__init__",
                        f"the LlamaNemotronVL class reads {name} from the config to size its image "
                        f"tokens, and this config has none")


def build_failure(cfg: Any, *, before_layers: bool) -> StartFailure | None:
    """Why vLLM 0.19.0 could not build the model class from this config (None: it can).

    ``before_layers``: the failures the class meets before its first attention layer asks
    for a backend (the class's own settings, its layer table); otherwise the ones it meets
    after (the feed-forward layers of a decoder layer)."""
    mc = cfg.model_config
    hf, text = mc.hf_config, mc.hf_text_config
    arch = mc.architecture or ""
    info = mc.arch_info
    module = info.module_class if info is not None else ""
    if before_layers:
        if module.startswith("nemotron_vl."):
            if not typed.has(hf, "force_image_size"):
                return _attr_missing(hf, "force_image_size")
            if not _text(hf, "force_image_size"):
                vision = _text(hf, "vision_config")
                if not isinstance(vision, HFConfigView) or not typed.has(vision, "image_size"):
                    return _attr_missing(vision if isinstance(vision, HFConfigView) else hf, "image_size")
            for name in ("downsample_ratio", "ps_version"):
                if not typed.has(hf, name):
                    return _attr_missing(hf, name)
        if module == "bamba.BambaForCausalLM":
            pattern = _text(hf, "layers_block_type") or ()
            for kind in pattern:
                if kind not in _BAMBA_LAYERS:
                    return StartFailure(
                        "build", "KeyError", repr(kind), "model_executor/models/bamba.py in get_layer",
                        f"vLLM 0.19.0's Bamba class looks each entry of layers_block_type up among "
                        f"{list(_BAMBA_LAYERS)}; the config's transformers class names a layer {kind!r} "
                        f"(transformers 5.x spells Bamba's layer kinds 'linear_attention' and "
                        f"'full_attention')")
        return None
    if module.startswith("deepseek_v2.") and _text(text, "n_routed_experts") is not None:
        return _deepseek_moe(cfg)
    return None


def _deepseek_moe(cfg: Any) -> StartFailure | None:
    """DeepSeek-V2/V3's decoder layers, in build order: a dense MLP before
    ``first_k_dense_replace``, else (every ``moe_layer_freq``-th layer) a MoE layer with
    shared experts and grouped top-k routing."""
    text = cfg.model_config.hf_text_config
    tp = cfg.parallel_config.tensor_parallel_size
    layers = _text(text, "num_hidden_layers", 0) or 0
    first_dense = _text(text, "first_k_dense_replace", 0) or 0
    freq = _text(text, "moe_layer_freq", 1) or 1
    for i in range(layers):
        if i >= first_dense and i % freq == 0:
            shared = _text(text, "n_shared_experts")
            moe = _text(text, "moe_intermediate_size")
            if shared is not None and isinstance(moe, int) and (moe * shared) % tp:
                return StartFailure(
                    "build", "AssertionError", "", "model_executor/layers/linear.py in "
                    "MergedColumnParallelLinear.__init__",
                    f"the shared experts' projection of layer {i} has {shared} x {moe} = {shared * moe} "
                    f"outputs, which tensor parallel size {tp} does not divide")
            if isinstance(moe, int) and moe % tp:
                return StartFailure(
                    "build", "AssertionError", "", "model_executor/layers/fused_moe/layer.py in FusedMoE.__init__",
                    f"the experts' intermediate size {moe} of layer {i} is not divisible by tensor "
                    f"parallel size {tp}")
            groups = _text(text, "n_group", 1) if typed.has(text, "n_group") else 1
            topk = _text(text, "topk_group", 1) if typed.has(text, "topk_group") else 1
            if groups is None or topk is None:
                return StartFailure(
                    "build", "AssertionError", "", "model_executor/layers/fused_moe/layer.py in FusedMoE.__init__",
                    f"DeepSeek-V2's MoE layers route with grouped top-k, which needs n_group and "
                    f"topk_group; the config gives n_group={groups!r}, topk_group={topk!r}")
        else:
            size = _text(text, "intermediate_size")
            if isinstance(size, int) and size % tp:
                return StartFailure(
                    "build", "AssertionError", "", "model_executor/layers/linear.py in "
                    "MergedColumnParallelLinear.__init__",
                    f"the MLP projection of layer {i} has {size} outputs, which tensor parallel size "
                    f"{tp} does not divide")
    return None


def _select(cfg: Any, kinds: list[LayerKind], ctx: be.Context,
            messages: list[tuple[str, str]]) -> tuple[list[LayerBackend], StartFailure | None]:
    def fa(sel, kind, q):
        return be.flash_attn_version(ctx.capability) if sel.backend in ("FLASH_ATTN", "FLASH_ATTN_MLA") else None

    out, found, failure = select_layer_backends(
        cfg, kinds, ctx.capability, layer_class=layer_class, query=lambda kind: query_for(cfg, kind),
        select=lambda q, kind, forced, heads: be.select(q, ctx, forced, num_heads=heads), fa_version=fa)
    messages += found
    return out, failure


@memoised(STARTS)
def start(cfg: Any, *, gpu: str = "H200", capability: tuple[int, int] = (9, 0),
          disable_hybrid_kv_cache_manager: bool = False, release: str | None = None) -> Startup:
    """vLLM 0.19.0's engine start of the resolved *cfg* on a GPU of *capability* (the
    preset *gpu* names it); see the module doc."""
    mc, cc = cfg.model_config, cfg.cache_config
    capability = tuple(capability)
    messages: list[tuple[str, str]] = []
    decisions: list[Decision] = []
    kinds = layer_kinds(cfg)
    ctx = _context(cfg, capability)
    failure = build_failure(cfg, before_layers=True)
    layers, selection_failure = _select(cfg, kinds, ctx, messages)
    failure = failure or selection_failure or build_failure(cfg, before_layers=False)

    # Platform.update_block_size_for_backend
    attention = [lb for lb in layers if lb.layer.is_attention]
    block = cc.block_size
    if cc.user_specified_block_size:
        pass  # the user's block size (as the config-time steps left it) is kept
    elif mc.is_hybrid:
        block = be.DEFAULT_BLOCK_SIZE
        if block != cc.block_size:
            decisions.append(Decision(
                "block_size", cc.block_size, block,
                "hybrid model: the engine starts its attention layers at the default block size",
                f"For a hybrid model the platform's start-up step leaves the block size to the hybrid "
                f"alignment: the attention layers declare their KV cache at the default {block} tokens, "
                f"and the KV-cache planning grows their blocks until an attention page covers a Mamba "
                f"page again ({cc.block_size:,} tokens, as the config-time alignment computed)."))
    elif not attention:
        block = be.DEFAULT_BLOCK_SIZE
    else:
        first = min(layers, key=lambda lb: lb.layer.position)
        if first.backend is not None and first.preferred_block_size is not None:
            block = first.preferred_block_size
            if block != be.DEFAULT_BLOCK_SIZE:
                sizes = ", ".join(str(s) for s in first.kernel_block_sizes)
                reason = f"Setting kv cache block size to {block} for {first.backend} backend."
                if failure is None:  # a class that cannot be built never reaches this step's log
                    messages.append(("INFO", reason))
                decisions.append(Decision(
                    "block_size", cc.block_size, block, reason,
                    f"The first attention layer runs on {first.backend}, whose kernels take blocks of "
                    f"{sizes} tokens; the default {be.DEFAULT_BLOCK_SIZE} is not one of them, so the "
                    f"engine starts with the smallest, {block}."))

    # the runner's KV-cache specs at that block size, grouped by the engine core (worked out
    # for a class that cannot be built too: the figures are then what its layers would declare)
    engine_block = None
    if selection_failure is None:
        try:
            specs = kv_specs.layer_specs(cfg, block_size=block)
            if disable_hybrid_kv_cache_manager and kc.needs_unifying(specs):
                messages.append(("WARNING", "Hybrid KV cache manager is disabled for this hybrid model, This "
                                            "means we do not enable any optimizations for saving KV cache "
                                            "memory (e.g., dropping the KV cache outside the sliding window). "
                                            "The compute of layers like sliding window is still saved."))
            groups = kc.get_kv_cache_groups(specs, disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager)
        except ConfigRejectedError as exc:
            failure = failure or StartFailure(
                "start", exc.vllm_type or "ValueError", str(exc),
                "v1/core/kv_cache_utils.py in get_kv_cache_configs",
                "the engine core cannot group the layers' KV-cache specs")
            groups = []
        if groups:
            engine_block = min(g.spec.block_size for g in groups)
            if engine_block != block:
                sizes = ", ".join(f"{g.spec.block_size:,}" for g in groups)
                decisions.append(Decision(
                    "engine_block_size", block, engine_block,
                    f"the engine writes the smallest KV-cache group block size ({engine_block}) back",
                    f"The KV-cache planning gives every group one page size (a Mamba group keeps its "
                    f"Mamba block size, an attention group grows until its page matches), so the groups "
                    f"have blocks of {sizes} tokens; the engine then sets the block size to the "
                    f"smallest, {engine_block:,}."))
            if failure is None and mc.is_hybrid:
                failure = state_page_failure(cfg, cc.mamba_page_size_padded, page_facts(cfg)["mamba_page_size"])
            if failure is None and cc.mamba_cache_mode == "align":
                budget = max_num_batched_tokens(cfg)
                if engine_block > budget:
                    failure = StartFailure(
                        "start", "AssertionError",
                        f"In Mamba cache align mode, block_size ({engine_block}) must be <= "
                        f"max_num_batched_tokens ({budget}).",
                        "config/vllm.py in VllmConfig.validate_block_size",
                        f"in 'align' mode a scheduling step must hold a whole block: the block of "
                        f"{engine_block:,} tokens is larger than the step's {budget:,} tokens")
    return Startup(release or RELEASE, gpu, f"{capability[0]}.{capability[1]}", layers, block,
                   cc.mamba_block_size, cc.mamba_page_size_padded, engine_block, decisions, messages,
                   failure, disable_hybrid_kv_cache_manager)
