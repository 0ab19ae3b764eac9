"""Mamba state shapes, dtypes and page sizes, computed as vLLM 0.19.0 computes them.

The hybrid alignment sizes the attention block so that one attention page holds at least
one Mamba page.  The Mamba page is the sum, over the layer's state tensors, of the
elements of each per-rank shape times the element size of its dtype; shapes come from one
of six calculators (mamba1, mamba2, short_conv, gated_delta_net, kda, linear_attention)
fed with config fields that differ per architecture (the ``state_recipe`` of
:class:`~enginecfg.pipeline.models.architectures.ArchInfo`).

Configs are read through an "hf view": any object whose attributes are the config's
fields (sub-configs are nested objects of the same kind).  Fields are read the way vLLM
reads them, with no defaults of our own.  Where vLLM would stop with an internal
AttributeError or TypeError (a field absent from the config, a None where a number is
multiplied), enginecfg raises :class:`InvalidInputError` naming the field, what was given
and what is needed.  Where vLLM's ``divide`` asserts, the :class:`ConfigRejectedError`
carries vLLM's exact ``"<n> is not divisible by <d>"``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Callable, Sequence

from enginecfg.pipeline.models.architectures import ArchInfo
from enginecfg.pipeline.models.dtypes import dtype_size, kv_cache_torch_dtype, str_dtype
from enginecfg.pipeline.hf import typed
from enginecfg.pipeline.errors import ConfigRejectedError, InvalidInputError

__all__ = [
    "Shape",
    "divide",
    "extra_groups_for_head_shards",
    "mamba1_state_shape",
    "mamba2_state_shape",
    "short_conv_state_shape",
    "gated_delta_net_state_shape",
    "kda_state_shape",
    "linear_attention_state_shape",
    "state_config",
    "StateShape",
    "state_shapes",
    "state_dtypes",
    "page_size",
    "attention_page_size_1_token",
    "kernel_block_alignment",
    "mamba_chunk_size",
    "state_crash",
]

Shape = tuple[int, ...]


class StateShape(tuple):
    """A state tensor's per-rank shape, with its dimensions named.

    It is the plain tuple vLLM computes (equal to it, hashed like it, a list of ints in JSON),
    and it also says what each dimension is (``shape.dim("head_dim")``) and carries the
    per-rank facts a kernel needs that the shape alone does not show (``shape.meta``: the
    Mamba2 groups per rank, the gated-delta key heads per rank), so that GPU validation
    reads them instead of working them back out of ``conv_dim``.
    """

    names: tuple[str, ...]
    meta: dict[str, int]

    def __new__(cls, dims: dict[str, int], **meta: int) -> "StateShape":
        shape = super().__new__(cls, dims.values())
        shape.names = tuple(dims)
        shape.meta = meta
        return shape

    def dim(self, name: str) -> int:
        return self[self.names.index(name)]

    def __getnewargs__(self):  # copy/pickle rebuild it from its named dimensions
        return (dict(zip(self.names, self)),)

_TP_FIELD = "parallel_config.tensor_parallel_size"


# --------------------------------------------------------------------------------------
# The calculators (pure arithmetic; vLLM's order of shapes and of divisibility checks)
# --------------------------------------------------------------------------------------

def divide(numerator: int, denominator: int) -> int:
    """``numerator // denominator``, refusing a remainder with vLLM's assertion text."""
    if numerator % denominator != 0:
        raise ConfigRejectedError(f"{numerator} is not divisible by {denominator}",
                                  field=_TP_FIELD, vllm_type="AssertionError")
    return numerator // denominator


def extra_groups_for_head_shards(n_groups: int, tp: int) -> int:
    """Groups added so every rank holds whole groups: 0 if tp divides n_groups, else tp - n_groups.

    The result is negative when n_groups > tp (3 groups at TP 2 become 2): vLLM's rule,
    kept as it is because page sizes depend on it.
    """
    if n_groups % tp == 0:
        return 0
    return tp - n_groups


