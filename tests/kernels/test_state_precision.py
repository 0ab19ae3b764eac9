"""Recurrent states kept in 16-bit dtypes drift from float64; float32 stays close."""

import math

import pytest

pytest.importorskip("torch")  # the gpu extra: without it these tests are skipped
pytest.importorskip("triton")

from enginecfg.kernels.checks import state_precision  # noqa: E402

STEPS = 24


@pytest.mark.parametrize("kernel", ["mamba2", "gated_delta"])
def test_error_orders_by_state_dtype(kernel, device):
    res = {sd: state_precision(kernel, sd, STEPS, device, seed=1)
           for sd in ("float32", "float16", "bfloat16")}
    for r in res.values():
        assert r.steps == STEPS and len(r.state_errors) == STEPS == len(r.output_errors)
        assert all(math.isfinite(e) for e in r.state_errors)
    assert res["float32"].max_state_error < 1e-5
    assert res["float32"].max_state_error < res["float16"].max_state_error
    assert res["float16"].max_state_error < res["bfloat16"].max_state_error
    assert res["bfloat16"].max_state_error < 0.1  # still bounded: decay forgets old rounding


def test_rejects_unknown_kernel():
    from enginecfg.pipeline.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="kernel"):
        state_precision("mamba1", "float32", 1, "cpu")
