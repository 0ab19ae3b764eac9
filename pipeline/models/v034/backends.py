"""vLLM 0.34.0's attention backends on CUDA GPUs (RULES.md B1-B6): the priority lists, what
each backend accepts, FlashAttention's version, the kernel block sizes.

The selector works as in 0.19.0 (:func:`enginecfg.pipeline.models.backends.select`, given this
release's table and priority lists): a named backend is checked alone; otherwise the first
backend in the GPU's list with no reason to refuse wins.  What changed is the table:

- FlashAttention 4 exists on Hopper and Blackwell; FLASH_ATTN takes heads up to 512 where it
  does, an FP8 KV cache with FA3 on Hopper, with the head-512 FA4 kernel on Hopper, or with
  FA4 on Blackwell (B2, B3), and its kernel block sizes depend on the *model-level* head size
  and KV dtype (64 on Hopper for an FP8 cache with heads of 512; 128 for Blackwell's
  head-256 FA4 kernel);
- two composite backends serve multimodal prefix-LM models (Gemma 4): TRITON_FLASH_ATTN on
  Hopper (Triton for image masks, FlashAttention 3/4 for causal queries) and
  TRITON_FLASHINFER on Blackwell (kernel block 64);
- FlashInfer's heads include 512; the MLA lists gained TokenSpeed MLA and sparse tails.

:func:`flash_attn_version` is B3; :func:`kernel_blocks` a backend's kernel block sizes;
:func:`preferred_block_size` its ``get_preferred_block_size(64)``; :func:`select` the
selector on this table.  Checked against vLLM 0.34.0 on H200, H100, B200, A100 and L40S
(``tests/data/vllm-0.34.0``).
"""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any, Mapping

import attrs

from enginecfg.pipeline.models import backends as be
from enginecfg.pipeline.releases import in_force

__all__ = ["Context", "Query", "BACKENDS", "priorities", "select", "flash_attn_version", "fa_supported",
           "kernel_blocks", "preferred_block_size", "smallest_kernel_block", "common_block", "is_quantized",
           "DEFAULT_BLOCK_SIZE"]

#: ``CacheConfig.DEFAULT_BLOCK_SIZE`` in 0.34.0
DEFAULT_BLOCK_SIZE = 64

Query = be.Query
KernelBlock = be.KernelBlock


@attrs.frozen
class Context:
    """What 0.34.0's backends read besides the layer's query: the GPU's compute capability,
    the model-level head size and KV-cache dtype (kernel block sizes asked without a layer
    spec use them), a FlashAttention version the config forces (Gemma 4: 4), whether the
    text config soft-caps logits, whether the model is a multimodal prefix LM, and the MLA
    ``qk_nope_head_dim``."""

    capability: tuple[int, int]
    model_head: int = 0
    cache_dtype: str = "auto"
    flash_attn_version: int | None = None
    softcap: bool = False
    mm_prefix_lm: bool = False
    qk_nope_head_dim: int | None = None
    #: a hybrid whose Mamba state is kept in float32 (FLASH_ATTN's kernel blocks before B2c)
    hybrid_fp32_state: bool = False
    #: the release whose priority lists apply (None: the latest; see :func:`priorities`)
    release: Any = attrs.field(default=None, eq=False)


def is_quantized(kv: str | None) -> bool:
    """A KV-cache dtype that is not a plain float type (fp8, fp4, integer)."""
    return kv is not None and kv not in ("auto", "float16", "bfloat16", "float32", "half", "float")


def fa_supported(version: int, capability: tuple[int, int]) -> bool:
    """Is FlashAttention *version* built for a GPU of *capability*?"""
    if version == 2:
        return capability >= (8, 0)
    if version == 3:
        return capability[0] == 9
    return capability[0] in (9, 10, 11)


def _has(ctx: Context, rule: str) -> bool:
    """Whether the dated rule *rule* is in force for the release *ctx* speaks for (the latest: yes)."""
    return in_force(ctx.release, rule)


