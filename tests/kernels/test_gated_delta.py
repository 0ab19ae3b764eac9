"""Gated delta rule decode step against float64."""

import pytest

torch = pytest.importorskip("torch")  # the gpu extra: without it these tests are skipped
pytest.importorskip("triton")

from enginecfg.kernels.checks import check_gated_delta, check_gated_delta_packed  # noqa: E402
from enginecfg.kernels.gated_delta import gated_delta_step, reference_gated_delta_step  # noqa: E402
from enginecfg.pipeline.errors import InvalidInputError  # noqa: E402


@pytest.mark.parametrize("state_dtype", ["float32", "float16", "bfloat16"])
def test_gdn_each_state_dtype_grouped_heads(state_dtype, device):
    # nv / nk = 3, as Qwen3.5-27B's 48 / 16
    res = check_gated_delta(2, 2, 6, 32, 32, state_dtype, "bfloat16", device, seed=1)
    assert res.passed, res.errors


def test_gdn_without_l2norm_and_rectangular_state(device):
    res = check_gated_delta(2, 1, 2, 48, 24, "float32", "float32", device, seed=2,
                            use_qk_l2norm=False)
    assert res.passed and res.max_error < 1e-4, res.errors


def test_gdn_delta_rule_stores_value_for_unit_key():
    # With S = 0, g = 0, beta = 1 and a unit key e_0, one step must leave S = v e_0^T and
    # return o = scale * v (q = k): the rule writes v under key k.
    dk = dv = 16
    state = torch.zeros(1, 1, dv, dk)
    k = torch.zeros(1, 1, dk)
    k[..., 0] = 1.0
    v = torch.randn(1, 1, dv)
    o = gated_delta_step(state, k.clone(), k, v, torch.zeros(1, 1), torch.ones(1, 1), scale=1.0)
    assert torch.allclose(state[0, 0, :, 0], v[0, 0], atol=1e-5)
    assert torch.count_nonzero(state[0, 0, :, 1:]) == 0
    assert torch.allclose(o[0, 0], v[0, 0], atol=1e-5)
    s_ref = torch.zeros(1, 1, dv, dk, dtype=torch.float64)
    o_ref = reference_gated_delta_step(s_ref, k.clone(), k, v, torch.zeros(1, 1), torch.ones(1, 1),
                                       scale=1.0)
    assert torch.allclose(o_ref.float(), o, atol=1e-5)


def test_gdn_wrong_head_mapping_is_detected(device):
    # key heads repeated in the wrong order (tiling instead of interleaving)
    def tiled(args):
        return dict(args, q=args["q"].flip(1).contiguous(), k=args["k"].flip(1).contiguous())

    res = check_gated_delta(2, 2, 4, 16, 16, "float32", "float32", device, seed=3, perturb=tiled)
    assert not res.passed


def test_gdn_rejects_value_heads_not_multiple_of_key_heads():
    with pytest.raises(InvalidInputError, match="nk"):
        gated_delta_step(torch.zeros(1, 5, 8, 8), torch.zeros(1, 2, 8), torch.zeros(1, 2, 8),
                         torch.zeros(1, 5, 8), torch.zeros(1, 5), torch.zeros(1, 5))


@pytest.mark.parametrize("state_dtype", ["float32", "bfloat16"])
def test_gdn_packed_inputs_each_state_dtype(state_dtype, device):
    res = check_gated_delta_packed(3, 2, 6, 32, 32, state_dtype, "bfloat16", device, seed=5)
    assert res.passed, res.errors


def test_gdn_packed_matches_unpacked_step():
    from enginecfg.kernels._reference import unpack_gated_delta_inputs
    from enginecfg.kernels.gated_delta import gated_delta_step_packed

    torch.manual_seed(0)
    nk, nv, dk, dv, batch = 2, 4, 16, 8, 3
    state = torch.randn(4, nv, dv, dk) * 0.3
    mixed = torch.randn(batch, 2 * nk * dk + nv * dv)
    a, b = torch.randn(batch, nv), torch.randn(batch, nv)
    A_log, dt_bias = torch.rand(nv), torch.randn(nv)
    idx = torch.tensor([2, 0, 3], dtype=torch.int32)
    s1, s2 = state.clone(), state.clone()
    o1 = gated_delta_step_packed(s1, mixed, a, b, A_log, dt_bias, state_indices=idx)
    parts = unpack_gated_delta_inputs(mixed, a, b, A_log, dt_bias, nk, dk, dv, compute_dtype=torch.float32)
    o2 = gated_delta_step(s2, **parts, state_indices=idx)
    assert torch.allclose(o1, o2, atol=1e-5) and torch.allclose(s1, s2, atol=1e-5)
    assert torch.equal(s1[1], state[1])  # the slot no sequence maps to is untouched