def mamba1_state_shape(tp: int, intermediate_size: int, state_size: int,
                       conv_kernel: int) -> tuple[Shape, Shape]:
    """Mamba1: conv ``(K-1, I/tp)``, temporal ``(I/tp, state)``."""
    conv = StateShape({"conv_width": conv_kernel - 1, "conv_dim": divide(intermediate_size, tp)})
    temporal = StateShape({"intermediate": divide(intermediate_size, tp), "state_size": state_size})
    return conv, temporal


def mamba2_state_shape(tp: int, intermediate_size: int, n_groups: int, num_heads: int,
                       head_dim: int, state_size: int, conv_kernel: int,
                       num_spec: int = 0) -> tuple[Shape, Shape]:
    """Mamba2: conv ``(K-1+spec, (I + 2*g'*state)/tp)``, temporal ``(heads/tp, head_dim, state)``."""
    groups = n_groups + extra_groups_for_head_shards(n_groups, tp)
    conv_dim = intermediate_size + 2 * groups * state_size
    conv = StateShape({"conv_width": conv_kernel - 1 + num_spec, "conv_dim": divide(conv_dim, tp)})
    temporal = StateShape({"heads": divide(num_heads, tp), "head_dim": head_dim, "state_size": state_size},
                          groups=max(groups // tp, 1))
    return conv, temporal


def short_conv_state_shape(tp: int, intermediate_size: int, conv_kernel: int) -> tuple[Shape]:
    """Short convolution (LFM2): one conv state ``(K-1, I/tp)``."""
    return (StateShape({"conv_width": conv_kernel - 1, "conv_dim": divide(intermediate_size, tp)}),)


def gated_delta_net_state_shape(tp: int, num_k_heads: int, num_v_heads: int, head_k_dim: int,
                                head_v_dim: int, conv_kernel: int,
                                num_spec: int = 0) -> tuple[Shape, Shape]:
    """Gated delta net: conv ``(K-1+spec, (2*dk*nk + dv*nv)/tp)``, temporal ``(nv/tp, dv, dk)``."""
    conv_dim = 2 * head_k_dim * num_k_heads + head_v_dim * num_v_heads
    conv = StateShape({"conv_width": conv_kernel - 1 + num_spec, "conv_dim": divide(conv_dim, tp)})
    temporal = StateShape({"v_heads": divide(num_v_heads, tp), "head_v_dim": head_v_dim,
                           "head_k_dim": head_k_dim}, k_heads=max(num_k_heads // tp, 1))
    return conv, temporal


def kda_state_shape(tp: int, num_heads: int, head_dim: int, num_k_heads: int | None = None,
                    head_k_dim: int | None = None, conv_kernel: int = 4,
                    num_spec: int = 0) -> tuple[Shape, Shape, Shape, Shape]:
    """Kimi delta attention: q-conv, k-conv twice, recurrent ``(H/tp, D, D)``.

    ``num_spec`` is accepted and ignored, as in vLLM.
    """
    del num_spec
    k_heads = num_heads if num_k_heads is None else num_k_heads
    k_dim = head_dim if head_k_dim is None else head_k_dim
    q_conv = StateShape({"conv_width": conv_kernel - 1, "conv_dim": divide(num_heads * head_dim, tp)})
    k_conv = StateShape({"conv_width": conv_kernel - 1, "conv_dim": divide(k_heads * k_dim, tp)})
    recurrent = StateShape({"heads": divide(num_heads, tp), "head_dim": head_dim, "head_dim_v": head_dim})
    return q_conv, k_conv, k_conv, recurrent


def linear_attention_state_shape(num_heads: int, tp: int, head_dim: int) -> tuple[Shape]:
    """Lightning attention (MiniMax, Bailing): ``(heads // tp, D, D)``, floor division, no check."""
    return (StateShape({"heads": num_heads // tp, "head_dim": head_dim, "head_dim_v": head_dim}),)


# --------------------------------------------------------------------------------------
# Reading config fields the way vLLM does, with clear errors where vLLM would crash
# --------------------------------------------------------------------------------------

class _Reader:
    """The fields one architecture's state recipe reads, through :class:`typed.Section`.

    Every read names the dotted field, the value and what is allowed, and says what reads it
    (the config class and architecture, the state it sizes)."""

    def __init__(self, cfg: Any, path: str, arch: str, kind: str):
        model_type = typed.attr(cfg, "model_type", typed.ANY)
        # The enginecfg view knows the transformers class it was taken from.
        class_name = typed.attr(cfg, "class_name", typed.ANY)
        if not isinstance(class_name, str) or not class_name:
            class_name = None
        if isinstance(model_type, str) and model_type:
            label = f"{class_name} ({model_type})" if class_name else model_type
        else:
            label = class_name or type(cfg).__name__
        self.sec = typed.Section(
            cfg, path, f"read from the {label} config of {arch}: vLLM 0.19.0 sizes the {kind} "
                       f"state with it and has no fallback; set it in config.json")

    def fail(self, field: str, given: Any, need: str) -> InvalidInputError:
        return self.sec.fail(field, given, need)

    def has(self, field: str) -> bool:
        return self.sec.has(field)

    def raw(self, field: str) -> Any:
        """The value, of any type (the caller checks it); absent is an error."""
        if not self.sec.has(field):
            raise self.fail(field, typed.ABSENT, _COUNT)
        return self.sec.attr(field, typed.ANY)

    def check_int(self, field: str, value: Any) -> int:
        """``value`` as an int: integral floats are accepted (vLLM would compute with them)."""
        # true / false count as 1 / 0: vLLM computes with them as Python does
        value = self.sec.check(field, value, typed.INT, typed.NUMBER, typed.BOOL, optional=False,
                               allowed=lambda v: v >= 0 and float(v).is_integer(), expect=_COUNT)
        return int(value)

    def int(self, field: str) -> int:
        return self.check_int(field, self.raw(field))

    def number(self, field: str) -> int | float:
        return self.sec.attr(field, typed.NUMBER, required=True, optional=False,
                             allowed=lambda v: v >= 0, expect="a non-negative number")

    def product(self, left: str, right: str) -> int:
        """``left * right`` of two config fields (e.g. expand * hidden_size) as an int."""
        value = self.number(left) * self.int(right)
        if isinstance(value, float):
            if not value.is_integer():
                raise self.fail(left, self.number(left),
                                f"a value that makes {left} * {right} a whole number")
            value = int(value)
        return value

    def item(self, mapping_field: str, key: str) -> int:
        """``cfg.<mapping_field>[key]``: a JSON object (as transformers stores it) or a nested view."""
        container = self.raw(mapping_field)
        if container is None:
            raise self.fail(mapping_field, None, f"a JSON object with {key!r}")
        name = f"{mapping_field}.{key}"
        if isinstance(container, Mapping):
            value = typed.key(container, self.sec.field(mapping_field), key, typed.ANY,
                              default=typed.ABSENT)
        else:
            value = typed.attr(container, key, typed.ANY, default=typed.ABSENT)
        if value is typed.ABSENT:
            raise self.fail(name, typed.ABSENT, _COUNT)
        return self.check_int(name, value)


_COUNT = "a non-negative integer"


def _auto_head_dim(r: _Reader, field: str, width: int, heads_field: str) -> int:
    """A ``mamba_d_head`` that is still the string "auto": ``width // heads``, as the config class does."""
    value = r.raw(field)
    if value == "auto":
        heads = r.int(heads_field)
        if heads == 0:
            raise r.fail(heads_field, heads, "a positive integer (mamba_d_head is 'auto')")
        return width // heads
    return r.check_int(field, value)


# Recipes: (reader, tp, num_spec) -> shapes.  num_spec is already 0 where the
# architecture's config-level shape does not take speculative tokens.

def _bamba(r: _Reader, tp: int, ns: int) -> tuple[Shape, ...]:
    # BambaConfig / GraniteMoeHybridConfig field names.
    width = r.product("mamba_expand", "hidden_size")
    return mamba2_state_shape(
        tp, width, r.int("mamba_n_groups"), r.int("mamba_n_heads"),
        _auto_head_dim(r, "mamba_d_head", width, "mamba_n_heads"), r.int("mamba_d_state"),
        r.int("mamba_d_conv"), ns)


def _falcon_h1(r: _Reader, tp: int, ns: int) -> tuple[Shape, ...]:
    # Intermediate size is mamba_d_ssm unless that is None; an "auto" head dim follows
    # transformers 5.x (the intermediate size over the heads).
    d_ssm = r.raw("mamba_d_ssm")
    width = r.product("mamba_expand", "hidden_size") if d_ssm is None \
        else r.check_int("mamba_d_ssm", d_ssm)
    return mamba2_state_shape(
        tp, width, r.int("mamba_n_groups"), r.int("mamba_n_heads"),
        _auto_head_dim(r, "mamba_d_head", width, "mamba_n_heads"), r.int("mamba_d_state"),
        r.int("mamba_d_conv"), ns)


def _nemotron_h(r: _Reader, tp: int, ns: int) -> tuple[Shape, ...]:
    heads, head_dim = r.int("mamba_num_heads"), r.int("mamba_head_dim")
    return mamba2_state_shape(tp, heads * head_dim, r.int("n_groups"), heads, head_dim,
                              r.int("ssm_state_size"), r.int("conv_kernel"), ns)


def _zamba2(r: _Reader, tp: int, ns: int) -> tuple[Shape, ...]:
    return mamba2_state_shape(
        tp, r.product("mamba_expand", "hidden_size"), r.int("mamba_ngroups"),
        r.int("n_mamba_heads"), r.int("mamba_headdim"), r.int("mamba_d_state"),
        r.int("mamba_d_conv"), ns)


def _plamo2(r: _Reader, tp: int, ns: int) -> tuple[Shape, ...]:
    # PLaMo2 hard-codes zero groups.
    heads, head_dim = r.int("mamba_num_heads"), r.int("hidden_size_per_head")
    return mamba2_state_shape(tp, heads * head_dim, 0, heads, head_dim, r.int("mamba_d_state"),
                              r.int("mamba_d_conv"), ns)


def _mamba2(r: _Reader, tp: int, ns: int) -> tuple[Shape, ...]:
    # Mamba2ForCausalLM uses expand * hidden_size, not the config's intermediate_size.
    return mamba2_state_shape(
        tp, r.product("expand", "hidden_size"), r.int("n_groups"), r.int("num_heads"),
        r.int("head_dim"), r.int("state_size"), r.int("conv_kernel"), ns)


def _jamba(r: _Reader, tp: int, ns: int) -> tuple[Shape, ...]:
    return mamba1_state_shape(tp, r.product("mamba_expand", "hidden_size"),
                              r.int("mamba_d_state"), r.int("mamba_d_conv"))


def _mamba(r: _Reader, tp: int, ns: int) -> tuple[Shape, ...]:
    return mamba1_state_shape(tp, r.int("intermediate_size"), r.int("state_size"),
                              r.int("conv_kernel"))


def _gdn(r: _Reader, tp: int, ns: int) -> tuple[Shape, ...]:
    return gated_delta_net_state_shape(
        tp, r.int("linear_num_key_heads"), r.int("linear_num_value_heads"),
        r.int("linear_key_head_dim"), r.int("linear_value_head_dim"),
        r.int("linear_conv_kernel_dim"), ns)


def _kimi_linear(r: _Reader, tp: int, ns: int) -> tuple[Shape, ...]:
    # Only num_heads, head_dim and the kernel are passed; the k-heads default to them.
    return kda_state_shape(
        tp, r.item("linear_attn_config", "num_heads"), r.item("linear_attn_config", "head_dim"),
        conv_kernel=r.item("linear_attn_config", "short_conv_kernel_size"), num_spec=ns)


def _lfm2(r: _Reader, tp: int, ns: int) -> tuple[Shape, ...]:
    return short_conv_state_shape(tp, r.int("conv_dim"), r.int("conv_L_cache"))


def _lfm2_moe(r: _Reader, tp: int, ns: int) -> tuple[Shape, ...]:
    return short_conv_state_shape(tp, r.int("hidden_size"), r.int("conv_L_cache"))


def _minimax(r: _Reader, tp: int, ns: int) -> tuple[Shape, ...]:
    # head_dim is read directly: MiniMaxConfig's default None is refused here.
    return linear_attention_state_shape(r.int("num_attention_heads"), tp, r.int("head_dim"))


def _bailing(r: _Reader, tp: int, ns: int) -> tuple[Shape, ...]:
    # head_dim if the attribute exists (a present None is an error), else hidden / heads.
    heads = r.int("num_attention_heads")
    if r.has("head_dim"):
        head_dim = r.int("head_dim")
    else:
        if heads == 0:
            raise r.fail("num_attention_heads", heads, "a positive integer (no head_dim given)")
        head_dim = r.int("hidden_size") // heads
    return linear_attention_state_shape(heads, tp, head_dim)


_RECIPES: Mapping[str, Callable[[_Reader, int, int], tuple[Shape, ...]]] = {
    "bamba": _bamba,
    "falcon_h1": _falcon_h1,
    "nemotron_h": _nemotron_h,
    "zamba2": _zamba2,
    "plamo2": _plamo2,
    "mamba2": _mamba2,
    "jamba": _jamba,
    "mamba": _mamba,
    "gdn": _gdn,
    "kimi_linear": _kimi_linear,
    "lfm2": _lfm2,
    "lfm2_moe": _lfm2_moe,
    "minimax": _minimax,
    "bailing": _bailing,
}

_KIND_WORDS = {
    "mamba1": "Mamba1", "mamba2": "Mamba2", "short_conv": "short-conv",
    "gated_delta_net": "gated-delta-net", "kda": "KDA", "linear_attention": "linear-attention",
}


def state_config(info: ArchInfo, hf_config: Any, hf_text_config: Any) -> tuple[Any, str]:
    """The config object an architecture's state recipe reads, and its dotted path."""
    source = info.state_source
    if source == "hf_config":
        return hf_config, "hf_config"
    if source == "hf_text_config":
        return hf_text_config, "hf_text_config"
    if source in ("text_config", "nano_vl"):
        sub = typed.attr(hf_config, "text_config", typed.ANY)
        if sub is None:
            raise InvalidInputError(
                f"invalid hf_config.text_config: the config of {info.name} has no text_config; "
                f"given: absent; needed: the language-model sub-config, which sizes its "
                f"{_KIND_WORDS.get(info.state_kind or '', 'Mamba')} state",
                field="hf_config.text_config")
        return sub, "hf_config.text_config"
    raise ValueError(f"{info.name} has no state source")


def _check_count(value: Any, field: str, allowed: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError.for_value(field, value, allowed)
    return value


def state_shapes(info: ArchInfo, hf_config: Any, hf_text_config: Any, tp: int,
                 num_spec: int = 0) -> tuple[Shape, ...]:
    """Per-rank Mamba state shapes of one layer, in vLLM's order.

    ``num_spec`` is the number of speculative tokens; it is applied only where the
    architecture's config-level shape takes it (``info.num_spec_source`` not ``none``).
    An architecture without Mamba state gives ``()`` (page size 0).
    """
    tp = _check_count(tp, _TP_FIELD, "a positive integer")
    if tp < 1:
        raise InvalidInputError.for_value(_TP_FIELD, tp, "a positive integer")
    num_spec = _check_count(num_spec, "speculative_config.num_speculative_tokens",
                            "a non-negative integer")
    if num_spec < 0:
        raise InvalidInputError.for_value("speculative_config.num_speculative_tokens", num_spec,
                                          "a non-negative integer")
    if info.state_kind is None or info.state_recipe is None:
        return ()
    cfg, path = state_config(info, hf_config, hf_text_config)
    reader = _Reader(cfg, path, info.name, _KIND_WORDS[info.state_kind])
    spec = num_spec if info.num_spec_source != "none" else 0
    return tuple(_RECIPES[info.state_recipe](reader, tp, spec))


def state_crash(info: ArchInfo, hf_config: Any, hf_text_config: Any) -> tuple[str, str] | None:
    """What vLLM itself raises, ``(type, message)``, when it sizes this model's state from a
    config that :func:`state_shapes` refuses, where that is known; None otherwise.

    Known: MiniMax's linear-attention recipe puts ``head_dim`` into the shape as it stands, so a
    ``head_dim`` of None (``MiniMaxConfig``'s default) reaches the page-size product, where
    Python refuses to multiply by None."""
    if info.state_recipe != "minimax":
        return None
    cfg, _ = state_config(info, hf_config, hf_text_config)
    if typed.attr(cfg, "head_dim", typed.ANY, default=typed.ABSENT) is None:
        return "TypeError", "unsupported operand type(s) for *: 'int' and 'NoneType'"
    return None


def state_dtypes(info: ArchInfo, model_dtype: str, mamba_cache_dtype: str,
                 mamba_ssm_cache_dtype: str) -> tuple[str, ...]:
    """Canonical dtype names of the state tensors, parallel to :func:`state_shapes`.

    ``mamba_cache_dtype`` "auto" means the model dtype; ``mamba_ssm_cache_dtype`` "auto"
    means the conv dtype.  KDA keeps its recurrent state in float32 and, like linear
    attention, ignores the ssm dtype.
    """
    kind = info.state_kind
    if kind is None:
        return ()
    if kind == "linear_attention" and mamba_cache_dtype == "float32":
        raise ConfigRejectedError("fp32 state for minimax is not yet supported",
                                  field="cache_config.mamba_cache_dtype")
    conv = kv_cache_torch_dtype(mamba_cache_dtype, model_dtype)
    if kind in ("short_conv", "linear_attention"):
        return (conv,)
    if kind == "kda":
        return (conv, conv, conv, "float32")
    if mamba_ssm_cache_dtype == "auto":
        ssm = conv
    else:
        ssm = str_dtype(mamba_ssm_cache_dtype, field="cache_config.mamba_ssm_cache_dtype")
    return (conv, ssm)


def page_size(shapes: Sequence[Sequence[int]], dtypes: Sequence[str]) -> int:
    """MambaSpec page size: sum over ``zip(shapes, dtypes)`` of elements times element size."""
    return sum(math.prod(shape) * dtype_size(dtype) for shape, dtype in zip(shapes, dtypes))


def attention_page_size_1_token(use_mla: bool, num_kv_heads: int, head_size: int,
                                kv_dtype: str) -> int:
    """Bytes one token takes in one attention layer's page, as the hybrid alignment sizes it.

    Full attention stores K and V (factor 2); MLA stores one latent vector.  The MLA
    fp8_ds_mla 656-byte rule is not applied: the hybrid step does not pass the cache dtype
    string, so vLLM does not apply it there either.
    """
    per_token = num_kv_heads * head_size * dtype_size(kv_dtype)
    return per_token if use_mla else 2 * per_token


def kernel_block_alignment(use_mla: bool, backend: str | None) -> int:
    """The attention block-size multiple: 128 for MLA on CUTLASS_MLA, 64 for other MLA, else 16.

    ``backend`` is the backend the caller configured (None when left automatic; vLLM's
    later automatic choice does not count).
    """
    if not use_mla:
        return 16
    if isinstance(backend, str) and backend.upper() == "CUTLASS_MLA":
        return 128
    return 64


def mamba_chunk_size(hf_text_config: Any) -> int:
    """``ModelConfig.get_mamba_chunk_size``: mamba_chunk_size, else chunk_size, else 2048."""
    for field in ("mamba_chunk_size", "chunk_size"):
        value = typed.attr(hf_text_config, field, typed.INT)
        if value is not None:
            return value
    return 2048