def _hd256(head: int | None, capability: tuple[int, int]) -> bool:
    return head == 256 and capability[0] in (10, 11)


def _hd256_fallback(ctx: Context, block: int | None) -> bool:
    return (ctx.softcap or is_quantized(ctx.cache_dtype) or (block is not None and block % 128 != 0)
            or ctx.mm_prefix_lm)


def flash_attn_version(ctx: Context, head: int | None = None, block: int | None = None,
                       fa4_hd256: bool = False, local: bool = False) -> int | None:
    """B3: the FlashAttention version a layer of *head* runs (None: none is available); *local*:
    the layer has a sliding window (how the layer's own build asks)."""
    cap = ctx.capability
    major = cap[0]
    version = 3 if major == 9 else 4 if major == 10 else 2
    if ctx.flash_attn_version is not None:
        version = ctx.flash_attn_version
    if major >= 10 and version == 3:
        version = 4 if fa_supported(4, cap) else 2
    if version == 3 and major == 9 and fa_supported(4, cap) and head is not None and head > 256 \
            and _has(ctx, "B3b"):  # B3b (0.21.0): FA3 takes no head over 256 on Hopper
        version = 4
    # head 256 on Blackwell: FA2 from B3c (0.28.0); from B3d (0.29.0) the head-256 FA4 kernel where
    # the layer asks for it and nothing it does not support is in play
    if version == 4 and _hd256(head, cap) and _has(ctx, "B3c"):
        if not _has(ctx, "B3d") or not fa4_hd256 or _hd256_fallback(ctx, block):
            version = 2
    # B3e (0.27.0, until B3c): FA4 takes head 256 on Blackwell, but not for a sliding-window layer
    if version == 4 and _hd256(head, cap) and local and _has(ctx, "B3e") and not _has(ctx, "B3c"):
        version = 2
    # Blackwell's FA4 takes no head over 128 but 256 from B3e; before it, 192 instead
    if version == 4 and major >= 10 and head is not None and head > 128 \
            and head != (256 if _has(ctx, "B3e") else 192):
        version = 2
    return version if fa_supported(version, cap) else None


def _fa_supports_kv(kv: str, ctx: Context, head: int | None = None, block: int | None = None,
                    fa4_hd256: bool = False) -> bool:
    if kv == "fp8_e5m2":
        return False
    version = flash_attn_version(ctx, head, block, fa4_hd256)
    sm90 = ctx.capability[0] == 9
    # B2f: the head-512 FA4 kernel takes an FP8 cache on Hopper (before it, FA3 only there)
    sm90_ok = version == 3 or (version == 4 and head in (None, 512) and _has(ctx, "B2f"))
    return (sm90_ok and sm90) or (version == 4 and ctx.capability[0] == 10)


def _fa_blocks(ctx: Context, head: int | None = None, kv: str | None = None) -> tuple[KernelBlock, ...]:
    """FLASH_ATTN's kernel block sizes: for a layer (*head*, *kv*) or, without them, for the
    model-level head size and KV dtype (how the start-up step and the selector ask)."""
    head = ctx.model_head if head is None else head
    fp8 = (ctx.cache_dtype if kv is None else kv) in ("fp8", "fp8_e4m3")
    if ctx.hybrid_fp32_state and not _has(ctx, "B2c"):  # before B2c (0.25.0): the sizes free of NaN spread
        return ((16, False), (32, False), (64, False))
    if ctx.capability[0] == 9 and fp8 and head == 512 and flash_attn_version(ctx, head) == 4 and _has(ctx, "B2f"):
        return ((64, False),)
    if (_hd256(head, ctx.capability) and _has(ctx, "B2e")
            and flash_attn_version(ctx, head, fa4_hd256=True) == 4):  # B2e: the head-256 kernel's block
        return ((128, False),)
    return ((16, True),)


def _fa_head(h: int, ctx: Context) -> bool:
    return h % 8 == 0 and (h <= 256 or (fa_supported(4, ctx.capability) and h <= 512))


