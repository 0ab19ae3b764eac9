"""vLLM 0.34.0's start-up step (RULES.md B1-B6, S0-S8, F1-F7), decided before loading.

vLLM 0.34.0 knows these only after ``load_model()``: every layer's attention backend (the
selector, per layer kind and GPU), then ``Platform.update_block_size_for_backend``: the block
size the backends prefer (S1), the hybrid alignment to the first backend's kernel block, the
lcm across backends and the Mamba prefill-checkpoint alignment (S2-S4), the Mamba block size
(S5), the Mamba page padding (S6) and the last check (S8).  The engine core then plans the KV
cache and writes the smallest group block size back.  Each function here is one part of
that, a pure function of the resolved config and the GPU; the 0.34.0 stages call them in
order and record the :class:`~enginecfg.pipeline.models.startup.Startup` they build.

What stops the engine is known here too: the model classes that cannot be built (F1 removed
architectures on the Transformers backend, F2 DeepSeek MoE routing, F3 LFM2 without its
``block_*`` fields, F5 LlamaNemotronVL without its vision settings, F7 an FP8 KV cache on a
Triton backend before compute capability 8.9), a named backend that refuses (B5), and a real
Mamba state larger than its padded page (F6).
"""

from __future__ import annotations

import functools

import math
from typing import Any

from enginecfg.pipeline.hf import typed
from enginecfg.pipeline.models import backends as be019
from enginecfg.pipeline.models import engine_start, mamba_state
from enginecfg.pipeline.models.pages import page_facts
from enginecfg.pipeline.models.startup import (Decision, LayerBackend, LayerKind, StartFailure, LayerClasses,
                                               layer_kinds, select_layer_backends, state_page_failure)
from enginecfg.pipeline.models.v034 import backends as be
from enginecfg.pipeline.models.v034 import config_time
from enginecfg.pipeline.releases import in_force

__all__ = ["context", "layer_class", "select_backends", "build_failure", "preferred_block", "checkpoint_alignment",
           "align_hybrid", "validate_block_size", "unbuildable", "state_crash"]

_MAMBA_CLASSES = {"mamba1": "MambaMixer", "mamba2": "MambaMixer2", "gated_delta_net": "QwenGatedDeltaNetAttention",
                  "kda": "KimiDeltaAttention", "short_conv": "ShortConv",
                  "linear_attention": "MiniMaxText01LinearAttention"}
_CLASSES = LayerClasses(_MAMBA_CLASSES, "OlmoHybridGatedDeltaNetAttention")
#: before B6a (0.22.0), which moved the gated delta nets to ``layers/mamba/gdn/``, their classes'
#: earlier names
_CLASSES_BEFORE_B6A = LayerClasses({**_MAMBA_CLASSES, "gated_delta_net": "GatedDeltaNetAttention"},
                                   "OlmoHybridGatedDeltaNet")
_ATTENTION_LAYERS = ("attention", "full_attention", "sliding_attention")


def context(cfg: Any, gpu: Any, release: Any = None) -> be.Context:
    """What the 0.34.0 backends read from the config and the GPU (and whose priority lists:
    *release*, None for the latest)."""
    mc, cc = cfg.model_config, cfg.cache_config
    text = mc.hf_text_config
    nope = typed.attr(text, "qk_nope_head_dim", typed.INT) if mc.use_mla else None
    fp32 = bool(mc.is_hybrid) and "float32" in (cc.mamba_ssm_cache_dtype, cc.mamba_cache_dtype)
    return be.Context(tuple(gpu.capability), model_head=mc.head_size, cache_dtype=cc.cache_dtype,
                      hybrid_fp32_state=fp32,
                      flash_attn_version=cfg.attention_config.flash_attn_version,
                      softcap=bool(typed.attr(text, "attn_logit_softcapping", typed.ANY)),
                      mm_prefix_lm=config_time.is_mm_prefix_lm(cfg), qk_nope_head_dim=nope, release=release)


def layer_class(kind: LayerKind, architecture: str | None) -> str:
    """The class vLLM 0.34.0 builds a layer of *kind* with."""
    return _CLASSES.of(kind, architecture)


