"""The KV-cache spec each layer of a model declares, from the resolved config.

vLLM learns what a layer keeps per token only when it builds the model: every attention
layer and every Mamba-like mixer reports a ``KVCacheSpec`` (full attention, sliding window,
MLA, or a recurrent-state page).  Which layers are which is written in each model class's
constructor, driven by per-layer config patterns (``layer_types``, ``layers_block_type``,
``hybrid_override_pattern``, Gemma 4's sliding/global split with its own head sizes, ...).
This module is that knowledge as small functions, one per layer pattern (:data:`LAYOUTS`);
each row of the architecture table names its pattern (``ArchInfo.kv_layout``), so that
:mod:`enginecfg.pipeline.models.kv_cache` can do vLLM's capacity arithmetic on it.

Layer names and their order are vLLM's (checked against the built model classes,
``tests/kv_oracle/model_layers.json``): they decide which layers share a KV-cache group.

Block sizes are the engine start's (``Platform.update_block_size_for_backend``): on an H200
every backend vLLM picks for these models takes the 16-token default, and a hybrid model
whose block size the caller did not set starts its attention layers at 16 tokens, which the
page unification then grows to the aligned block size the config resolved.

transformers 5.x renames some patterns (``layers_block_type`` of Bamba and Zamba2 reads
``linear_attention``/``full_attention``/``hybrid``); both spellings are accepted.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

from enginecfg.pipeline.errors import InvalidInputError
from enginecfg.pipeline.hf import ContentMemo, memoised, typed
from enginecfg.pipeline.models import mamba_state
from enginecfg.pipeline.models.architectures import ARCHITECTURES
from enginecfg.pipeline.models.dtypes import attention_kv_dtype
from enginecfg.pipeline.models.engine_defaults import DEFAULT_BLOCK_SIZE, is_causal
from enginecfg.pipeline.models.kv_cache import (FullAttentionSpec, MambaSpec, MLAAttentionSpec,
                                                SlidingWindowSpec, Spec)

__all__ = ["layer_specs", "engine_block_size", "LAYOUTS", "MAMBA_TYPES", "PATTERNS"]

#: the ``mamba_type`` string each state kind's layer reports
MAMBA_TYPES = {
    "mamba1": "mamba1", "mamba2": "mamba2", "gated_delta_net": "gdn_attention",
    "kda": "gdn_attention", "short_conv": "short_conv", "linear_attention": "linear_attention",
}

_ATTENTION_WORDS = {"attention", "full_attention", "*"}
_MAMBA_WORDS = {"mamba", "linear_attention", "M", "conv"}


def engine_block_size(cfg) -> int:
    """The attention block size the layers declare at engine start (see the module doc)."""
    mc, cc = cfg.model_config, cfg.cache_config
    if mc.is_hybrid and not cc.user_specified_block_size:
        return DEFAULT_BLOCK_SIZE
    return cc.block_size


class _Builder:
    """Collects ``{layer name: spec}`` in module construction order."""

    def __init__(self, cfg, prefix: str = "", block_size: int | None = None):
        mc, cc = cfg.model_config, cfg.cache_config
        self.cfg = cfg
        self.tp = cfg.parallel_config.tensor_parallel_size
        self.text = mc.hf_text_config
        self.kv_dtype = attention_kv_dtype(cc.cache_dtype, mc.dtype)
        self.block = engine_block_size(cfg) if block_size is None else block_size
        self.specs: dict[str, Spec] = {}
        #: where the class keeps the decoder (``language_model.`` for multimodal classes)
        self.prefix = prefix
        self._mamba: MambaSpec | None = None

    @property
    def _sec(self) -> typed.Section:
        """The text config, read for this builder (errors say the layer pattern reads it)."""
        arch = self.cfg.model_config.architecture
        return typed.Section(self.text, "hf_config",
                             f"the {arch} layer pattern reads it to size the KV cache")

    def opt(self, field: str, minimum: int = 1) -> int | None:
        """An optional integer field (None when absent or null)."""
        return self._sec.attr(field, typed.INT, allowed=lambda v: v >= minimum,
                              expect=f"an integer >= {minimum}")

    def need(self, field: str, minimum: int = 1) -> int:
        """A required integer field."""
        value = self.opt(field, minimum)
        if value is None:
            raise self._sec.fail(field, None, f"an integer >= {minimum} (it is absent)")
        return value

    def flag(self, field: str) -> Any:
        """A field tested for truth (any value, as the model class tests it)."""
        return self._sec.attr(field, typed.ANY)

    def pattern(self, field: str, *, optional: bool = False) -> Sequence[Any] | None:
        """A per-layer pattern: a list of names (or a string of one-letter codes)."""
        return self._sec.attr(
            field, typed.STR, typed.LIST, optional=optional, required=not optional,
            allowed=lambda v: isinstance(v, str) or all(
                isinstance(x, (str, int)) and not isinstance(x, bool) for x in v),
            expect="a list of per-layer kinds")

    def attention(self, name: str, total_kv: int, head: int, sliding: int | None = None,
                  *, replicate: bool = True) -> None:
        kv = max(1, total_kv // self.tp) if replicate else total_kv
        if sliding is not None:
            self.specs[name] = SlidingWindowSpec(block_size=self.block, num_kv_heads=kv,
                                                 head_size=head, dtype=self.kv_dtype,
                                                 sliding_window=sliding)
        else:
            self.specs[name] = FullAttentionSpec(block_size=self.block, num_kv_heads=kv,
                                                 head_size=head, dtype=self.kv_dtype)

    def mamba(self, name: str) -> None:
        if self._mamba is None:
            mc, cc = self.cfg.model_config, self.cfg.cache_config
            info = mc.arch_info
            shapes = mamba_state.state_shapes(info, mc.hf_config, mc.hf_text_config, self.tp)
            dtypes = mamba_state.state_dtypes(info, mc.dtype, cc.mamba_cache_dtype,
                                              cc.mamba_ssm_cache_dtype)
            self._mamba = MambaSpec(
                block_size=cc.mamba_block_size if cc.mamba_block_size is not None else mc.max_model_len,
                shapes=tuple(tuple(s) for s in shapes), dtypes=tuple(dtypes),
                page_size_padded=cc.mamba_page_size_padded,
                mamba_type=MAMBA_TYPES[info.state_kind], mamba_cache_mode=cc.mamba_cache_mode)
        self.specs[name] = self._mamba

    def head_dim(self, heads_field: str = "num_attention_heads") -> int:
        hd = self.opt("head_dim")
        return hd if hd is not None else self.need("hidden_size") // self.need(heads_field)


# --------------------------------------------------------------------------- layouts
def _all_mamba(b: _Builder) -> None:
    for i in range(b.need("num_hidden_layers", minimum=0)):
        b.mamba(f"backbone.layers.{i}.mixer")


def _block_types(b: _Builder) -> None:
    """Jamba, Bamba, GraniteMoeHybrid: one mixer per layer, named by the pattern."""
    head = b.need("hidden_size") // b.need("num_attention_heads")
    pattern = b.pattern("layers_block_type", optional=True) or b.pattern("layer_types")
    for i, kind in enumerate(pattern):
        if kind in _ATTENTION_WORDS:
            b.attention(f"model.layers.{i}.attn", b.need("num_key_value_heads"), head)
        elif kind in _MAMBA_WORDS:
            b.mamba(f"model.layers.{i}.mixer")


def _nemotron_h(b: _Builder) -> None:
    pattern = b.pattern("hybrid_override_pattern", optional=True)
    if pattern is None:
        pattern = b.pattern("layers_block_type")
    head = b.head_dim()
    sliding = b.opt("sliding_window")
    for i, kind in enumerate(pattern):
        if kind in ("M", "mamba", "linear_attention"):
            b.mamba(f"model.layers.{i}.mixer")
        elif kind in ("*", "attention", "full_attention"):
            b.attention(f"model.layers.{i}.mixer.attn", b.need("num_key_value_heads"), head, sliding)


def _layer_types(b: _Builder) -> None:
    """Qwen3-Next and Qwen3.5: gated-delta-net or full attention per layer."""
    _gated_delta_or_attention(b, b.head_dim(), b.need("num_key_value_heads"))


def _olmo_hybrid(b: _Builder) -> None:
    """OLMo-hybrid: as Qwen3-Next, with the head size from the hidden size and KV heads
    defaulting to the attention heads."""
    head = b.need("hidden_size") // b.need("num_attention_heads")
    _gated_delta_or_attention(b, head, b.opt("num_key_value_heads") or b.need("num_attention_heads"))


def _gated_delta_or_attention(b: _Builder, head: int, total_kv: int) -> None:
    for i, kind in enumerate(b.pattern("layer_types")):
        if kind == "linear_attention":
            b.mamba(f"{b.prefix}model.layers.{i}.linear_attn")
        else:
            b.attention(f"{b.prefix}model.layers.{i}.self_attn.attn", total_kv, head)


def _short_conv(b: _Builder) -> None:
    """LFM2: short convolution, or full attention where ``layer_types`` says so."""
    head = b.need("hidden_size") // b.need("num_attention_heads")
    for i, kind in enumerate(b.pattern("layer_types")):
        if kind == "full_attention":
            b.attention(f"model.layers.{i}.self_attn.attn", b.need("num_key_value_heads"), head)
        else:
            b.mamba(f"model.layers.{i}.conv")


def _falcon_h1(b: _Builder) -> None:
    """Falcon-H1: every layer runs attention and a Mamba2 mixer side by side (vLLM numbers
    the mixers after the layers: ``model.{layers + i}.mixer``)."""
    head = b.head_dim()
    n = b.need("num_hidden_layers", minimum=0)
    for i in range(n):
        b.attention(f"model.layers.{i}.attn", b.need("num_key_value_heads"), head)
        b.mamba(f"model.{n + i}.mixer")


def _zamba2(b: _Builder) -> None:
    """Zamba2: Mamba2 in every layer; the shared transformer blocks (built first) own one
    attention KV cache per hybrid layer, without grouped KV heads."""
    pattern = b.pattern("layers_block_type")
    hybrid = [i for i, k in enumerate(pattern) if k == "hybrid"]
    for j in range(len(hybrid)):
        b.attention(f"model.attn.{j}", b.need("num_attention_heads"), b.need("attention_head_dim"))
    for i in range(len(pattern)):
        b.mamba(f"{len(hybrid) + i}.mixer")


def _plamo2(b: _Builder) -> None:
    step = b.need("mamba_step")
    n = b.need("num_hidden_layers")
    head = b.need("hidden_size_per_head")
    for i in range(n):
        is_mamba = True if n <= step // 2 else (i % step) != (step // 2)
        if is_mamba:
            b.mamba(f"model.layers.layers.{i}.mixer")
        else:
            b.attention(f"model.layers.layers.{i}.mixer.attn", b.need("num_key_value_heads"), head)


def _minimax(b: _Builder) -> None:
    pattern = b.pattern("attn_type_list", optional=True) or b.pattern("layer_types")
    head = b.head_dim()
    for i, kind in enumerate(pattern):
        if kind in (1, "full_attention", "attention"):
            b.attention(f"model.layers.{i}.self_attn.attn", b.need("num_key_value_heads"), head)
        else:
            b.mamba(f"model.layers.{i}.self_attn")


def _gemma4(b: _Builder) -> None:
    """Gemma 4: sliding layers (head_dim, num_key_value_heads) and global layers
    (global_head_dim; with attention_k_eq_v, num_global_key_value_heads); the last
    num_kv_shared_layers reuse an earlier layer's cache and declare none."""
    n = b.need("num_hidden_layers")
    shared = b.opt("num_kv_shared_layers", minimum=0) or 0
    for i, kind in enumerate(b.pattern("layer_types")):
        if shared > 0 and i >= n - shared:
            continue
        full = kind == "full_attention"
        head = (b.opt("global_head_dim") or b.need("head_dim")) if full else b.need("head_dim")
        kv = b.need("num_key_value_heads")
        if full and b.flag("attention_k_eq_v"):
            kv = b.opt("num_global_key_value_heads") or kv
        b.attention(f"{b.prefix}model.layers.{i}.self_attn.attn", kv, head,
                    None if full else b.need("sliding_window"))


