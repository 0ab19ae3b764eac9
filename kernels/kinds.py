"""The kernel checks by name, without torch: what a caller plans with before anything runs.

:class:`KernelCheck` names each check of :mod:`enginecfg.kernels.checks` and the kernel it
proves.  Importing this module imports neither torch nor triton; the checks module maps each
name to its function (``checks.CHECKS``, ``checks.run_check``), so a caller imports torch only
when it runs one.  Like every module here it knows nothing of configs, stages or the store: a
caller decides which checks a model needs and with which shapes.
"""

from __future__ import annotations

import enum

__all__ = ["KernelCheck"]


class KernelCheck(enum.Enum):
    """One kernel-vs-reference check; the value is its stable name."""

    PAGED_ATTENTION = "paged_attention"
    PAGED_ATTENTION_FP8 = "paged_attention_fp8"
    PAGED_PREFILL = "paged_prefill"
    MLA_ATTENTION = "mla_attention"
    CAUSAL_CONV1D_UPDATE = "causal_conv1d_update"
    SELECTIVE_STATE_UPDATE = "selective_state_update"
    GATED_DELTA = "gated_delta"
    GATED_DELTA_PACKED = "gated_delta_packed"
    PAGE_LAYOUT = "page_layout"
    STATE_PRECISION = "state_precision"

    @property
    def kernel(self) -> str:
        """The kernel the check proves, as results name it (``paged_decode_attention``)."""
        return _KERNELS[self]

    @property
    def measures_precision(self) -> bool:
        """A precision run (a ``StatePrecisionResult``: how the state's error grows), not a
        pass/fail comparison (a ``CheckResult``)."""
        return self is KernelCheck.STATE_PRECISION


_KERNELS = {
    KernelCheck.PAGED_ATTENTION: "paged_decode_attention",
    KernelCheck.PAGED_ATTENTION_FP8: "paged_decode_attention",
    KernelCheck.PAGED_PREFILL: "paged_prefill_attention",
    KernelCheck.MLA_ATTENTION: "mla_decode_attention",
    KernelCheck.CAUSAL_CONV1D_UPDATE: "causal_conv1d_update",
    KernelCheck.SELECTIVE_STATE_UPDATE: "selective_state_update",
    KernelCheck.GATED_DELTA: "gated_delta_rule_step",
    KernelCheck.GATED_DELTA_PACKED: "gated_delta_rule_step_packed",
    KernelCheck.PAGE_LAYOUT: "page_check",
    KernelCheck.STATE_PRECISION: "state_precision",
}
