"""fp8 KV caches read in fp8, and MLA's latent-cache decode, against float64."""

import pytest

torch = pytest.importorskip("torch")  # the gpu extra: without it these tests are skipped
pytest.importorskip("triton")

from enginecfg.kernels.checks import check_mla_attention, check_paged_attention_fp8  # noqa: E402
from enginecfg.kernels.paged_attention import mla_decode_attention, paged_decode_attention  # noqa: E402
from enginecfg.pipeline.errors import InvalidInputError  # noqa: E402


@pytest.mark.parametrize("kv_dtype", ["fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("q_dtype", ["bfloat16", "float16"])
def test_fp8_decode_reads_fp8_with_scales(kv_dtype, q_dtype, device):
    res = check_paged_attention_fp8(64, 2, 4, 16, kv_dtype, [37, 5, 20], device, seed=1, q_dtype=q_dtype)
    assert res.passed, res.errors
    assert res.shapes["kv_dtype"].startswith("float8") and res.shapes["k_scale"] != 1.0


def test_fp8_decode_split_and_odd_block(device):
    res = check_paged_attention_fp8(128, 1, 2, 784, "fp8_e4m3", [900, 3], device, seed=2, num_splits=3)
    assert res.passed, res.errors


def test_fp8_decode_wrong_scale_is_detected(device):
    def doubled(args):
        return dict(args, v_scale=args["v_scale"] * 2)

    res = check_paged_attention_fp8(64, 1, 2, 16, "fp8_e4m3", [40, 9], device, seed=3, perturb=doubled)
    assert not res.passed


def test_fp8_cache_in_fp8_not_upcast(device):
    # the kernel takes the fp8 tensors themselves: half the bytes of a bf16 cache
    k = torch.randn(4, 16, 1, 32).to(torch.float8_e4m3fn)
    q = torch.randn(1, 2, 32, dtype=torch.bfloat16)
    table = torch.tensor([[2, 0]], dtype=torch.int32)
    lens = torch.tensor([20], dtype=torch.int32)
    out = paged_decode_attention(q, k, k, table, lens, 32 ** -0.5, k_scale=0.5, v_scale=2.0)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "float32", "fp8_e4m3"])
def test_mla_decode_each_cache_dtype(kv_dtype, device):
    # DeepSeek's 512 + 64 latent, 3 heads (padded to one 16-head program)
    res = check_mla_attention(512, 64, 3, 16, kv_dtype, [37, 5], device, seed=4)
    assert res.passed, res.errors


def test_mla_decode_odd_sizes_many_heads_and_splits(device):
    res = check_mla_attention(48, 8, 17, 32, "float16", [70, 1], device, seed=5, num_splits=3)
    assert res.passed, res.errors


def test_mla_wrong_latent_split_is_detected(device):
    # reading the rope part as part of the value: kv_lora_rank off by the rope width
    def no_rope(args):
        return dict(args, kv_lora_rank=args["kv_lora_rank"] - 8)

    with pytest.raises(InvalidInputError):
        check_mla_attention(32, 8, 2, 16, "float32", [20], device, seed=6, perturb=no_rope)


def test_mla_scrambled_block_table_is_detected(device):
    def flipped(args):
        return dict(args, block_table=args["block_table"].flip(1).contiguous())

    res = check_mla_attention(32, 16, 2, 16, "float32", [40], device, seed=7, perturb=flipped)
    assert not res.passed


def test_mla_accepts_vllm_four_dim_cache():
    c = torch.randn(3, 16, 1, 40)
    q = torch.randn(2, 4, 40)
    table = torch.tensor([[0, 1], [2, 0]], dtype=torch.int32)
    lens = torch.tensor([20, 7], dtype=torch.int32)
    out = mla_decode_attention(q, c, table, lens, 0.2, 32)
    assert out.shape == (2, 4, 32)
    with pytest.raises(InvalidInputError, match="kv_cache.shape"):
        mla_decode_attention(q, torch.randn(3, 16, 2, 40), table, lens, 0.2, 32)