def _mla(b: _Builder) -> None:
    mc, cc = b.cfg.model_config, b.cfg.cache_config
    for i in range(b.need("num_hidden_layers", minimum=0)):
        b.specs[f"model.layers.{i}.self_attn.attn"] = MLAAttentionSpec(
            block_size=b.block, num_kv_heads=1, head_size=mc.head_size, dtype=b.kv_dtype,
            cache_dtype_str=cc.cache_dtype)


def _decoder(b: _Builder) -> None:
    """A plain decoder: every layer full attention (encoder-only pooling models: none)."""
    mc = b.cfg.model_config
    if not is_causal(mc.hf_config):  # bidirectional: encoder-only attention keeps no KV cache
        return
    sliding = b.opt("sliding_window")
    for i in range(b.need("num_hidden_layers", minimum=0)):
        b.attention(f"model.layers.{i}.self_attn.attn", mc.num_kv_heads, mc.head_size, sliding,
                    replicate=False)


#: layer pattern (``ArchInfo.kv_layout``) -> the function that lays the layers out
LAYOUTS: dict[str, Callable[[_Builder], None]] = {
    "mamba_only": _all_mamba,
    "block_types": _block_types,
    "nemotron_h": _nemotron_h,
    "layer_types": _layer_types,
    "olmo_hybrid": _olmo_hybrid,
    "short_conv": _short_conv,
    "falcon_h1": _falcon_h1,
    "zamba2": _zamba2,
    "plamo2": _plamo2,
    "minimax": _minimax,
    "gemma4": _gemma4,
}


