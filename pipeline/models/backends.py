"""vLLM 0.19.0's attention backends on CUDA GPUs: which exist, what each accepts, and the order
they are tried in, as data.

When the engine starts, every attention layer asks vLLM's attention selector for a backend
with a :class:`Query` (its head size, the model dtype, the KV-cache dtype, the block size when
the user gave ``--block-size``, MLA or not, the attention type).  A backend named with
``--attention-backend`` (or by a config hook: Gemma 4's TRITON_ATTN) is checked alone and
its refusal is an error; otherwise the GPU's priority list (:func:`priorities`, by compute
capability) is tried in order and the first backend with no reason to refuse wins.  Each
backend's reasons are the ones vLLM gives, in vLLM's order of checks (head size, dtype, KV
dtype, block size, MLA, sinks, sparsity, compute capability, attention type, then the
backend's own combination check).  A backend then states its kernel block sizes (a fixed
size, or any multiple of one) and from them the block size it prefers.

:func:`select` is the selector; :data:`BACKENDS` the table.  The answers on an H200 are
checked against vLLM 0.19.0 itself (``tests/issue29_oracle/startup_summary.json``,
``selector_table``); the rows for other capabilities follow the same classes' code.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Callable, Mapping

import attrs

__all__ = ["Query", "Context", "Backend", "Selection", "BACKENDS", "priorities", "select",
           "flash_attn_version", "preferred_block_size", "supports_block_size", "reasons", "query_text",
           "DEFAULT_BLOCK_SIZE", "KernelBlock"]

#: the block size the engine starts from (``CacheConfig.DEFAULT_BLOCK_SIZE``)
DEFAULT_BLOCK_SIZE = 16


@attrs.frozen
class Query:
    """What one attention layer asks the selector (vLLM's ``AttentionSelectorConfig``)."""

    head_size: int
    dtype: str
    kv_cache_dtype: str
    block_size: int | None
    use_mla: bool
    attn_type: str = "decoder"
    has_sink: bool = False
    use_sparse: bool = False
    use_mm_prefix: bool = False


@attrs.frozen
class Context:
    """What the backends read besides the query: the GPU's compute capability, whether the
    model is a hybrid with a float32 Mamba state (FlashAttention then keeps to kernel blocks of
    16, 32 and 64), and the MLA ``qk_nope_head_dim`` FlashInfer-MLA checks."""

    capability: tuple[int, int]
    hybrid_fp32_state: bool = False
    qk_nope_head_dim: int | None = None


#: a kernel block size: (size, any multiple of it is fine)
KernelBlock = tuple[int, bool]


@attrs.frozen
class Backend:
    """One attention backend of vLLM 0.19.0: what it accepts (``None`` KV dtypes: any)."""

    name: str
    dtypes: tuple[str, ...]
    kv_dtypes: Callable[[str, Context], bool]
    head_size: Callable[[int], bool]
    kernel_blocks: Callable[[Context], tuple[KernelBlock, ...]]
    capability: Callable[[tuple[int, int]], bool]
    mla: bool = False
    sparse: bool = False
    attn_types: tuple[str, ...] = ("decoder",)
    mm_prefix: bool = False
    sinks: Callable[[Context], bool] = lambda ctx: False
    combination: Callable[[Query, Context], str | None] = lambda q, ctx: None


def flash_attn_version(capability: tuple[int, int], head_size: int | None = None) -> int:
    """The FlashAttention version vLLM 0.19.0 runs on a GPU: 3 on Hopper, 4 on Blackwell
    (2 there for heads over 128 other than 192), 2 elsewhere."""
    major = capability[0]
    version = 3 if major == 9 else 4 if major == 10 else 2
    if version == 4 and head_size is not None and head_size > 128 and head_size != 192:
        version = 2
    return version


def _kv(*names: str) -> Callable[[str, Context], bool]:
    allowed = frozenset(names)
    return lambda kv, ctx: kv in allowed


def _flash_attn_kv(kv: str, ctx: Context) -> bool:
    if kv.startswith("fp8"):  # FA3 on Hopper only
        return flash_attn_version(ctx.capability) == 3 and ctx.capability[0] == 9
    return kv in ("auto", "float16", "bfloat16")


def _flash_attn_blocks(ctx: Context) -> tuple[KernelBlock, ...]:
    if ctx.hybrid_fp32_state:
        return ((16, False), (32, False), (64, False))
    return ((16, True),)


def _flash_attn_combination(q: Query, ctx: Context) -> str | None:
    if q.has_sink and ctx.capability < (9, 0):
        return "sink not supported on compute capability < 9.0"
    return None


def _flashmla_combination(q: Query, ctx: Context) -> str | None:
    if q.use_sparse:
        return None if ctx.capability[0] in (9, 10) else \
            "FlashMLA Sparse is only supported on Hopper and Blackwell devices."
    return None if ctx.capability[0] == 9 else "FlashMLA Dense is only supported on Hopper devices."


def _flash_attn_mla_combination(q: Query, ctx: Context) -> str | None:
    return None if ctx.capability[0] == 9 else "FlashAttention MLA not supported on this device"


def _flashinfer_mla_combination(q: Query, ctx: Context) -> str | None:
    nope = 1 if ctx.qk_nope_head_dim is None else ctx.qk_nope_head_dim
    if nope not in (64, 128, 192):
        return f"FlashInfer MLA kernel requires qk_nope_head_dim in [64, 128, 192], but got {nope}"
    return None


_HALF = ("float16", "bfloat16")
_ANY_KV = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
_MLA_KV = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3")
_MLA_HEADS = (320, 576)

BACKENDS: Mapping[str, Backend] = MappingProxyType({b.name: b for b in (
    Backend("FLASH_ATTN", _HALF, _flash_attn_kv, lambda h: h % 8 == 0 and h <= 256, _flash_attn_blocks,
            lambda cap: cap >= (8, 0), attn_types=("decoder", "encoder", "encoder_only", "encoder_decoder"),
            sinks=lambda ctx: flash_attn_version(ctx.capability) == 3, combination=_flash_attn_combination),
    Backend("FLASHINFER", _HALF, _kv(*_ANY_KV), lambda h: h in (64, 128, 256),
            lambda ctx: ((16, False), (32, False), (64, False)), lambda cap: (7, 5) <= cap <= (12, 1),
            sinks=lambda ctx: ctx.capability[0] == 10),
    Backend("TRITON_ATTN", ("float16", "bfloat16", "float32"), _kv(*_ANY_KV), lambda h: h >= 32,
            lambda ctx: ((16, True),), lambda cap: True,
            attn_types=("decoder", "encoder", "encoder_only", "encoder_decoder"), mm_prefix=True,
            sinks=lambda ctx: True),
    Backend("FLEX_ATTENTION", ("float16", "bfloat16", "float32"), _kv("auto", "float16", "bfloat16"),
            lambda h: True, lambda ctx: ((1, True),), lambda cap: True,
            attn_types=("decoder", "encoder_only"), mm_prefix=True),
    Backend("FLASH_ATTN_MLA", _HALF, _kv("auto", "float16", "bfloat16"), lambda h: h in _MLA_HEADS,
            lambda ctx: ((16, True),), lambda cap: cap[0] == 9, mla=True,
            combination=_flash_attn_mla_combination),
    Backend("FLASHMLA", _HALF, _kv(*_MLA_KV), lambda h: h in _MLA_HEADS, lambda ctx: ((64, False),),
            lambda cap: cap[0] in (9, 10), mla=True, combination=_flashmla_combination),
    Backend("FLASHINFER_MLA", _HALF, _kv(*_MLA_KV), lambda h: h in _MLA_HEADS,
            lambda ctx: ((32, False), (64, False)), lambda cap: cap[0] == 10, mla=True,
            combination=_flashinfer_mla_combination),
    Backend("TRITON_MLA", _HALF, _kv(*_MLA_KV), lambda h: True, lambda ctx: ((16, True),),
            lambda cap: True, mla=True),
    Backend("CUTLASS_MLA", _HALF, _kv(*_MLA_KV), lambda h: h in _MLA_HEADS, lambda ctx: ((128, False),),
            lambda cap: cap[0] == 10, mla=True),
    Backend("FLASHMLA_SPARSE", ("bfloat16",), _kv("auto", "bfloat16", "fp8_ds_mla", "fp8"),
            lambda h: h == 576, lambda ctx: ((64, False),), lambda cap: cap[0] in (9, 10), mla=True,
            sparse=True),
    Backend("FLASHINFER_MLA_SPARSE", ("bfloat16",), _kv("auto", "bfloat16", "fp8_ds_mla", "fp8"),
            lambda h: h == 576, lambda ctx: ((64, False),), lambda cap: cap[0] == 10, mla=True,
            sparse=True),
)})


#: the head sizes of the backends a caller may name that the CUDA selector never picks itself
#: (their ``supports_head_size``)
NAMED_ONLY_HEAD_SIZES: Mapping[str, Callable[[int], bool]] = MappingProxyType({
    "FLASH_ATTN_DIFFKV": lambda h: h % 8 == 0 and h <= 256,
    "TREE_ATTN": lambda h: h in (32, 64, 96, 128, 160, 192, 224, 256),
    "CPU_ATTN": lambda h: h in (32, 64, 80, 96, 112, 128, 160, 192, 224, 256),
    "ROCM_ATTN": lambda h: h in (32, 64, 80, 96, 128, 160, 192, 224, 256),
    "ROCM_AITER_FA": lambda h: h in (64, 128, 256),
    "ROCM_AITER_UNIFIED_ATTN": lambda h: h >= 32,
})


def head_size_rules() -> dict[str, Callable[[int], bool]]:
    """Every non-MLA backend a caller may choose, and the head sizes it serves: the selector's
    own (:data:`BACKENDS`) and those it never picks (:data:`NAMED_ONLY_HEAD_SIZES`)."""
    return {**{n: b.head_size for n, b in BACKENDS.items() if not b.mla}, **NAMED_ONLY_HEAD_SIZES}


def priorities(use_mla: bool, capability: tuple[int, int], kv_cache_dtype: str | None = None,
               num_heads: int | None = None) -> tuple[str, ...]:
    """The order vLLM 0.19.0 tries backends in on a GPU of *capability*."""
    if use_mla:
        if capability[0] == 10:
            if kv_cache_dtype is not None and kv_cache_dtype.startswith("fp8"):
                sparse = ("FLASHINFER_MLA_SPARSE", "FLASHMLA_SPARSE")
            elif num_heads is not None and num_heads <= 16:
                sparse = ("FLASHINFER_MLA_SPARSE", "FLASHMLA_SPARSE")
            else:
                sparse = ("FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE")
            return ("FLASHINFER_MLA", "CUTLASS_MLA", "FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA", *sparse)
        return ("FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA", "FLASHMLA_SPARSE")
    if capability[0] == 10:
        return ("FLASHINFER", "FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION")
    return ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION")


def supports_block_size(blocks: tuple[KernelBlock, ...], block_size: int | None) -> bool:
    """A block size the kernels take: one of the sizes, or a multiple of a size (Python's
    ``%``, so 0 and negative multiples count too); no size given means any."""
    if block_size is None or not blocks:
        return True
    return any(block_size % size == 0 for size, _ in blocks)


def preferred_block_size(blocks: tuple[KernelBlock, ...], default: int = DEFAULT_BLOCK_SIZE) -> int:
    """``get_preferred_block_size``: the default when the kernels take it, else the smallest size."""
    if supports_block_size(blocks, default):
        return default
    return min(size for size, _ in blocks)


#: a selector check: (does the backend refuse the query, the reason in vLLM's words)
Check = tuple[Callable[[Any, Query, Context], bool], Callable[[Query], str]]

#: vLLM 0.19.0's checks, in its order (``validate_configuration``)
CHECKS: tuple[Check, ...] = (
    (lambda b, q, ctx: not b.head_size(q.head_size), lambda q: "head_size not supported"),
    (lambda b, q, ctx: q.dtype not in b.dtypes, lambda q: "dtype not supported"),
    (lambda b, q, ctx: not b.kv_dtypes(q.kv_cache_dtype, ctx), lambda q: "kv_cache_dtype not supported"),
    (lambda b, q, ctx: not supports_block_size(b.kernel_blocks(ctx), q.block_size), lambda q: "block_size not supported"),
    (lambda b, q, ctx: q.use_mm_prefix and not b.mm_prefix,
     lambda q: "partial multimodal token full attention not supported"),
    (lambda b, q, ctx: q.use_mla != b.mla, lambda q: "MLA not supported" if q.use_mla else "non-MLA not supported"),
    (lambda b, q, ctx: q.has_sink and not b.sinks(ctx), lambda q: "attention sinks not supported"),
    (lambda b, q, ctx: q.use_sparse != b.sparse,
     lambda q: "sparse not supported" if q.use_sparse else "non-sparse not supported"),
    (lambda b, q, ctx: not b.capability(ctx.capability), lambda q: "compute capability not supported"),
    (lambda b, q, ctx: q.attn_type not in b.attn_types,
     lambda q: f"attention type AttentionType.{q.attn_type.upper()} not supported"),
)


def reasons(backend: Any, q: Query, ctx: Context, checks: tuple[Check, ...] = CHECKS) -> list[str]:
    """Why *backend* refuses the query (empty: it accepts), in the order of *checks* (a
    release's own; default 0.19.0's), then the backend's own combination rule."""
    out = [words(q) for refuses, words in checks if refuses(backend, q, ctx)]
    combination = backend.combination(q, ctx)
    if combination is not None:
        out.append(combination)
    return out


@attrs.frozen
class Selection:
    """The selector's answer: the backend (None: none serves), whether it was forced, the
    priority list tried, every refusal with its reasons (in priority order), the chosen
    backend's kernel blocks and preferred block size, vLLM's error when none serves, and
    the ``--block-size`` warning when the user's block size shut out better backends."""

    backend: str | None
    forced: bool
    priority: tuple[str, ...]
    refused: tuple[tuple[str, tuple[str, ...]], ...]
    kernel_blocks: tuple[KernelBlock, ...] = ()
    preferred_block_size: int | None = None
    error: str | None = None
    warning: str | None = None


def query_text(q: Query) -> str:
    # vLLM prints the selector's named tuple, torch dtype and all
    return (f"AttentionSelectorConfig(head_size={q.head_size}, dtype=torch.{q.dtype}, "
            f"kv_cache_dtype={q.kv_cache_dtype}, block_size={q.block_size}, use_mla={q.use_mla}, "
            f"has_sink={q.has_sink}, use_sparse={q.use_sparse}, use_mm_prefix={q.use_mm_prefix}, "
            f"use_per_head_quant_scales=False, attn_type=AttentionType.{q.attn_type.upper()})")


def _priorities_of(q: Query, ctx: Context, num_heads: int | None) -> tuple[str, ...]:
    return priorities(q.use_mla, ctx.capability, q.kv_cache_dtype, num_heads)


def select(q: Query, ctx: Context, forced: str | None = None, *, num_heads: int | None = None,
           table: Mapping[str, Any] = BACKENDS,
           order: Callable[[Query, Context, int | None], tuple[str, ...]] = _priorities_of,
           refuse: Callable[[Any, Query, Context], list[str]] = reasons,
           blocks: Callable[[str, Context], tuple[KernelBlock, ...]] | None = None,
           preferred: Callable[[str, Context], int] | None = None) -> Selection:
    """The backend vLLM's selector gives the query on the GPU of *ctx* (see the module doc).

    A release's selector is this one given its data and hooks: *table* (its backends by name),
    *order* (its priority list for the query), *refuse* (why a backend refuses the query, in its
    order of checks), *blocks* (a backend's kernel blocks) and *preferred* (its preferred block
    size); the defaults are this module's."""
    if blocks is None:
        blocks = lambda name, c: table[name].kernel_blocks(c)  # noqa: E731
    if preferred is None:
        preferred = lambda name, c: preferred_block_size(blocks(name, c))  # noqa: E731
    if forced is not None:
        backend = table.get(forced)
        why = refuse(backend, q, ctx) if backend is not None else ["ImportError"]
        if why:
            return Selection(None, True, (), ((forced, tuple(why)),),
                             error=f"Selected backend AttentionBackendEnum.{forced} is not valid for this "
                                   f"configuration. Reason: {why}")
        return Selection(forced, True, (), (), blocks(forced, ctx), preferred(forced, ctx))
    tried = order(q, ctx, num_heads)
    refused, valid = [], []
    for name in tried:
        why = refuse(table[name], q, ctx)
        if why:
            refused.append((name, tuple(why)))
        else:
            valid.append(name)
    if not valid:
        listed = ", ".join(f"{name}: [{', '.join(why)}]" for name, why in refused)
        return Selection(None, False, tried, tuple(refused),
                         error=f"No valid attention backend found for cuda with {query_text(q)}. "
                               f"Reasons: {{{listed}}}.")
    chosen = valid[0]
    warning = None
    if q.block_size is not None:
        rank = tried.index(chosen)
        shut_out = [name for name, why in refused if tried.index(name) < rank
                    and why == ("block_size not supported",)]
        if shut_out:
            warning = (f"--block-size {q.block_size} precluded higher-priority backend(s) "
                       f"{', '.join(shut_out)}. Using {chosen} instead, which may result in reduced "
                       f"performance. Consider removing --block-size to auto-select the optimal block size.")
    return Selection(chosen, False, tried, tuple(refused), blocks(chosen, ctx), preferred(chosen, ctx),
                     warning=warning)
