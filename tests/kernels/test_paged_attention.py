"""Paged decode and chunked-prefill attention against the float64 reference."""

import pytest

torch = pytest.importorskip("torch")  # the gpu extra: without it these tests are skipped
pytest.importorskip("triton")

from enginecfg.kernels.checks import check_paged_attention, check_paged_prefill  # noqa: E402
from enginecfg.kernels.paged_attention import decode_launch_config, paged_decode_attention  # noqa: E402
from enginecfg.pipeline.errors import InvalidInputError  # noqa: E402


@pytest.mark.parametrize("kv_dtype", ["float32", "float16", "bfloat16"])
def test_decode_each_kv_dtype_gqa(kv_dtype, device):
    res = check_paged_attention(128, 2, 8, 16, kv_dtype, [37, 5, 64], device, seed=1)
    assert res.passed, res.errors
    assert res.shapes["kv_dtype"] == kv_dtype


def test_decode_block_size_528_tile_straddles_blocks(device):
    # 600 tokens cover two 528-token blocks; tiles of 64 cross the block boundary at 528
    res = check_paged_attention(64, 1, 4, 528, "bfloat16", [600, 9], device, seed=2)
    assert res.passed, res.errors


@pytest.mark.parametrize("block_size", [784, 1056])
def test_decode_other_non_power_of_two_blocks(block_size, device):
    res = check_paged_attention(64, 1, 2, block_size, "float16", [block_size + 3], device, seed=3)
    assert res.passed, res.errors


def test_decode_head_512_few_tokens(device):
    res = check_paged_attention(512, 1, 8, 16, "bfloat16", [23, 2], device, seed=4)
    assert res.passed, res.errors


@pytest.mark.parametrize("head_size", [80, 96])
def test_decode_non_power_of_two_head(head_size, device):
    res = check_paged_attention(head_size, 2, 6, 32, "float16", [45, 17], device, seed=5)
    assert res.passed, res.errors


def test_decode_split_k_matches_unsplit_and_reference(device):
    split = check_paged_attention(128, 2, 4, 16, "float32", [150, 3, 0], device, seed=6, num_splits=5)
    whole = check_paged_attention(128, 2, 4, 16, "float32", [150, 3, 0], device, seed=6, num_splits=1)
    assert split.passed and whole.passed, (split.errors, whole.errors)
    assert split.max_error < 1e-5


def test_decode_empty_sequence_gives_zeros(device):
    q = torch.randn(1, 2, 64)
    k = torch.randn(2, 16, 1, 64)
    out = paged_decode_attention(q, k, k.clone(), torch.zeros(1, 1, dtype=torch.int32),
                                 torch.zeros(1, dtype=torch.int32), 0.125)
    assert torch.equal(out, torch.zeros_like(out))


def test_split_heuristic_splits_long_context_small_batch_only():
    dev = torch.device("cpu")
    long_small = decode_launch_config(1, 2, 32768, 128, torch.bfloat16, dev)
    big_batch = decode_launch_config(256, 8, 2048, 128, torch.bfloat16, dev)
    assert long_small["num_splits"] > 1
    assert big_batch["num_splits"] == 1
    cover = long_small["num_splits"] * long_small["tokens_per_split"]
    assert cover >= 32768 and long_small["tokens_per_split"] % long_small["tile"] == 0


def test_prefill_chunk_against_cached_prefix_block_528(device):
    # sequence 0: 560 cached + 16 new; sequence 1: a fresh prompt of 40 (no prefix)
    res = check_paged_prefill(128, 2, 4, 528, "bfloat16", [576, 40], [16, 40], device, seed=7)
    assert res.passed, res.errors


@pytest.mark.parametrize("kv_dtype", ["float32", "float16"])
def test_prefill_gqa_uneven_group_and_empty_chunk(kv_dtype, device):
    # G = 6 query heads per KV head (not a power of two); sequence 1 has no new tokens
    res = check_paged_prefill(96, 1, 6, 32, kv_dtype, [70, 33, 20], [21, 0, 20], device, seed=8)
    assert res.passed, res.errors


def test_prefill_head_512(device):
    res = check_paged_prefill(512, 1, 2, 16, "bfloat16", [20], [5], device, seed=9)
    assert res.passed, res.errors


def test_wrong_block_size_is_detected(device):
    # The kernel is handed the same memory viewed as 264-token blocks with the 528-token
    # block table: it reads the wrong tokens and the check must say so.
    def halve_blocks(args):
        k, v = args["k_cache"], args["v_cache"]
        n, bs, h, d = k.shape
        return dict(args, k_cache=k.view(n * 2, bs // 2, h, d), v_cache=v.view(n * 2, bs // 2, h, d))

    good = check_paged_attention(64, 1, 2, 528, "float32", [300, 600], device, seed=10)
    bad = check_paged_attention(64, 1, 2, 528, "float32", [300, 600], device, seed=10,
                                perturb=halve_blocks)
    assert good.passed
    assert not bad.passed and bad.max_error > 10 * bad.tolerance


def test_corrupted_block_table_is_detected(device):
    def swap_rows(args):
        bt = args["block_table"].clone()
        bt[[0, 1]] = bt[[1, 0]]
        return dict(args, block_table=bt)

    bad = check_paged_attention(128, 2, 4, 16, "bfloat16", [40, 40], device, seed=11,
                                perturb=swap_rows)
    assert not bad.passed and bad.max_error > bad.tolerance


def test_prefill_missing_causal_mask_is_detected(device):
    # Telling the kernel every sequence is one token longer moves each query one position
    # later, so each attends to one key past its own position.
    def longer(args):
        return dict(args, seq_lens=args["seq_lens"] + 1)

    bad = check_paged_prefill(64, 1, 2, 16, "float32", [20], [8], device, seed=12, perturb=longer)
    assert not bad.passed


def test_rejects_mismatched_head_size():
    q = torch.randn(1, 2, 64)
    k = torch.randn(2, 16, 1, 128)
    with pytest.raises(InvalidInputError, match="q.shape"):
        paged_decode_attention(q, k, k, torch.zeros(1, 1, dtype=torch.int32),
                               torch.ones(1, dtype=torch.int32), 0.1)


def test_rejects_query_heads_not_a_multiple_of_kv_heads():
    q = torch.randn(1, 3, 64)
    k = torch.randn(2, 16, 2, 64)
    with pytest.raises(InvalidInputError, match="num_kv_heads=2"):
        paged_decode_attention(q, k, k, torch.zeros(1, 1, dtype=torch.int32),
                               torch.ones(1, dtype=torch.int32), 0.1)


def test_rejects_int64_block_table():
    q = torch.randn(1, 2, 64)
    k = torch.randn(2, 16, 1, 64)
    with pytest.raises(InvalidInputError, match="block_table.dtype"):
        paged_decode_attention(q, k, k, torch.zeros(1, 1, dtype=torch.int64),
                               torch.ones(1, dtype=torch.int32), 0.1)