def _fa_kv(kv: str, ctx: Context) -> bool:
    if not _has(ctx, "B2d"):
        # before B2d (0.27.0) the version is asked with no layer: FA3 on Hopper takes the quantized
        # dtypes, any of them before B2b (0.22.0), fp8 and fp8_e4m3 only from it
        fa3 = flash_attn_version(ctx) == 3 and ctx.capability[0] == 9
        if kv in ("fp8", "fp8_e4m3") or (is_quantized(kv) and not _has(ctx, "B2b")):
            return fa3
        return kv in ("auto", "float16", "bfloat16")
    if kv not in ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3"):
        return False
    return not is_quantized(kv) or _fa_supports_kv(kv, ctx)


def _fa_combination(q: Query, ctx: Context) -> str | None:
    quant = is_quantized(q.kv_cache_dtype)
    if ctx.capability == (9, 0) and quant and q.head_size == 512 and q.block_size is not None \
            and q.block_size % 64 != 0 and _has(ctx, "B2g"):
        return "SM90 d512 FP8 KV requires a block size divisible by 64"
    if q.use_mm_prefix and quant and ctx.capability == (9, 0) and _has(ctx, "B2f"):
        return "SM90 FP8 KV with mm_prefix requires Triton"
    if quant and _has(ctx, "B2d") and not _fa_supports_kv(q.kv_cache_dtype, ctx, q.head_size, q.block_size, True):
        # the refusal's words: B2d's (0.27.0), B2f's (0.31.0), B2g's (0.34.0)
        return ("FP8 KV requires FA3 (SM90), equal-d512 FA4 (SM90), or FA4 (SM100)." if _has(ctx, "B2g")
                else "FP8 KV cache requires FA3 on SM90, FA4 with head_size=512 on SM90, or FA4 on SM100"
                if _has(ctx, "B2f") else "FP8 KV cache requires FA3 on SM90 or FA4 on SM100")
    if q.use_mm_prefix and _has(ctx, "B2h") and flash_attn_version(ctx, q.head_size, q.block_size, True) != 4:
        return ("mm_prefix (PrefixLM bidirectional attention) requires FlashAttention v4, which "
                "does not resolve for this head_size")
    return None


@attrs.frozen
class Backend:
    """One attention backend of vLLM 0.34.0 (functions of the query and the context)."""

    name: str
    dtypes: tuple[str, ...]
    kv: object
    head: object
    blocks: object
    capability: object
    mla: bool = False
    sparse: bool = False
    attn_types: tuple[str, ...] = ("decoder",)
    mm_prefix: object = lambda ctx: False
    sliding: bool = True
    combination: object = lambda q, ctx: None


def _kv(*names: str):
    allowed = frozenset(names)
    return lambda kv, ctx: kv in allowed


def _composite_fa_combination(q: Query, ctx: Context) -> str | None:
    # the causal child is asked without the image mask; it needs FA3 or FA4
    plain = attrs.evolve(q, use_mm_prefix=False)
    reason = _fa_combination(plain, ctx)
    if reason is None and flash_attn_version(ctx, q.head_size, q.block_size, True) not in (3, 4):
        reason = "causal route requires FlashAttention v3 or v4"
    return f"FLASH_ATTN: {reason}" if reason else None


_HALF = ("float16", "bfloat16")
_TRITON_KV = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "int4_per_token_head",
              "int8_per_token_head", "fp8_per_token_head")
_FI_KV = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
_MLA_KV = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3")
_MLA_HEADS = (320, 512, 576)
_ALL_TYPES = ("decoder", "encoder", "encoder_only", "encoder_decoder")


def _sparse(name: str, cap) -> Backend:
    return Backend(name, ("bfloat16",), _kv("auto", "bfloat16", "fp8_ds_mla", "fp8"), lambda h, ctx: h == 576,
                   lambda ctx: ((64, False),), cap, mla=True, sparse=True, sliding=False)