def test_gdn_packed_wrong_key_head_split_is_detected(device):
    # q and k swapped in the packed row: the check must notice
    def swapped(args):
        m = args["mixed_qkv"].clone()
        half = 16  # nk * dk: q is columns [0, 16), k [16, 32), v the rest
        q, k = m[:, :half].clone(), m[:, half:2 * half].clone()
        m[:, :half], m[:, half:2 * half] = k, q
        return dict(args, mixed_qkv=m)

    res = check_gated_delta_packed(2, 1, 2, 16, 16, "float32", "float32", device, seed=6, perturb=swapped)
    assert not res.passed


def test_gdn_packed_rejects_a_width_that_does_not_split():
    from enginecfg.kernels.gated_delta import gated_delta_step_packed

    with pytest.raises(InvalidInputError, match="mixed_qkv"):
        gated_delta_step_packed(torch.zeros(1, 2, 8, 8), torch.zeros(1, 2 * 8 + 2 * 8 + 3), torch.zeros(1, 2),
                                torch.zeros(1, 2), torch.zeros(2), torch.zeros(2))


LAUNCHES = [{"const": True}, {"const": True, "block_v": 8}, {"const": True, "block_v": 32},
            {"hints": False, "maxnreg": 168}]


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("launch", LAUNCHES, ids=lambda d: ",".join(f"{k}={v}" for k, v in d.items()))
def test_gdn_launch_variants_match_the_default(launch, packed):
    """Constant strides and the register cap compute exactly what the default launch
    computes: a padded slot (-1) gives zeros and leaves the state alone, a slot no sequence
    maps to is untouched, a head whose rows do not fill the last tile (dv 24) is masked."""
    from enginecfg.kernels.gated_delta import gated_delta_step_packed

    torch.manual_seed(7)
    nk, nv, dk, batch = 2, 4, 32, 3
    for dv, state_dtype in ((24, torch.float32), (32, torch.bfloat16)):
        state = (torch.randn(5, nv, dv, dk) * 0.3).to(state_dtype)
        idx = torch.tensor([3, -1, 0], dtype=torch.int32)
        if packed:
            mixed = torch.randn(batch, 2 * nk * dk + nv * dv)
            a, b = torch.randn(batch, nv), torch.randn(batch, nv)
            A_log, dt_bias = torch.rand(nv), torch.randn(nv)

            def step(s, lc):
                return gated_delta_step_packed(s, mixed, a, b, A_log, dt_bias, state_indices=idx, launch=lc)
        else:
            q, k = torch.randn(batch, nk, dk), torch.randn(batch, nk, dk)
            v, g, beta = torch.randn(batch, nv, dv), -torch.rand(batch, nv), torch.rand(batch, nv)

            def step(s, lc):
                return gated_delta_step(s, q, k, v, g, beta, state_indices=idx, launch=lc)
        s1, s2 = state.clone(), state.clone()
        o1, o2 = step(s1, None), step(s2, launch)
        assert torch.equal(o1, o2) and torch.equal(s1, s2)
        assert torch.count_nonzero(o2[1]) == 0
        assert torch.equal(s2[1], state[1]) and torch.equal(s2[2], state[2]) and torch.equal(s2[4], state[4])
        assert not torch.equal(s2[3], state[3])


def test_gdn_register_cap_only_for_float32_streams_of_many_waves():
    """The cap (and no cache hints) where a float32 state is streamed in more than two
    waves of 16 programs a multiprocessor; not for one sequence, 8 sequences or 16-bit
    states (bench/NOTES.md, round 5)."""
    from enginecfg.kernels.gated_delta import gdn_launch_config

    def cfg(batch, dtype, packed=False):
        return gdn_launch_config(128, 128, dtype, packed=packed, programs=batch * 48, sms=132)

    for packed in (False, True):
        for batch in (12, 64, 256):
            c = cfg(batch, torch.float32, packed)
            assert c["maxnreg"] == 168 and not c["hints"] and c["block_v"] == 16, (batch, c)
        for batch in (1, 8, 11):
            c = cfg(batch, torch.float32, packed)
            assert c["maxnreg"] == 0 and c["hints"], (batch, c)
        for batch in (1, 256):
            assert cfg(batch, torch.bfloat16, packed)["maxnreg"] == 0
    assert gdn_launch_config(128, 128, torch.float32)["maxnreg"] == 168
    assert gdn_launch_config(128, 128, torch.float32, {"maxnreg": 0}, programs=256 * 48)["maxnreg"] == 0
