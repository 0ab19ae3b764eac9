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
