"""``import enginecfg.kernels`` must stay free of torch and triton."""

import subprocess
import sys

import pytest


def test_package_import_pulls_in_neither_torch_nor_triton():
    code = (
        "import sys, enginecfg.kernels as k; "
        "assert 'paged_decode_attention' in k.__all__; "
        "print('torch' in sys.modules, 'triton' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_lazy_attribute_resolves_to_the_submodule_function():
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    import enginecfg.kernels as k
    from enginecfg.kernels.gated_delta import gated_delta_step

    assert k.gated_delta_step is gated_delta_step
    assert k.checks.check_gated_delta is k.check_gated_delta


def test_unknown_attribute_is_an_attribute_error():
    import enginecfg.kernels as k

    with pytest.raises(AttributeError, match="no_such_kernel"):
        k.no_such_kernel  # noqa: B018