def _text(view, name: str, default: Any = None) -> Any:
    return typed.attr(view, name, typed.ANY, default=default) if typed.has(view, name) else default


def _missing(view, name: str, where: str, why: str, rule: str) -> StartFailure:
    cls = view.class_name or "PretrainedConfig"
    return StartFailure("build", "AttributeError", f"'{cls}' object has no attribute '{name}'", where, why, rule)


def _first_is_attention(hf) -> bool:
    layer_types = _text(hf, "layer_types") or []
    return bool(layer_types) and layer_types[0] == "full_attention"


def _lfm2(hf) -> StartFailure | None:
    """F3: LFM2's layers size their feed-forward part from ``block_*`` fields."""
    for name in ("block_dim", "block_multiple_of", "block_auto_adjust_ff_dim", "block_ffn_dim_multiplier"):
        if not typed.has(hf, name):
            return _missing(hf, name, "model_executor/models/lfm2.py in __init__",
                            "the LFM2 class sizes its feed-forward layers from block_dim, block_multiple_of, "
                            "block_auto_adjust_ff_dim and block_ffn_dim_multiplier, which the config does not "
                            "have (transformers' Lfm2Config has no default for them, in 5.22 and 5.23 alike)", "F3")
    return None


def build_failure(cfg: Any, *, before_layers: bool, release: Any = None) -> StartFailure | None:
    """F1, F3, F5 (the class meets them before its attention layers ask for a backend) and F2
    (after): why vLLM 0.34.0 (or *release*) cannot build the model class (None: it can)."""
    mc = cfg.model_config
    hf, text = mc.hf_config, mc.hf_text_config
    info = mc.arch_info
    module = info.module_class if info is not None else ""
    if before_layers:
        # F1a (with C1b, 0.24.0): an architecture that left the registry is built on the Transformers backend
        if (mc.architecture or "").startswith("Transformers") and in_force(release, "F1a"):
            # F1b (0.30.0): the build refuses a layer that does not call the attention interface;
            # before it every layer gets an attention instance
            layer_types = (_text(text, "layer_types") or []) if in_force(release, "F1b") else []
            for i, kind in enumerate(layer_types):
                if kind not in _ATTENTION_LAYERS:
                    return StartFailure(
                        "build", "ValueError",
                        f"Layer {i} ({kind}) does not dispatch through the Transformers attention interface "
                        f"and vLLM has no other way to handle it.",
                        "model_executor/models/transformers/base.py in _create_attention_instances",
                        f"{', '.join(mc.architectures)} left vLLM's registry, so the model runs on the "
                        f"Transformers backend, which serves only layers that call the attention interface; "
                        f"layer {i} is a {kind} layer", "F1")
        if module == "bamba.BambaForCausalLM":
            # a release that still registers Bamba (before C1b) builds it with 0.19.0's class, whose
            # layer table knows only 'attention' and 'mamba'
            return engine_start.build_failure(cfg, before_layers=True)
        if module.startswith("nemotron_vl."):
            where = "model_executor/models/nemotron_vl.py in __init__"
            why = "the LlamaNemotronVL class reads its vision settings from the config, which has none"
            if not typed.has(hf, "force_image_size"):
                return _missing(hf, "force_image_size", where, why, "F5")
            for name in ("downsample_ratio", "ps_version"):
                if not typed.has(hf, name):
                    return _missing(hf, name, where, why, "F5")
        if module.startswith("lfm2") and not _first_is_attention(hf):
            return _lfm2(hf)
        return None
    if module.startswith("lfm2") and _first_is_attention(hf):
        return _lfm2(hf)  # the first layer's attention came first
    if module.startswith("deepseek_v2.") and _text(text, "n_routed_experts") is not None:
        tp = cfg.parallel_config.tensor_parallel_size
        layers = _text(text, "num_hidden_layers", 0) or 0
        first_dense = _text(text, "first_k_dense_replace", 0) or 0
        freq = _text(text, "moe_layer_freq", 1) or 1
        for i in range(layers):
            if i < first_dense or i % freq:
                size = _text(text, "intermediate_size")
                if isinstance(size, int) and size % tp:
                    return StartFailure("build", "AssertionError", "", "model_executor/layers/linear.py in "
                                        "MergedColumnParallelLinear.__init__",
                                        f"the MLP of layer {i} has {size} outputs, which tensor parallel size "
                                        f"{tp} does not divide", "F2b")
                continue
            shared, moe = _text(text, "n_shared_experts"), _text(text, "moe_intermediate_size")
            if isinstance(shared, int) and isinstance(moe, int) and (shared * moe) % tp:
                return StartFailure("build", "AssertionError", "", "model_executor/layers/linear.py in "
                                    "MergedColumnParallelLinear.__init__",
                                    f"the shared experts of layer {i} have {shared} x {moe} = {shared * moe} "
                                    f"outputs, which tensor parallel size {tp} does not divide", "F2b")
            groups = _text(text, "n_group", 1) if typed.has(text, "n_group") else 1
            topk = _text(text, "topk_group", 1) if typed.has(text, "topk_group") else 1
            if groups is None or topk is None:
                if not in_force(release, "F9"):  # before F9 FusedMoE asserts first
                    return StartFailure("build", "AssertionError", "",
                                        "model_executor/layers/fused_moe/layer.py in FusedMoE.__init__",
                                        f"DeepSeek-V2's MoE layers route with grouped top-k, which needs n_group and "
                                        f"topk_group; the config gives n_group={groups!r}, topk_group={topk!r}", "F9")
                return StartFailure("build", "ValueError",
                                    "num_expert_group and topk_group must be provided when use_grouped_topk is True",
                                    "model_executor/layers/fused_moe/router/router_factory.py in "
                                    "create_fused_moe_router",
                                    f"DeepSeek-V2's MoE layers route with grouped top-k, which needs n_group and "
                                    f"topk_group; the config gives n_group={groups!r}, topk_group={topk!r}", "F2")
            return None
    return None