BACKENDS: Mapping[str, Backend] = MappingProxyType({b.name: b for b in (
    Backend("FLASH_ATTN", _HALF, _fa_kv, _fa_head, _fa_blocks, lambda cap: cap >= (8, 0), attn_types=_ALL_TYPES,
            mm_prefix=lambda ctx: fa_supported(4, ctx.capability) and _has(ctx, "B2h"),  # B2h: 0.24.0
            combination=_fa_combination),
    Backend("TRITON_FLASH_ATTN", _HALF, _fa_kv, lambda h, ctx: h in (256, 512) and _fa_head(h, ctx),
            _fa_blocks, lambda cap: cap[0] == 9, mm_prefix=lambda ctx: True,
            combination=_composite_fa_combination),
    Backend("FLASHINFER", _HALF, _kv(*_FI_KV), lambda h, ctx: h in (64, 128, 256, 512),
            lambda ctx: ((16, False), (32, False), (64, False)), lambda cap: (8, 0) <= cap <= (12, 1)),
    Backend("TRITON_FLASHINFER", _HALF, _kv(*_FI_KV), lambda h, ctx: h in (256, 512),
            lambda ctx: ((64, False),), lambda cap: cap[0] == 10, mm_prefix=lambda ctx: True),
    Backend("TRITON_ATTN", ("float16", "bfloat16", "float32"), _kv(*_TRITON_KV), lambda h, ctx: h >= 32,
            lambda ctx: ((16, True),), lambda cap: True, attn_types=_ALL_TYPES, mm_prefix=lambda ctx: True),
    Backend("FLEX_ATTENTION", ("float16", "bfloat16", "float32"), _kv("auto", "float16", "bfloat16"),
            lambda h, ctx: True, lambda ctx: ((1, True),), lambda cap: True,
            attn_types=("decoder", "encoder_only"), mm_prefix=lambda ctx: True),
    Backend("TURBOQUANT", _HALF, lambda kv, ctx: kv.startswith("turboquant"), lambda h, ctx: True,
            lambda ctx: ((16, True),), lambda cap: True),
    Backend("FLASH_ATTN_MLA", _HALF, _kv("auto", "float16", "bfloat16"), lambda h, ctx: h in _MLA_HEADS,
            lambda ctx: ((16, True),), lambda cap: cap[0] == 9, mla=True, sliding=False,
            combination=lambda q, ctx: None if ctx.capability[0] == 9
            else "FlashAttention MLA not supported on this device"),
    Backend("FLASHMLA", _HALF, _kv(*_MLA_KV), lambda h, ctx: h in _MLA_HEADS, lambda ctx: ((64, False),),
            lambda cap: cap[0] in (9, 10), mla=True, sliding=False,
            combination=lambda q, ctx: None if ctx.capability[0] == 9
            else "FlashMLA Dense is only supported on Hopper devices."),
    Backend("FLASHINFER_MLA", _HALF, _kv(*_MLA_KV), lambda h, ctx: h in _MLA_HEADS,
            lambda ctx: ((32, False), (64, False)), lambda cap: cap[0] == 10, mla=True, sliding=False,
            combination=lambda q, ctx: None if (ctx.qk_nope_head_dim or 1) in (64, 128, 192) else
            f"FlashInfer MLA kernel requires qk_nope_head_dim in [64, 128, 192], but got "
            f"{ctx.qk_nope_head_dim or 1}"),
    Backend("TOKENSPEED_MLA", _HALF, _kv("fp8", "fp8_e4m3"), lambda h, ctx: h in _MLA_HEADS,
            lambda ctx: ((32, False), (64, False)), lambda cap: cap[0] == 10, mla=True, sliding=False,
            combination=lambda q, ctx: "tokenspeed_mla package is not installed. Install it with: "
                                       "`uv pip install tokenspeed-mla`"),
    Backend("CUTLASS_MLA", _HALF, _kv(*_MLA_KV), lambda h, ctx: h in _MLA_HEADS, lambda ctx: ((128, False),),
            lambda cap: cap[0] == 10, mla=True, sliding=False),
    Backend("TRITON_MLA", _HALF, _kv(*_MLA_KV), lambda h, ctx: True, lambda ctx: ((16, True),),
            lambda cap: True, mla=True, sliding=False),
    _sparse("FLASH_ATTN_MLA_SPARSE", lambda cap: cap[0] == 9),
    _sparse("FLASHMLA_SPARSE", lambda cap: cap[0] in (9, 10)),
    _sparse("FLASHINFER_MLA_SPARSE_SM90", lambda cap: cap[0] == 9),
    _sparse("FLASHINFER_MLA_SPARSE", lambda cap: cap[0] == 10),
    _sparse("FLASH_ATTN_MLA_SPARSE_FA4", lambda cap: cap[0] == 10),
    _sparse("FLASHINFER_MLA_SPARSE_SM120", lambda cap: cap[0] == 12),
)})


