"""``KernelCheck``: the checks named by a type, not a string; the names import no torch."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from enginecfg.kernels.kinds import KernelCheck


def test_the_names_import_neither_torch_nor_triton():
    code = ("import sys; from enginecfg.kernels.kinds import KernelCheck; "
            "print(KernelCheck.PAGED_ATTENTION.kernel, 'torch' in sys.modules, 'triton' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["paged_decode_attention", "False", "False"]


def test_every_check_has_its_function_and_every_function_its_check():
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    from enginecfg.kernels import checks

    assert set(checks.CHECKS) == set(KernelCheck)
    functions = {name for name, fn in inspect.getmembers(checks, inspect.isfunction)
                 if fn.__module__ == checks.__name__ and (name.startswith("check_") or name == "state_precision")}
    assert {checks.CHECKS[c].__name__ for c in KernelCheck} == functions
    assert [c for c in KernelCheck if c.measures_precision] == [KernelCheck.STATE_PRECISION]


def test_a_check_runs_by_its_name(device):
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    from enginecfg.kernels.checks import run_check

    res = run_check(KernelCheck.PAGE_LAYOUT, device=device, page_size_bytes=4096, attn_block_bytes=2048,
                    mamba_state_bytes=[1024, 2048], num_pages=2)
    assert res.passed and res.name == "page_check"