def unbuildable(cfg: Any, exc: Exception) -> StartFailure:
    """Why the engine does not start when sizing the model's layers meets vLLM's own refusal
    (*exc*, a :class:`ConfigRejectedError`: ``10240 is not divisible by 3``): vLLM 0.34.0 sizes
    the Mamba state at start-up (S2) and asserts there at the latest, or before, on another
    dimension, while it builds the layers; which comes first is not worked out here, so the
    exception's text is left out."""
    tp = cfg.parallel_config.tensor_parallel_size
    return StartFailure(
        "start", getattr(exc, "vllm_type", None) or "AssertionError", "",
        "platforms/interface.py in update_block_size_for_backend, at the latest",
        f"tensor parallel size {tp} does not divide the model's Mamba state ({exc}): vLLM asserts when it sizes "
        f"that state at start-up, unless building the model's layers asserts first on another dimension", "S2")


def state_crash(cfg: Any, exc: Exception) -> StartFailure | None:
    """Why the engine does not start when the Mamba state cannot be sized (*exc*, enginecfg's
    refusal of the field) and vLLM's own exception there is known
    (:func:`~enginecfg.pipeline.models.mamba_state.state_crash`): since C8 a hybrid's config
    resolves and the start-up step meets it, when it sizes the state for the alignment."""
    mc = cfg.model_config
    if not mc.is_hybrid or mc.arch_info is None:
        return None
    crash = mamba_state.state_crash(mc.arch_info, mc.hf_config, mc.hf_text_config)
    if crash is None:
        return None
    return StartFailure("start", crash[0], crash[1], "v1/kv_cache_interface.py in MambaSpec.page_size_bytes",
                        f"the start-up step sizes the Mamba state to align the hybrid's block size, and vLLM "
                        f"computes with the value enginecfg refuses: {exc}", "C8")