def priorities(use_mla: bool, capability: tuple[int, int], kv_cache_dtype: str | None = None,
               num_heads: int | None = None, *, head_size: int | None = None,
               use_mm_prefix: bool = False, release: Any = None) -> tuple[str, ...]:
    """B1: the order vLLM 0.34.0 tries backends in on a GPU of *capability*; a *release*
    without B1f puts no prefix-LM backend first, one without B1g no sparse FA4 MLA first."""
    major = capability[0]
    use_mm_prefix = use_mm_prefix and in_force(release, "B1f")
    if use_mla:
        if major == 10:
            if is_quantized(kv_cache_dtype):
                sparse = ("FLASHINFER_MLA_SPARSE", "FLASHMLA_SPARSE")
            elif num_heads is not None and num_heads <= 16 and in_force(release, "B1g"):
                sparse = ("FLASH_ATTN_MLA_SPARSE_FA4", "FLASHINFER_MLA_SPARSE", "FLASHMLA_SPARSE")
            else:
                sparse = ("FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE")
            # B1b (0.21.0): TokenSpeed MLA tried right after FlashInfer MLA
            tokenspeed = ("TOKENSPEED_MLA",) if in_force(release, "B1b") else ()
            return ("FLASHINFER_MLA", *tokenspeed, "CUTLASS_MLA", "FLASH_ATTN_MLA", "FLASHMLA",
                    "TRITON_MLA", *sparse)
        if major == 12 and in_force(release, "B1c"):  # B1c (0.24.0); before, Hopper's list
            return ("TRITON_MLA", "FLASHINFER_MLA_SPARSE_SM120")
        # B1d (0.25.0): the FlashAttention sparse MLA first in the tail; B1f (0.30.0): FlashInfer's
        # Hopper sparse MLA, first at head 512, else last
        tail = ["FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE"] if in_force(release, "B1d") \
            else ["FLASHMLA_SPARSE"]
        if in_force(release, "B1f"):
            tail.insert(0 if head_size == 512 else len(tail), "FLASHINFER_MLA_SPARSE_SM90")
        return ("FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA", *tail)
    if major == 10:
        return (*(("TRITON_FLASHINFER",) if use_mm_prefix else ()), "FLASHINFER", "FLASH_ATTN", "TRITON_ATTN",
                "FLEX_ATTENTION", "TURBOQUANT")
    return (*(("TRITON_FLASH_ATTN",) if major == 9 and use_mm_prefix else ()), "FLASH_ATTN", "FLASHINFER",
            "TRITON_ATTN", "FLEX_ATTENTION", "TURBOQUANT")


def kernel_blocks(name: str, ctx: Context, head: int | None = None, kv: str | None = None
                  ) -> tuple[KernelBlock, ...]:
    """The kernel block sizes backend *name* states: for a layer (*head*, *kv*), or at the
    model level without them."""
    backend = BACKENDS[name]
    if backend.blocks is _fa_blocks:
        return _fa_blocks(ctx, head, kv)
    return backend.blocks(ctx)


def smallest_kernel_block(name: str, ctx: Context) -> int:
    """The smallest kernel block size of backend *name* (model level)."""
    return min(size for size, _ in kernel_blocks(name, ctx))


