"""Mamba2 selective state update and causal conv1d update against float64."""

import pytest

torch = pytest.importorskip("torch")  # the gpu extra: without it these tests are skipped
pytest.importorskip("triton")

from enginecfg.kernels.checks import check_causal_conv1d_update, check_selective_state_update  # noqa: E402
from enginecfg.kernels.mamba_ssm import causal_conv1d_update, selective_state_update  # noqa: E402
from enginecfg.pipeline.errors import InvalidInputError  # noqa: E402


@pytest.mark.parametrize("state_dtype", ["float32", "float16", "bfloat16"])
def test_ssm_update_each_state_dtype(state_dtype, device):
    res = check_selective_state_update(3, 4, 16, 32, 2, state_dtype, "bfloat16", device, seed=1)
    assert res.passed, res.errors
    assert set(res.errors) == {"y", "state"}


def test_ssm_update_float32_io_is_tight(device):
    res = check_selective_state_update(2, 4, 32, 64, 1, "float32", "float32", device, seed=2)
    assert res.passed and res.max_error < 1e-4, res.errors


def test_ssm_update_without_z_and_odd_sizes(device):
    # head_dim 24 and dstate 40 are padded to powers of two inside the kernel
    res = check_selective_state_update(2, 6, 24, 40, 3, "float32", "float16", device, seed=3,
                                       use_z=False, use_state_indices=False)
    assert res.passed, res.errors


def test_negative_state_index_leaves_slots_alone_and_zeros_output(device):
    torch.manual_seed(0)
    state = torch.randn(2, 2, 8, 16)
    before = state.clone()
    y = selective_state_update(state, torch.randn(1, 2, 8), torch.randn(1, 2), -torch.rand(2),
                               torch.randn(1, 1, 16), torch.randn(1, 1, 16),
                               state_indices=torch.tensor([-1], dtype=torch.int32))
    assert torch.equal(state, before)
    assert torch.equal(y, torch.zeros_like(y))


def test_ssm_wrong_slot_mapping_is_detected(device):
    def shifted(args):
        return dict(args, state_indices=(args["state_indices"] + 1) % (args["state"].shape[0]))

    res = check_selective_state_update(3, 2, 16, 16, 1, "float32", "float32", device, seed=4,
                                       perturb=shifted)
    assert not res.passed


def test_ssm_wrong_group_count_is_detected(device):
    # B and C of 2 groups read as if the heads shared one group: heads 2, 3 use group 0
    def one_group(args):
        return dict(args, B=args["B"][:, :1].contiguous(), C=args["C"][:, :1].contiguous())

    res = check_selective_state_update(2, 4, 16, 16, 2, "float32", "float32", device, seed=5,
                                       perturb=one_group)
    assert not res.passed


@pytest.mark.parametrize("state_dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("transposed", [False, True])
def test_conv_update_both_layouts(state_dtype, transposed, device):
    res = check_causal_conv1d_update(3, 80, 4, state_dtype, "bfloat16", device, seed=6,
                                     transposed_state=transposed)
    assert res.passed, res.errors
    assert res.errors["conv_state"][0] <= res.errors["conv_state"][1]


def test_conv_update_shifts_state_exactly(device):
    state = torch.arange(2 * 3 * 4, dtype=torch.float32).view(2, 3, 4)
    x = torch.full((2, 4), 100.0)
    causal_conv1d_update(state, x, torch.ones(4, 4), activation=None)
    expect = torch.arange(2 * 3 * 4, dtype=torch.float32).view(2, 3, 4)[:, 1:]
    assert torch.equal(state[:, :2], expect)
    assert torch.equal(state[:, 2], x)


def test_conv_wrong_width_is_detected(device):
    # weights of a width-4 conv handed over reversed (kernel taps in the wrong order)
    res = check_causal_conv1d_update(2, 32, 4, "float32", "float32", device, seed=7,
                                     perturb=lambda a: dict(a, weight=a["weight"].flip(1).contiguous()))
    assert not res.passed


def test_ssm_rejects_groups_not_dividing_heads():
    with pytest.raises(InvalidInputError, match="ngroups"):
        selective_state_update(torch.zeros(1, 4, 8, 16), torch.zeros(1, 4, 8), torch.zeros(1, 4),
                               torch.zeros(4), torch.zeros(1, 3, 16), torch.zeros(1, 3, 16))


def test_conv_rejects_weight_of_other_width():
    with pytest.raises(InvalidInputError, match="weight.shape"):
        causal_conv1d_update(torch.zeros(1, 3, 8), torch.zeros(1, 8), torch.zeros(8, 5))


@pytest.mark.parametrize("width", [2, 3, 4, 5, 6, 7])
def test_conv1d_each_width(width):
    from enginecfg.kernels._reference import reference_causal_conv1d_update

    torch.manual_seed(width)
    store = torch.randn(5, width - 1, 70)
    x, w, bias = torch.randn(3, 70), torch.randn(70, width), torch.randn(70)
    idx = torch.tensor([3, 0, -1], dtype=torch.int32)
    got_state = store.clone()
    got = causal_conv1d_update(got_state, x, w, bias, "silu", state_indices=idx, block_d=32,
                               num_warps=1)
    want_state = store.double().clone()
    want = reference_causal_conv1d_update(want_state, x, w, bias, "silu", idx)
    assert torch.allclose(got.double(), want, atol=1e-5)
    assert torch.allclose(got_state.double(), want_state, atol=1e-6)
