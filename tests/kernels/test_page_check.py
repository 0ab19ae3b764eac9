"""Hybrid page isolation: writes through each view stay inside their page."""

import pytest

pytest.importorskip("torch")  # the gpu extra: without it these tests are skipped
pytest.importorskip("triton")

from enginecfg.kernels.checks import check_page_layout  # noqa: E402
from enginecfg.kernels.page_check import page_check  # noqa: E402
from enginecfg.pipeline.errors import InvalidInputError  # noqa: E402

# A small hybrid layout: attention block of 2 x (block 16 x 2 heads x 32) bf16 = 4096 B,
# Mamba conv state (3 x 64 bf16 = 384 B) + ssm state (4 x 8 x 24 fp32 = 3072 B), padded.
PAGE = 4096
ATTN = 2 * 16 * 2 * 32 * 2
MAMBA = [3 * 64 * 2, 4 * 8 * 24 * 4]
DTYPES = ["bfloat16", "float32"]


def test_consistent_layout_passes(device):
    res = page_check(PAGE, ATTN, MAMBA, mamba_state_dtypes=DTYPES, device=device, num_pages=3)
    assert res.passed, res
    assert res.mamba_used_bytes == sum(MAMBA)
    assert res.fits == {"attention": True, "mamba[0]": True, "mamba[1]": True}
    assert res.violations == () and res.readback_ok


def test_padded_page_keeps_padding_untouched(device):
    # the attention block fills only half of a larger page: the tail is padding
    res = page_check(2 * PAGE, ATTN, MAMBA, mamba_state_dtypes=DTYPES, device=device)
    assert res.passed, res


def test_off_by_one_page_size_breaks_a_canary(device):
    res = page_check(PAGE - 2, ATTN, MAMBA, mamba_state_dtypes=DTYPES, device=device)
    assert not res.passed
    assert not res.fits["attention"]
    hits = [v for v in res.violations if v.kind == "canary" and v.view == "attention"]
    assert hits and hits[0].where.startswith("page 1 +0")


def test_kernel_with_wrong_page_stride_is_caught(device):
    res = page_check(PAGE, ATTN, MAMBA, mamba_state_dtypes=DTYPES, device=device,
                     kernel_page_size_bytes=PAGE + 16)
    assert not res.passed
    assert all(v.page >= 1 for v in res.violations)  # page 0 starts where it should
    assert {v.kind for v in res.violations} == {"canary", "data"}


def test_mamba_states_overflowing_the_page_are_caught(device):
    res = page_check(PAGE, ATTN, [384, PAGE], mamba_state_dtypes=DTYPES, device=device)
    assert not res.passed and not res.fits["mamba[1]"]
    assert any(v.view == "mamba[1]" and v.kind == "canary" for v in res.violations)


def test_misaligned_state_offset_fails_alignment(device):
    # a 2-byte conv state in front of a float32 state puts the latter off a 4-byte boundary
    res = page_check(PAGE, 0, [386, 1024], mamba_state_dtypes=DTYPES, device=device)
    assert not res.passed and res.aligned["mamba[1]"] is False
    assert res.violations == ()  # the bytes themselves stayed inside the page


def test_check_result_form(device):
    good = check_page_layout(PAGE, ATTN, MAMBA, device, mamba_state_dtypes=DTYPES)
    bad = check_page_layout(PAGE, ATTN + 2, MAMBA, device, mamba_state_dtypes=DTYPES)
    assert good.passed and good.max_error == 0
    assert not bad.passed and bad.max_error > bad.tolerance


def test_rejects_nonsense_sizes():
    with pytest.raises(InvalidInputError, match="page_size_bytes"):
        page_check(0, ATTN, MAMBA, device="cpu")
    with pytest.raises(InvalidInputError, match="mamba_state_dtypes"):
        page_check(PAGE, ATTN, MAMBA, mamba_state_dtypes=["float32"], device="cpu")


def test_unknown_state_dtypes_use_the_widest_element_that_fits(device):
    # without dtypes a 6-byte state and the state after it are copied as 2-byte elements,
    # so the check reports no misalignment that the layout does not have
    res = page_check(PAGE, 0, [6, 1024], device=device)
    assert res.passed, res
    assert res.aligned == {"mamba[0]": True, "mamba[1]": True}