def preferred_block_size(name: str, ctx: Context, default: int = DEFAULT_BLOCK_SIZE) -> int:
    """``get_preferred_block_size(default)`` (B2): FLASH_ATTN takes at least its special kernel
    block (64 or 128); any other backend the default when its kernels take it, else its
    smallest kernel block."""
    blocks = kernel_blocks(name, ctx)
    if name in ("FLASH_ATTN", "TRITON_FLASH_ATTN") and blocks != ((16, True),):
        return max(default, blocks[0][0])
    return be.preferred_block_size(blocks, default)


#: 0.34.0's selector checks, in its order: the attention-sink check is gone, a backend's head
#: sizes, KV dtypes and multimodal-prefix support depend on the GPU, and the attention type is
#: named without its enum's prefix
CHECKS: tuple[be.Check, ...] = (
    (lambda b, q, ctx: not b.head(q.head_size, ctx), lambda q: "head_size not supported"),
    (lambda b, q, ctx: q.dtype not in b.dtypes, lambda q: "dtype not supported"),
    (lambda b, q, ctx: not b.kv(q.kv_cache_dtype, ctx), lambda q: "kv_cache_dtype not supported"),
    (lambda b, q, ctx: not be.supports_block_size(kernel_blocks(b.name, ctx), q.block_size),
     lambda q: "block_size not supported"),
    (lambda b, q, ctx: q.use_mm_prefix and not b.mm_prefix(ctx),
     lambda q: "partial multimodal token full attention not supported"),
    (lambda b, q, ctx: q.use_mla != b.mla, lambda q: "MLA not supported" if q.use_mla else "non-MLA not supported"),
    (lambda b, q, ctx: q.use_sparse != b.sparse,
     lambda q: "sparse not supported" if q.use_sparse else "non-sparse not supported"),
    (lambda b, q, ctx: not b.capability(ctx.capability), lambda q: "compute capability not supported"),
    (lambda b, q, ctx: q.attn_type not in b.attn_types, lambda q: f"attention type {q.attn_type} not supported"),
)


def select(q: Query, ctx: Context, forced: str | None = None, *, num_heads: int | None = None,
           sliding_window: bool = False) -> be.Selection:
    """The backend vLLM 0.34.0's selector gives the query on the GPU of *ctx*: the shared
    selector given this release's backends, priorities, checks (a sliding-window layer also
    needs a backend that takes one) and kernel blocks."""
    def refuse(backend: Backend, q: Query, ctx: Context) -> list[str]:
        return be.reasons(backend, q, ctx, CHECKS) + (
            ["sliding window not supported"] if sliding_window and not backend.sliding else [])

    def order(q: Query, ctx: Context, heads: int | None) -> tuple[str, ...]:
        return priorities(q.use_mla, ctx.capability, q.kv_cache_dtype, heads, head_size=q.head_size,
                          use_mm_prefix=q.use_mm_prefix, release=ctx.release)

    return be.select(q, ctx, forced, num_heads=num_heads, table=BACKENDS, order=order, refuse=refuse,
                     blocks=kernel_blocks, preferred=preferred_block_size)


def common_block(names: list[str], ctx: Context, default: int = DEFAULT_BLOCK_SIZE) -> int | None:
    """S1 with several backends: the default when every one takes it, else the smallest lcm of
    one kernel size per backend that all accept (None: they share none)."""
    if all(be.supports_block_size(kernel_blocks(n, ctx), default) for n in names):
        return default
    best = None
    options = [[s for s, _ in kernel_blocks(n, ctx)] for n in names]

    def walk(i: int, acc: int) -> None:
        nonlocal best
        if i == len(options):
            if all(be.supports_block_size(kernel_blocks(n, ctx), acc) for n in names):
                best = acc if best is None else min(best, acc)
            return
        for size in options[i]:
            walk(i + 1, math.lcm(acc, size))
    walk(0, 1)
    return best