def _triton_fp8(cfg: Any, backend: str, gpu: Any, release: Any = None) -> StartFailure | None:
    """F7: an FP8 KV cache on a Triton backend needs native FP8 (compute capability 8.9): the
    Triton attention backend's refusal from F7a (0.24.0), the Triton MLA backend's from F7b (0.26.0)."""
    cc = cfg.cache_config
    step = {"TRITON_ATTN": "F7a", "TRITON_MLA": "F7b"}.get(backend)
    if step is None or not cc.cache_dtype.startswith("fp8") or tuple(gpu.capability) >= (8, 9) \
            or not in_force(release, step):
        return None
    cap = f"{gpu.capability[0]}.{gpu.capability[1]}"
    suggested = "bfloat16" if tuple(gpu.capability) >= (8, 0) else "float16"
    which = "Triton MLA backend" if backend == "TRITON_MLA" else "Triton attention backend"
    return StartFailure("build", "ValueError",
                        f"FP8 KV cache is not supported by the {which} on {gpu.device_name} (compute capability "
                        f"{cap}); native FP8 (fp8e4nv) requires SM89+. Re-run with --kv-cache-dtype {suggested}.",
                        f"v1/attention/backends/{'mla/triton_mla' if backend == 'TRITON_MLA' else 'triton_attn'}.py"
                        f" in __init__", f"the layers run on {backend}, whose FP8 kernels need compute "
                        f"capability 8.9 or more; the {gpu.name} has {cap}", "F7")


def select_backends(cfg: Any, gpu: Any, release: Any = None
                    ) -> tuple[list[LayerBackend], list[tuple[str, str]], StartFailure | None]:
    """B1-B6: every kind of layer with its backend on *gpu*, the selector's warnings, and the
    first failure building the model class meets (None: it builds): the shared loop given this
    release's query, selector (a sliding-window layer needs a backend that takes one) and
    FlashAttention version."""
    mc, cc = cfg.model_config, cfg.cache_config
    ctx = context(cfg, gpu, release)

    def query(kind: LayerKind) -> be.Query:
        return be.Query(head_size=kind.head_size, dtype=mc.dtype, kv_cache_dtype=kind.kv_cache_dtype or cc.cache_dtype,
                        block_size=cc.block_size if cc.user_specified_block_size else None,
                        use_mla=kind.kind == "mla", attn_type=kind.attn_type or "decoder",
                        use_mm_prefix=ctx.mm_prefix_lm)

    def fa(sel: Any, kind: LayerKind, q: be.Query) -> int | None:
        if sel.backend in ("FLASH_ATTN", "TRITON_FLASH_ATTN"):
            return be.flash_attn_version(ctx, kind.head_size, q.block_size, fa4_hd256=True,
                                         local=kind.sliding_window is not None)
        return None

    before = build_failure(cfg, before_layers=True, release=release)
    classes = _CLASSES if in_force(release, "B6a") else _CLASSES_BEFORE_B6A
    layers, messages, failure = select_layer_backends(
        cfg, layer_kinds(cfg), ctx.capability, layer_class=classes.of, query=query,
        select=lambda q, kind, forced, heads: be.select(q, ctx, forced, num_heads=heads,
                                                       sliding_window=kind.sliding_window is not None),
        fa_version=fa, after=lambda backend: _triton_fp8(cfg, backend, gpu, release), rule="B5")
    return layers, messages, before or failure or build_failure(cfg, before_layers=False, release=release) \
        or _tied_head(cfg, release)


#: quantization methods whose config gives a tied ``ParallelLMHead`` a linear method (excluded
#: or not: ``ModelOptQuantConfigBase.get_quant_method``), which cannot tie weights under F8a
_LINEAR_HEAD_QUANTIZATION = ("modelopt", "modelopt_fp4", "modelopt_mxfp8", "modelopt_mixed")


def _tied_head(cfg: Any, release: Any) -> StartFailure | None:
    """F8a until F8b (0.24.0 only): the lm_head ties to the embedding through its quantization
    method, and only the unquantized embedding method can: a tied lm_head that a ModelOpt
    checkpoint gives a linear method fails with a bare NotImplementedError."""
    if release is None or not release.has("F8a") or release.has("F8b"):
        return None
    mc = cfg.model_config
    if mc.quantization not in _LINEAR_HEAD_QUANTIZATION or \
            typed.attr(mc.hf_text_config, "tie_word_embeddings", typed.ANY) is not True:
        return None
    return StartFailure("build", "NotImplementedError", "",
                        "model_executor/layers/quantization/base_config.py in tie_weights",
                        f"the model ties its lm_head to the embedding, and vLLM {release} ties through the "
                        f"lm_head's quantization method: {mc.quantization} gives the lm_head a linear method, "
                        f"which cannot tie weights", "F8a")


