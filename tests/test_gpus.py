"""The GPU presets: found by any spelling, refused with the presets listed."""

import pytest

from enginecfg import InvalidInputError
from enginecfg.pipeline.models.gpus import DEFAULT_GPU, GPUS, custom_gpu, find_gpu


@pytest.mark.parametrize("text, name", [("H200", "H200"), ("h100", "H100-80GB"), ("H100 SXM", "H100-80GB"),
                                        ("NVIDIA L40S", "L40S"), ("a100_40gb", "A100-40GB"), ("b200", "B200")])
def test_a_preset_is_found_by_any_spelling(text, name):
    assert find_gpu(text).name == name


def test_every_preset_states_its_memory_and_capability():
    for gpu in GPUS.values():
        assert gpu.memory_bytes > 16 * 2**30 and gpu.capability >= (8, 0)
        assert find_gpu(gpu.name) is gpu and find_gpu(gpu.device_name) is gpu


def test_an_unknown_gpu_names_the_field_the_closest_preset_and_every_preset():
    with pytest.raises(InvalidInputError) as err:
        find_gpu("H300")
    assert err.value.field == "gpu"
    text = str(err.value)
    assert "'H300'" in text and "did you mean 'H200'" in text and all(name in text for name in GPUS)


def test_a_card_of_other_memory_starts_like_the_card_it_is_like():
    gpu = custom_gpu(96)
    assert gpu.memory_bytes == 96 * 2**30 and gpu.capability == DEFAULT_GPU.capability


def test_the_default_card_is_the_h200_as_its_driver_reports_it():
    # measured on a real H200: CUDA reports 615 MiB less than the 143,771 MiB nvidia-smi lists
    assert DEFAULT_GPU.name == "H200" and DEFAULT_GPU.memory_bytes == 150_109_880_320
    assert DEFAULT_GPU.listed_mib == 143_771 and DEFAULT_GPU.memory_bytes < DEFAULT_GPU.listed_mib * 2**20
    assert DEFAULT_GPU.free_at_start_bytes == 149_557_477_376 and "mem_get_info" in DEFAULT_GPU.basis
    assert "nvidia-smi" in find_gpu("L4").basis and find_gpu("L4").free_at_start_bytes is None


def test_a_start_up_block_size_can_be_handed_to_the_figures():
    """The start-up step's block size (FLASHMLA's 64 for MLA + fp8 on an H200) goes into the
    figures as it is handed in; vLLM 0.19.0 gives 14,563 blocks of 64 = 932,032 tokens for
    this config at 2 GiB of KV cache (issue 29, item 5)."""
    from support import CONFIGS

    from enginecfg import EngineConfig, Pipeline
    from enginecfg.pipeline.models import capacity

    cfg = Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(
        CONFIGS / "deepseek-v2-lite-like", kv_cache_dtype="fp8")).config
    at_16 = capacity.impact(cfg, kv_cache_memory=2 * 2**30)
    at_64 = capacity.impact(cfg, kv_cache_memory=2 * 2**30, startup_block_size=64)
    assert (at_16.num_blocks, at_16.kv_tokens) == (58_254, 932_064)
    assert (at_64.num_blocks, at_64.kv_tokens) == (14_563, 932_032)
    assert at_64.groups[0].block_size == 64


# -- the consumer, workstation and Grace-Blackwell cards ---------------------------------------

