"""Hybrid page check: one byte buffer seen as attention KV blocks and as Mamba state pages.

A hybrid attention/Mamba model keeps both kinds of layer in one pool of equal-size pages:
an attention layer sees page ``p`` as one KV block (K then V, ``block_size * kv_heads *
head_size`` elements each, in the KV dtype) and a Mamba layer sees it as its states packed
from the page start (conv state, then SSM state), with padding up to ``page_size_bytes``.
If the sizes the config resolved are off -- a block that does not fit its page, a page
stride the kernels disagree on -- a kernel writing one page silently corrupts its
neighbour.  :func:`page_check` proves, on the real device, that it does not:

1. allocate ``guard + num_pages * page_size_bytes + guard`` bytes, the guards sized so
   that even a wrongly addressed write stays inside the allocation;
2. fill every byte with a seeded canary pattern;
3. for each view and each page, copy random bytes into that page's regions with a small
   Triton kernel that addresses the buffer the way a cache kernel does (typed pointer,
   ``page * page_stride + region_offset``), compare the whole buffer with the expected
   bytes (any change outside the regions is a broken canary), then read the regions back
   with the same kernel and compare.

Copies move the element type's bits through same-width integer views, so no float
rounding or NaN canonicalisation can hide or invent a difference.
"""

from __future__ import annotations

import time
from typing import Sequence

import attrs
import torch
import triton
import triton.language as tl

from enginecfg.kernels._util import as_dtype, dtype_name, require

__all__ = ["page_check", "PageCheckResult", "PageViolation"]

_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_GUARD_MIN = 4096
_BLOCK = 1024


@triton.jit(do_not_specialize=["dst_page", "dst_page_stride", "dst_offset", "src_page",
                                "src_page_stride", "src_offset", "n"])
def _page_copy_kernel(dst_ptr, src_ptr, dst_page, dst_page_stride, dst_offset,
                      src_page, src_page_stride, src_offset, n, BLOCK: tl.constexpr):
    """Copy ``n`` elements: ``src[src_page*stride + off + i] -> dst[dst_page*stride + off + i]``.

    No integer argument is specialised: a page index of 0 or 1 must stay a run-time value
    (Triton would otherwise fold it into a compile-time constant).
    """
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    src = src_ptr + src_page.to(tl.int64) * src_page_stride + src_offset + offs
    dst = dst_ptr + dst_page.to(tl.int64) * dst_page_stride + dst_offset + offs
    tl.store(dst, tl.load(src, mask=ok), mask=ok)


@attrs.frozen
class PageViolation:
    """A run of bytes that differ from what they should be after one page's write."""

    view: str
    page: int
    kind: str  # "canary": a byte outside the page's regions changed; "data": a region byte is wrong
    where: str  # e.g. "page 1 +0", "guard after +12"
    first_offset: int  # byte offset from the first page's start (negative: guard before)
    count: int


@attrs.frozen
class PageCheckResult:
    """Outcome of :func:`page_check`; ``passed`` only if every view fits, is element-aligned,
    left every canary intact and read back what it wrote, on every page."""

    passed: bool
    page_size_bytes: int
    num_pages: int
    attn_block_bytes: int
    mamba_state_bytes: tuple[int, ...]
    mamba_used_bytes: int
    fits: dict[str, bool]
    aligned: dict[str, bool]
    readback_ok: bool
    violations: tuple[PageViolation, ...]
    notes: tuple[str, ...]
    seconds: float
    device: str

    def summary(self) -> str:
        """One line for logs and tables."""
        state = "ok" if self.passed else "FAILED"
        bad = f", {len(self.violations)} violation(s)" if self.violations else ""
        return (f"page_check {state}: page {self.page_size_bytes} B x {self.num_pages}, attention "
                f"{self.attn_block_bytes} B, mamba {self.mamba_used_bytes} B{bad}")


@attrs.frozen
class _Region:
    offset: int  # bytes from the page start
    size: int  # bytes


@attrs.frozen
class _View:
    name: str
    elem: torch.dtype  # integer dtype of the element width
    regions: tuple[_Region, ...]


def _widest_elements(sizes: Sequence[int]) -> list[torch.dtype]:
    """Element types for states of unknown dtype: the widest of 4, 2, 1 bytes that divides
    each state's size and offset, so a missing dtype never invents a misalignment."""
    out, offset = [], 0
    for size in sizes:
        width = next(w for w in (4, 2, 1) if size % w == 0 and offset % w == 0)
        out.append({4: torch.float32, 2: torch.float16, 1: torch.uint8}[width])
        offset += size
    return out


