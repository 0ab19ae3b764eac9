"""The core stays light, and installing enginecfg shadows no other package."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from support import CONFIGS


def _py(code: str) -> str:
    proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=os.environ["ENGINECFG_TEST_TMP"])
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_import_and_a_run_without_gpu_validation_import_neither_torch_nor_triton():
    path = str(CONFIGS / "nemotron-3-nano-30b-a3b-bf16")
    out = _py(
        "import sys, json\n"
        "import enginecfg\n"
        "after_import = [m for m in ('torch', 'triton', 'transformers') if m in sys.modules]\n"
        "from enginecfg import EngineConfig, Pipeline\n"
        f"r = Pipeline(gpu_validation='off').run(EngineConfig.from_pretrained({path!r}))\n"
        "after_run = [m for m in ('torch', 'triton', 'transformers') if m in sys.modules]\n"
        "print(json.dumps([after_import, after_run, r.config.cache_config.block_size]))\n")
    after_import, after_run, block = json.loads(out)
    assert after_import == [] and after_run == []
    assert block > 16  # it really ran the hybrid alignment


def test_installing_enginecfg_does_not_shadow_hf_kernels():
    # Hugging Face's `kernels` package: whatever find_spec says must not be our kernels/ folder,
    # and transformers' own probe must see the same as without enginecfg on the path
    out = _py(
        "import importlib.util, json\n"
        "spec = importlib.util.find_spec('kernels')\n"
        "import enginecfg, enginecfg.kernels\n"
        "from transformers.utils import import_utils\n"
        "print(json.dumps([None if spec is None else spec.origin, enginecfg.kernels.__name__,"
        " bool(import_utils.is_kernels_available())]))\n")
    origin, name, available = json.loads(out)
    assert name == "enginecfg.kernels"
    assert origin is None or "enginecfg" not in origin and "/main/kernels" not in origin
    baseline = _py("import json, importlib.util\nfrom transformers.utils import import_utils\n"
                   "s = importlib.util.find_spec('kernels')\n"
                   "print(json.dumps([None if s is None else s.origin, bool(import_utils.is_kernels_available())]))")
    assert json.loads(baseline) == [origin, available]
    for bare in ("pipeline", "stages", "store", "migrations"):
        assert _py(f"import importlib.util; print(importlib.util.find_spec({bare!r}) is None)") == "True"
