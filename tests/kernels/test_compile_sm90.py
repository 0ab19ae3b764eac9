"""The kernels compile for sm_90, not only run in the interpreter (see _compile_sm90.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("_compile_sm90.py")


def test_every_launch_variant_compiles_for_the_h200():
    pytest.importorskip("torch")  # the gpu extra: the script compiles the kernels with Triton
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env,
                          timeout=900)
    lines = proc.stdout.splitlines()
    assert lines and all(line.startswith("ok ") for line in lines), proc.stdout + proc.stderr[-2000:]
    assert proc.returncode == 0
    assert len(lines) == 16 + 2 + 2 + 3
