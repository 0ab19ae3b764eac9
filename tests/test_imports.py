"""The core stays light, and installing enginecfg shadows no other package."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from support import CONFIGS, REPO


def _py(code: str) -> str:
    """Run *code* against the install, as a user's process would (no checkout on the path)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=os.environ["ENGINECFG_TEST_TMP"], env=env)
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
    assert origin is None or "enginecfg" not in origin and not origin.startswith(str(REPO))
    baseline = _py("import json, importlib.util\nfrom transformers.utils import import_utils\n"
                   "s = importlib.util.find_spec('kernels')\n"
                   "print(json.dumps([None if s is None else s.origin, bool(import_utils.is_kernels_available())]))")
    assert json.loads(baseline) == [origin, available]
    for bare in ("pipeline", "stages", "store", "migrations"):
        assert _py(f"import importlib.util; print(importlib.util.find_spec({bare!r}) is None)") == "True"


# -- where Python starts: the checkout's root, its parent folder, anywhere else -----------------

def _run_from(cwd, code: str) -> subprocess.CompletedProcess:
    """``python -c`` as a user types it (no -P): the current folder is on sys.path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=str(cwd), env=env)


_PROBE = ("import json, enginecfg, enginecfg.pipeline.run, enginecfg.kernels\n"
          "from enginecfg import Stage\n"
          "from transformers.utils import import_utils\n"
          "print(json.dumps([enginecfg.pipeline.run.__file__, enginecfg.kernels.__name__,"
          " bool(import_utils.is_kernels_available())]))")


def test_the_checkout_root_imports_the_checkout_and_shadows_nothing():
    proc = _run_from(REPO, _PROBE)
    assert proc.returncode == 0, proc.stderr
    run_file, kernels_name, available = json.loads(proc.stdout)
    assert os.path.realpath(run_file) == str(REPO / "pipeline" / "run.py")
    assert kernels_name == "enginecfg.kernels"
    baseline = _py("from transformers.utils import import_utils\nprint(bool(import_utils.is_kernels_available()))")
    assert available == (baseline == "True")


def test_a_folder_named_enginecfg_beside_the_cwd_does_not_hide_the_install(tmp_path):
    # a clone named `enginecfg`, seen from its parent folder: a directory without __init__.py
    (tmp_path / "enginecfg").symlink_to(REPO, target_is_directory=True)
    proc = _run_from(tmp_path, _PROBE)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[1] == "enginecfg.kernels"


def test_python_m_pytest_works_in_the_checkout_root():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "tests/test_architectures.py"],
                          capture_output=True, text=True, timeout=600, cwd=str(REPO), env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout.splitlines()[-1]
