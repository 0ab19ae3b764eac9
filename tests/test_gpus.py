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