@pytest.mark.parametrize("name, device, capability, memory, listed", [
    # memory as CUDA reports it where a public deviceQuery / torch printout gave it, else as
    # nvidia-smi lists it (the cited figures are in gpus.py)
    ("RTX-3090", "NVIDIA GeForce RTX 3090", (8, 6), 25_447_170_048, 24_576),
    ("RTX-4090", "NVIDIA GeForce RTX 4090", (8, 9), 24_564 * 2**20, 24_564),
    ("RTX-5090", "NVIDIA GeForce RTX 5090", (12, 0), 33_680_457_728, 32_607),
    ("RTX-A6000", "NVIDIA RTX A6000", (8, 6), 49_140 * 2**20, 49_140),
    ("RTX-PRO-6000", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", (12, 0), 97_887 * 2**20, 97_887),
    ("GB10", "NVIDIA GB10", (12, 1), round(121.69 * 2**30), 0),
    ("GB200", "NVIDIA GB200", (10, 0), 189_471 * 2**20, 189_471),
    ("GB300", "NVIDIA GB300", (10, 3), 284_208 * 2**20, 284_208),
])
def test_the_users_cards_are_presets(name, device, capability, memory, listed):
    gpu = find_gpu(name)
    assert (gpu.device_name, gpu.capability, gpu.memory_bytes, gpu.listed_mib) == (device, capability, memory, listed)
    assert find_gpu(device) is gpu
    # a CUDA-reported total is below what nvidia-smi lists (the driver keeps some)
    assert gpu.listed_mib == 0 or gpu.memory_bytes <= gpu.listed_mib * 2**20


def test_the_spark_shares_the_system_memory_and_says_so():
    spark = find_gpu("DGX Spark")
    assert spark.name == "GB10" and spark.unified and "unified" in spark.basis
    assert spark.to_dict()["unified"] is True and find_gpu("H200").to_dict()["unified"] is False
    # nvidia-smi lists no memory for it: the basis is never a listing of 0 MiB
    assert "nvidia-smi lists the card" not in spark.basis


_Q = dict(dtype="bfloat16", block_size=None)


@pytest.mark.parametrize("capability", [(12, 0), (12, 1)])
def test_the_backends_vllm_0_19_picks_on_sm12(capability):
    """vLLM 0.19.0 (``platforms/cuda.py: _get_backend_priorities``): on 12.x the non-MLA order is
    FLASH_ATTN, FLASHINFER, TRITON_ATTN, FLEX_ATTENTION; FlashAttention runs version 2 there
    (``fa_utils.get_flash_attn_version``: 3 only on 9.x, 4 only on 10.x), which takes no FP8 KV
    cache, so an FP8 cache goes to FLASHINFER (capability 7.5-12.1).  MLA: FLASH_ATTN_MLA
    (9.x), FLASHMLA (9.x/10.x dense) and FLASHINFER_MLA (10.x) are unsupported, TRITON_MLA
    serves."""
    from enginecfg.pipeline.models import backends as be

    ctx = be.Context(capability)
    assert be.flash_attn_version(capability) == 2
    assert be.select(be.Query(128, kv_cache_dtype="auto", use_mla=False, **_Q), ctx).backend == "FLASH_ATTN"
    fp8 = be.select(be.Query(128, kv_cache_dtype="fp8", use_mla=False, **_Q), ctx)
    assert fp8.backend == "FLASHINFER" and dict(fp8.refused)["FLASH_ATTN"] == ("kv_cache_dtype not supported",)
    mla = be.select(be.Query(576, kv_cache_dtype="auto", use_mla=True, **_Q), ctx)
    assert mla.backend == "TRITON_MLA"
    assert {name for name, why in mla.refused if "compute capability not supported" in why} == {
        "FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "FLASHMLA_SPARSE"}


@pytest.mark.parametrize("capability", [(12, 0), (12, 1)])
def test_the_backends_vllm_0_34_picks_on_sm12(capability):
    """vLLM 0.34.0 (RULES.md B1, B2): 12.x takes the 8.x order (FLASH_ATTN first, FA2: no FP8 KV
    cache, so FLASHINFER serves one); its MLA list is TRITON_MLA then the SM120 sparse backend."""
    from enginecfg.pipeline.models.v034 import backends as be

    assert be.priorities(False, capability) == ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION",
                                                "TURBOQUANT")
    assert be.priorities(True, capability) == ("TRITON_MLA", "FLASHINFER_MLA_SPARSE_SM120")
    auto = be.select(be.Query(128, kv_cache_dtype="auto", use_mla=False, **_Q), be.Context(capability))
    assert auto.backend == "FLASH_ATTN"
    fp8 = be.select(be.Query(128, kv_cache_dtype="fp8", use_mla=False, **_Q),
                    be.Context(capability, cache_dtype="fp8"))
    assert fp8.backend == "FLASHINFER" and "kv_cache_dtype not supported" in dict(fp8.refused)["FLASH_ATTN"]
    mla = be.select(be.Query(576, kv_cache_dtype="auto", use_mla=True, **_Q), be.Context(capability))
    assert mla.backend == "TRITON_MLA"


@pytest.mark.parametrize("release", ["0.19.0", "0.34.0"])
@pytest.mark.parametrize("gpu, attention", [("RTX-5090", "FLASH_ATTN"), ("RTX-PRO-6000", "FLASH_ATTN"),
                                            ("GB10", "FLASH_ATTN"), ("GB200", "FLASHINFER"),
                                            ("GB300", "FLASHINFER"), ("RTX-3090", "FLASH_ATTN")])
def test_the_engine_start_on_the_new_cards(release, gpu, attention):
    from enginecfg import Pipeline

    r = Pipeline(vllm_version=release, gpu=gpu, gpu_validation="off").resolve("examples/models/qwen3.5-27b")
    assert [b.backend for b in r.startup.backends] == ["GDN_ATTN", attention]
    assert r.gpu["name"] == gpu
