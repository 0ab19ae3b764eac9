"""Kernel tests run in Triton's CPU interpreter.

``TRITON_INTERPRET`` must be set before any kernel module is imported (Triton decides at
``@triton.jit`` time whether a function is interpreted), so it is set here, first thing.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import warnings  # noqa: E402

import pytest  # noqa: E402

# The interpreter evaluates sigmoid/exp with numpy, which warns on a harmless overflow to inf.
warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\..*")


@pytest.fixture
def device() -> str:
    """Kernels run on the CPU through the interpreter."""
    return "cpu"