def _where(offset: int, page_size: int, num_pages: int) -> str:
    if offset < 0:
        return f"guard before {offset}"
    page, rel = divmod(offset, page_size)
    if page >= num_pages:
        return f"guard after +{offset - num_pages * page_size}"
    return f"page {page} +{rel}"


def _runs(mask: torch.Tensor) -> list[tuple[int, int]]:
    """(start, length) of each run of True in a 1-D bool tensor (host side)."""
    idx = torch.nonzero(mask).flatten().tolist()
    runs: list[tuple[int, int]] = []
    for i in idx:
        if runs and runs[-1][0] + runs[-1][1] == i:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((i, 1))
    return runs


def _launch_copy(dst, src, dst_page, dst_stride, dst_off, src_page, src_stride, src_off, n):
    if n <= 0:
        return
    _page_copy_kernel[(triton.cdiv(n, _BLOCK),)](
        dst, src, dst_page, dst_stride, dst_off, src_page, src_stride, src_off, n, BLOCK=_BLOCK,
        num_warps=4,
    )


def page_check(page_size_bytes: int, attn_block_bytes: int, mamba_state_bytes: Sequence[int], *,
               num_pages: int = 3, kv_dtype: str | torch.dtype = "bfloat16",
               mamba_state_dtypes: Sequence[str | torch.dtype] | None = None,
               device: str | torch.device = "cuda", seed: int = 0,
               kernel_page_size_bytes: int | None = None,
               max_violations: int = 32) -> PageCheckResult:
    """Prove that writing or reading one page through each view touches no other byte.

    ``attn_block_bytes`` is one attention block's K plus V (K in the first half, V in the
    second); 0 skips the attention view.  ``mamba_state_bytes`` lists the Mamba states packed
    from the page start, in order (e.g. ``[conv_bytes, ssm_bytes]``); ``mamba_state_dtypes``
    their element types (default: the widest of 4/2/1-byte elements each state's size and
    offset allow).  ``kernel_page_size_bytes`` is the page
    stride the copy kernel is told (default: ``page_size_bytes``); giving it a different
    value models a kernel that disagrees with the allocator, which the check must catch.
    """
    t0 = time.perf_counter()
    dev = torch.device(device)
    mamba = tuple(int(s) for s in mamba_state_bytes)
    require(int(page_size_bytes) > 0, "page_size_bytes", page_size_bytes, "> 0")
    require(int(attn_block_bytes) >= 0, "attn_block_bytes", attn_block_bytes, ">= 0")
    require(all(s > 0 for s in mamba), "mamba_state_bytes", list(mamba), "positive sizes")
    require(attn_block_bytes > 0 or mamba, "views", "none", "an attention block or mamba states")
    require(int(num_pages) >= 1, "num_pages", num_pages, ">= 1")
    page = int(page_size_bytes)
    kpage = int(kernel_page_size_bytes) if kernel_page_size_bytes is not None else page
    require(kpage > 0, "kernel_page_size_bytes", kernel_page_size_bytes, "> 0")
    kv = as_dtype(kv_dtype, "kv_dtype")
    if mamba_state_dtypes is None:
        mdtypes = _widest_elements(mamba)
    else:
        require(len(mamba_state_dtypes) == len(mamba), "mamba_state_dtypes", len(mamba_state_dtypes),
                f"{len(mamba)} entries (one per state)")
        mdtypes = [as_dtype(d, "mamba_state_dtypes") for d in mamba_state_dtypes]

    notes: list[str] = []
    views: list[_View] = []
    fits: dict[str, bool] = {}
    aligned: dict[str, bool] = {}
    if attn_block_bytes > 0:
        half = attn_block_bytes // 2
        fits["attention"] = attn_block_bytes <= page
        ok = attn_block_bytes % 2 == 0 and half % kv.itemsize == 0
        views.append(_View("attention", _INT_OF_SIZE[kv.itemsize] if ok else torch.uint8,
                           (_Region(0, half), _Region(half, attn_block_bytes - half))))
        aligned["attention"] = ok and page % kv.itemsize == 0 and kpage % kv.itemsize == 0
        if not ok:
            notes.append(f"attention block of {attn_block_bytes} B is not two whole "
                         f"{dtype_name(kv)} tensors; copied bytewise")
    offset = 0
    for i, (size, dt) in enumerate(zip(mamba, mdtypes)):
        name = f"mamba[{i}]"
        ok = offset % dt.itemsize == 0 and size % dt.itemsize == 0
        fits[name] = offset + size <= page
        aligned[name] = ok and page % dt.itemsize == 0 and kpage % dt.itemsize == 0
        if not ok:
            notes.append(f"{name} ({size} B at +{offset}) is not whole {dtype_name(dt)} elements; "
                         "copied bytewise")
        views.append(_View(name, _INT_OF_SIZE[dt.itemsize] if ok else torch.uint8,
                           (_Region(offset, size),)))
        offset += size
    mamba_used = offset
    for name, ok in fits.items():
        if not ok:
            notes.append(f"{name} does not fit in a {page} B page")
    for name, ok in aligned.items():
        if not ok and not any(n.startswith(name) for n in notes):
            notes.append(f"{name}: page stride is not a whole number of elements; copied bytewise")

    # Guards: wide enough that a write at the kernel's (possibly wrong) address stays inside.
    reach = max((num_pages - 1) * kpage + r.offset + r.size for v in views for r in v.regions)
    after = max(_GUARD_MIN, reach - num_pages * page + _GUARD_MIN)
    before = _GUARD_MIN
    after = -(-after // 64) * 64
    total = before + num_pages * page + after

    # Everything stays on the device: the canary, the expected bytes, the comparison.  The
    # host sees one boolean per page and view, and the bytes only when something differs.
    gen = torch.Generator(device=dev).manual_seed(seed)
    canary = torch.randint(0, 256, (total,), dtype=torch.uint8, generator=gen, device=dev)
    buf = canary.clone()
    violations: list[PageViolation] = []
    readback_ok = True
    n_violations = 0

    for view in views:
        esize = torch.empty((), dtype=view.elem).element_size()
        elem_ok = page % esize == 0 and kpage % esize == 0
        elem = view.elem if elem_ok else torch.uint8
        esize = esize if elem_ok else 1
        typed = buf.view(elem)[before // esize:]
        for p in range(num_pages):
            buf.copy_(canary)
            expected = canary.clone()
            region_mask = torch.zeros(total, dtype=torch.bool, device=dev)
            sources = []
            for r in view.regions:
                n = r.size - r.size % esize
                start = before + p * page + r.offset
                # every data byte differs from the canary where it belongs, so a byte that
                # spills past the page end always shows as a broken canary there
                shift = torch.randint(1, 256, (n,), dtype=torch.int32, generator=gen, device=dev)
                data = ((canary[start:start + n].to(torch.int32) + shift) % 256).to(torch.uint8)
                page_end = before + (p + 1) * page
                stop = min(start + n, page_end)
                if stop > start:
                    expected[start:stop] = data[: stop - start]
                region_mask[start: min(start + r.size, page_end)] = True
                src = data.view(elem)
                _launch_copy(typed, src, p, kpage // esize, r.offset // esize, 0, 0, 0, src.numel())
                sources.append((r, src))
            diff = buf != expected
            if bool(diff.any()):
                diff, region_mask = diff.cpu(), region_mask.cpu()
                for kind, sel in (("canary", diff & ~region_mask), ("data", diff & region_mask)):
                    for start, length in _runs(sel):
                        n_violations += 1
                        if len(violations) < max_violations:
                            violations.append(PageViolation(
                                view.name, p, kind, _where(start - before, page, num_pages),
                                start - before, length))
            for r, src in sources:
                back = torch.empty_like(src)
                _launch_copy(back, typed, 0, 0, 0, p, kpage // esize, r.offset // esize, src.numel())
                if not torch.equal(back, src):
                    readback_ok = False
    if n_violations > len(violations):
        notes.append(f"{n_violations} violations; only the first {len(violations)} are listed")
    if not readback_ok:
        notes.append("a page read back bytes other than those written to it")
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    passed = (not violations) and readback_ok and all(fits.values()) and all(aligned.values())
    return PageCheckResult(
        passed=passed, page_size_bytes=page, num_pages=int(num_pages),
        attn_block_bytes=int(attn_block_bytes), mamba_state_bytes=mamba,
        mamba_used_bytes=mamba_used, fits=fits, aligned=aligned, readback_ok=readback_ok,
        violations=tuple(violations), notes=tuple(dict.fromkeys(notes)),
        seconds=time.perf_counter() - t0, device=str(dev),
    )