def _non_ssm(layers: list[LayerBackend]) -> list[str]:
    """S0: the distinct backends of the attention layers, in layer order."""
    names: list[str] = []
    for lb in sorted(layers, key=lambda lb: lb.layer.position):
        if lb.layer.is_attention and lb.backend is not None and lb.backend not in names:
            names.append(lb.backend)
    return names


def _every_backend(release: Any) -> bool:
    """S0b/S1b (0.31.0): the start-up step weighs every distinct non-SSM backend of the model;
    before them only the first one."""
    return in_force(release, "S1b")


def preferred_block(cfg: Any, layers: list[LayerBackend], gpu: Any, release: Any = None
                    ) -> tuple[int, list[Decision], list[tuple[str, str]]]:
    """S0-S1: the block size the backends prefer, unless the user gave one (the default is the
    config's block size, the release's ``DEFAULT_BLOCK_SIZE`` when none was given); before
    S0b/S1b the first backend's alone, logged in the singular."""
    cc = cfg.cache_config
    names = _non_ssm(layers)
    if not names or cc.user_specified_block_size:
        return cc.block_size, [], []
    if not _every_backend(release):
        names = names[:1]
    ctx = context(cfg, gpu)
    if len(names) == 1:
        block = be.preferred_block_size(names[0], ctx, cc.block_size)
    else:
        block = be.common_block(names, ctx, cc.block_size)
        if block is None:
            sizes = "; ".join(f"{n}: {[s for s, _ in be.kernel_blocks(n, ctx)]}" for n in names)
            raise ValueError(f"The attention backends share no supported KV cache block size ({sizes}).")
    if block == cc.block_size:
        return block, [], []
    reason = (f"Setting kv cache block size to {block} for {'/'.join(names)} backend(s)."
              if _every_backend(release) else f"Setting kv cache block size to {block} for {names[0]} backend.")
    sizes = ", ".join(f"{n}: {[s for s, _ in be.kernel_blocks(n, ctx)]}" for n in names)
    return block, [Decision("block_size", cc.block_size, block, reason,
                            f"No --block-size was given; the attention layers run on {'/'.join(names)} "
                            f"(kernel blocks {sizes}), which prefer {block} tokens to the default "
                            f"{cc.block_size}.", "S1")], [("INFO", reason)]


def checkpoint_alignment(cfg: Any, gpu: Any) -> int | None:
    """B6: the lcm of the Mamba layers' prefill-checkpoint alignments (None as soon as one
    has none): Qwen's gated delta net exports checkpoints every 64 tokens in 'align' mode
    when its prefill runs on FlashInfer (compute capability 9.0; 10.x or 12.x with key heads
    of 128)."""
    mc, cc = cfg.model_config, cfg.cache_config
    info = mc.arch_info
    if info is None or info.state_kind is None:
        return None
    if info.state_kind != "gated_delta_net" or mc.architecture == "OlmoHybridForCausalLM":
        return None
    if cc.mamba_cache_mode != "align":
        return None
    cap = tuple(gpu.capability)
    head_k = typed.attr(mc.hf_text_config, "linear_key_head_dim", typed.INT)
    if cap == (9, 0) or (cap[0] in (10, 12) and head_k == 128):
        return 64
    return None


def checkpoint_blocks(cfg: Any, gpu: Any, release: Any = None) -> int:
    """K4: extra Mamba blocks per request in 'align' mode: one prefill checkpoint for Mamba2
    mixers (K4d), and for Qwen's gated delta net when it exports checkpoints (B6b); none in a
    *release* without those rules."""
    mc, cc = cfg.model_config, cfg.cache_config
    info = mc.arch_info
    if cc.mamba_cache_mode != "align" or info is None:
        return 0
    if not in_force(release, "K4d"):
        return 0
    if info.state_kind == "mamba2":
        return 1
    if not in_force(release, "B6b"):
        return 0
    return 1 if checkpoint_alignment(cfg, gpu) is not None else 0


