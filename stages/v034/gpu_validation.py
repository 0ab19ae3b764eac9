"""``gpu-validation`` for vLLM 0.34.0: the kernel checks on the page layout its engine start decides.

vLLM 0.34.0 lays the KV-cache pages out when the engine starts, after loading, not at config
time: the block size the attention layers declare their KV cache with, the Mamba block and the
padded Mamba page are the start-up decisions of the run's ``startup`` fact
(:class:`~enginecfg.pipeline.models.startup.Startup`), while the config keeps its config-time
block (64).  The checks of :mod:`enginecfg.stages.gpu_validation` are built from that fact:

- the attention kernels run on the block vLLM's model runner views each page with: the block
  size itself when every attention backend takes it (FlashAttention and Triton take any
  multiple of 16), else the largest kernel block of the backends that divides it (a page then
  holds several kernel blocks); the sequences cross one whole block;
- the hybrid page-layout check lays out pages of the padded Mamba page the start-up step
  decided (the attention block at the start-up block size beside the Mamba state).

When the start-up step was not worked out, or the engine would not start, there is no layout
to check: the validation is recorded as skipped, saying why.
"""

from __future__ import annotations

from typing import Sequence

from enginecfg.pipeline.models.startup import LayerBackend, Startup, StartupUnavailable
from enginecfg.pipeline.models.v034 import config_time as ct
from enginecfg.stages.gpu_validation import GpuCheck, GpuValidationStage, PageLayout, build_plan

__all__ = ["GpuValidation034Stage", "kernel_block_size", "page_layout"]


def _takes(lb: LayerBackend, size: int) -> bool:
    if not lb.kernel_block_sizes:
        return True  # a backend that states no kernel block takes any
    return any(size % k == 0 if multiple else size == k
               for k, multiple in zip(lb.kernel_block_sizes, lb.kernel_block_multiple_of))


def kernel_block_size(block: int, backends: Sequence[LayerBackend]) -> int:
    """The block the attention kernels address in pages of *block* tokens (vLLM 0.34.0's
    ``select_common_block_size``): *block* when every backend takes it, else the largest of
    the backends' fixed kernel blocks that divides it and every backend takes.  Raises
    ``ValueError`` (as vLLM does) when there is none."""
    attention = [lb for lb in backends if lb.layer.is_attention and lb.backend is not None]
    if all(_takes(lb, block) for lb in attention):
        return block
    fixed = {k for lb in attention for k, multiple in zip(lb.kernel_block_sizes, lb.kernel_block_multiple_of)
             if not multiple and block % k == 0}
    for size in sorted(fixed, reverse=True):
        if all(_takes(lb, size) for lb in attention):
            return size
    raise ValueError(f"No common block size for {block} ("
                     + "; ".join(f"{lb.backend}: {list(lb.kernel_block_sizes)}" for lb in attention) + ").")


def page_layout(startup: Startup) -> PageLayout:
    """The page layout of a start-up decision: its block size, the kernel block the attention
    backends view it with, and the padded Mamba page."""
    kernel = kernel_block_size(startup.block_size, startup.backends)
    return PageLayout(startup.block_size, None if kernel == startup.block_size else kernel,
                      startup.mamba_page_size_padded)


class GpuValidation034Stage(GpuValidationStage):

    def plan_for(self, cfg, ctx, *, interpret: bool) -> "list[GpuCheck] | str":
        startup = ctx.fact("startup")
        if not isinstance(startup, Startup):
            why = startup.error if isinstance(startup, StartupUnavailable) else "engine-start did not run"
            return f"no page layout to check: vLLM {ctx.release}'s start-up step was not worked out ({why})"
        if startup.failure is not None:
            return (f"no page layout to check: vLLM {ctx.release} would not start "
                    f"({startup.failure.vllm_type}: {startup.failure.reason})")
        try:
            layout = page_layout(startup)
        except ValueError as exc:
            return f"no page layout to check: {exc}"
        return build_plan(cfg, interpret=interpret, layout=layout)