def layer_specs(cfg, block_size: int | None = None) -> dict[str, Spec]:
    """``{layer name: spec}`` for every layer that keeps KV cache or state, in the order the
    model class builds them.  An empty map means no KV cache (attention-free in vLLM's
    sense, or encoder-only attention).  *block_size*: the block size the attention layers
    declare, as the engine start decided it (:mod:`.startup`); None: :func:`engine_block_size`.

    The pattern is laid out once per config content (:data:`PATTERNS`) at the engine start's
    block size; another block size only moves the attention layers' ``block_size`` (a Mamba
    layer's block is the Mamba block size either way).
    """
    pattern = _pattern(cfg)
    if block_size is None or block_size == engine_block_size(cfg):
        return dict(pattern)
    moved: dict[int, Spec] = {}
    out: dict[str, Spec] = {}
    for name, spec in pattern:
        if isinstance(spec, MambaSpec):
            out[name] = spec
            continue
        new = moved.get(id(spec))
        if new is None:
            new = moved[id(spec)] = replace(spec, block_size=block_size)
        out[name] = new
    return out


#: the layer pattern of every config seen before in this process (pure in the config)
PATTERNS = ContentMemo(maxsize=256)


@memoised(PATTERNS)
def _pattern(cfg) -> tuple[tuple[str, Spec], ...]:
    """The layers of :func:`layer_specs` at :func:`engine_block_size`, as ``(name, spec)``
    pairs; equal specs are one object (the specs are frozen), so moving the block size
    replaces each distinct spec once."""
    mc = cfg.model_config
    row = ARCHITECTURES.get(mc.architecture or "")  # the registry name as the config spells it
    layout = LAYOUTS[row.kv_layout] if row is not None and row.kv_layout is not None else None
    b = _Builder(cfg, row.layer_prefix if row is not None else "")
    if layout is None:
        info = mc.arch_info
        if info is not None and info.family != "attention":
            if info.state_kind is None:
                return ()
            known = sorted(name for name, r in ARCHITECTURES.items() if r.kv_layout is not None)
            raise InvalidInputError(
                f"invalid model_config.architecture: {mc.architecture!r}; the per-layer KV-cache "
                f"pattern of this hybrid/recurrent class is not known to enginecfg (known: "
                f"{', '.join(known)})", field="model_config.architecture")
        layout = _mla if mc.use_mla else _decoder
    layout(b)
    one: dict[Spec, Spec] = {}
    return tuple((name, one.setdefault(spec, spec)) for name, spec in b.specs.items())