def align_hybrid(cfg: Any, layers: list[LayerBackend], gpu: Any, block: int, *, release: Any = None
                 ) -> tuple[int, int | None, int | None, list[Decision], list[tuple[str, str]]]:
    """S2-S6 and S8 for a hybrid model under *release* (None: the latest): ``(block_size,
    mamba_block_size, mamba_page_size_padded, decisions, messages)``; raises vLLM's ValueError
    where S8 does.  Dated steps: the 'align' unit takes the Mamba prefill-checkpoint alignment
    from B6b/S3e; MLA's unit is at least 128 from S3b; until S3d the 'all' mode sizes the block
    in multiples of the Mamba chunk (or the user's Mamba block size) and no backend lcm rounds
    it; S8's check comes with S3d's lcm."""
    mc, cc = cfg.model_config, cfg.cache_config
    mbs, padded = cc.mamba_block_size, cc.mamba_page_size_padded
    names = _non_ssm(layers)
    if not names or not mc.is_hybrid:
        return block, mbs, padded, [], []
    ctx = context(cfg, gpu)
    facts = page_facts(cfg)
    attn1, mamba_page = facts["attn_page_size_1_token"], facts["mamba_page_size"]
    if mamba_page == 0:
        return block, mbs, padded, [], []
    decisions: list[Decision] = []
    messages: list[tuple[str, str]] = []
    has = functools.partial(in_force, release)
    first_min = be.smallest_kernel_block(names[0], ctx)
    align = max(first_min, block)
    words = [f"the alignment unit is max({names[0]}'s smallest kernel block {first_min}, the block size "
             f"{block}) = {align}"]
    if mc.use_mla and has("S3b"):
        align = max(align, 128)
        words.append(f"MLA: at least 128, {align}")
    checkpoints = has("S3e")  # B6b/S3e: before them the unit ignores the checkpoint alignment
    ckpt = checkpoint_alignment(cfg, gpu) if cc.mamba_cache_mode == "align" and checkpoints else None
    if cc.mamba_cache_mode == "align":
        before = align
        align = math.lcm(align, ckpt or 1)
        if ckpt:
            words.append(f"in 'align' mode lcm with the Mamba prefill-checkpoint alignment {ckpt}: "
                         f"lcm({before}, {ckpt}) = {align}")
    need = -(-mamba_page // attn1)
    if cc.mamba_cache_mode == "all" and not has("S3d"):
        given = cfg.engine_args.get("mamba_block_size")
        base = given or mc.mamba_chunk_size
        chunk = math.lcm(base, align)
        words.append(f"in 'all' mode a multiple of lcm({'the Mamba block size you gave' if given else 'the Mamba chunk size'} "
                     f"{base}, {align}) = {chunk}")
        attn_block = chunk * -(-need // chunk)
    else:
        attn_block = align * -(-mamba_page // (align * attn1))
    if has("S3d"):
        backend_align = math.lcm(*(be.smallest_kernel_block(n, ctx) for n in names))
        if attn_block % backend_align:
            words.append(f"rounded up to the lcm of the backends' smallest kernel blocks, {backend_align}")
            attn_block = backend_align * -(-attn_block // backend_align)
    rule = (f"One Mamba state page is {mamba_page:,} bytes and an attention token {attn1:,} bytes, so a page "
            f"needs {need:,} tokens; {'; '.join(words)}; the smallest multiple of it that holds the Mamba "
            f"page is {attn_block:,} tokens.")
    if cc.mamba_cache_mode == "all" and not has("S3d") and mbs != attn_block:
        decisions.append(Decision("mamba_block_size", mbs, attn_block,
                                  f"'all' mode: Mamba blocks of {attn_block} tokens, a multiple of the Mamba chunk "
                                  f"that covers the Mamba page",
                                  rule + f" A Mamba block spans those {attn_block:,} tokens.", "S3a"))
        mbs = attn_block
    old = block
    if block < attn_block:
        block = attn_block
        reason = (f"Setting attention block size to {attn_block} tokens to ensure that attention page size is "
                  f">= mamba page size.")
        messages.append(("INFO", reason))
        decisions.append(Decision("block_size", old, block, reason,
                                  rule + f" The block size {old} was smaller, so it becomes {block:,}"
                                  + (" (this overrides --block-size)" if cc.user_specified_block_size else "")
                                  + ".", "S4"))
    if cc.mamba_cache_mode == "align" and mbs != block:
        decisions.append(Decision("mamba_block_size", mbs, block,
                                  f"'align' mode: the Mamba block size equals the block size ({block})",
                                  f"In 'align' mode a Mamba block is exactly one attention block: {block:,} tokens.",
                                  "S5"))
        mbs = block
    attn_page = block * attn1
    if attn_page < mamba_page:
        raise AssertionError("the attention page does not hold the Mamba page")
    if attn_page != mamba_page and padded != attn_page:
        pct = 100 * (attn_page - mamba_page) / mamba_page
        reason = (f"Padding mamba page size by {pct:.2f}% to ensure that mamba page size and attention page size "
                  f"are exactly equal.")
        messages.append(("INFO", reason))
        decisions.append(Decision("mamba_page_size_padded", padded, attn_page, reason,
                                  f"Pages of both kinds share one pool: the attention page is {block:,} x "
                                  f"{attn1:,} = {attn_page:,} bytes and the Mamba state page {mamba_page:,} "
                                  f"bytes, so the Mamba page is padded by {attn_page - mamba_page:,} bytes "
                                  f"({pct:.2f}% of the state).", "S6"))
        padded = attn_page
    if block != old and has("S8"):
        refusing = [n for n in names if not be019.supports_block_size(be.kernel_blocks(n, ctx), block)]
        if refusing:
            raise ValueError(f"Aligned KV cache block size {block} is not supported by attention backend(s): "
                             f"{', '.join(refusing)}.")
    return block, mbs, padded, decisions, messages


def validate_block_size(cfg: Any, padded: int | None, engine_block: int | None = None, gpu: Any = None,
                        release: Any = None) -> StartFailure | None:
    """C9.6 and F6 after the KV planning: a real Mamba state must fit its padded page; in
    'align' mode, until C9.6 (0.27.0), the block the engine wrote back (*engine_block*) must fit
    one scheduling step; and chunked multimodal input must stay on (a multimodal prefix-LM
    model turns it off)."""
    mc, cc = cfg.model_config, cfg.cache_config
    if mc.is_hybrid:
        failure = state_page_failure(cfg, padded, page_facts(cfg)["mamba_page_size"])
        if failure is not None:
            return StartFailure(failure.step, failure.vllm_type, failure.message,
                                "v1/kv_cache_interface.py in MambaSpec.page_size_bytes", failure.reason, "F6")
    from enginecfg.pipeline import releases

    if (cc.mamba_cache_mode == "align" and engine_block is not None and release is not None
            and not release.has("C9.6")):
        budget = config_time.max_num_batched_tokens(cfg, gpu, release)
        if engine_block > budget:
            return StartFailure("start", "AssertionError",
                                f"In Mamba cache align mode, block_size ({engine_block}) must be <= "
                                f"max_num_batched_tokens ({budget}).",
                                "config/vllm.py in VllmConfig.validate_block_size",
                                f"in 'align' mode a scheduling step must hold a whole block: the block of "
                                f"{engine_block:,} tokens is larger than the step's {budget:,} tokens (dropped "
                                f"in {releases.brought_by('C9.6')})", "C9.6")
    if cc.mamba_cache_mode == "align" and config_time.is_mm_prefix_lm(cfg):
        return StartFailure("start", "AssertionError",
                            "Chunked MM input is required because we need the flexibility to schedule a multiple "
                            "of block_size tokens even if they are in the middle of a mm input",
                            "config/vllm.py in VllmConfig.validate_block_size",
                            "'align' mode needs chunked multimodal input, which a multimodal prefix-LM model "
                            "turns off", "C9.6")
    return None
