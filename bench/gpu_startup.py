"""Where the gpu-validation stage's start-up time goes, in a new process.

    python bench/gpu_startup.py [--configs DIR] [--models a,b] [--runs 3] [--out DIR]

For each model, fresh processes (the first with an empty Triton cache: cold; then
``--runs`` with the cache filled: warm) each time, in order:

* interpreter start (``python -c pass``, measured separately);
* ``import enginecfg`` and resolving the config with GPU validation off (no torch);
* ``import torch``; the CUDA context (``torch.cuda.init()`` + a first allocation);
* ``import triton`` and the kernel modules;
* (one more warm process, ``fine``) the first torch CUDA kernels, cuBLAS's start, and the
  first two Triton launches, split out of what the first check otherwise pays;
* the gpu-validation stage itself, check by check (the wall time of each check, its
  first kernel call included: the Triton cache lookup and module load, or compilation
  when cold), and then every check a second time in the same process, so the
  difference is the per-process first-call cost.

Prints one table per model (median of the warm runs, and the cold run); writes
``gpu_startup.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT = "nemotron-3-nano-30b-a3b-bf16,qwen3.5-27b,gemma-4-26b-a4b"

CHILD = r"""
import json, sys, time
T0 = time.perf_counter()
marks = {}
def mark(name, t=[T0]):
    now = time.perf_counter(); marks[name] = now - t[0]; t[0] = now
import enginecfg
from enginecfg import EngineConfig, Pipeline
cfg_path = sys.argv[1]
FINE = sys.argv[2] == "1"
Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(cfg_path))
mark("enginecfg import + config (no GPU)")
import torch
mark("import torch")
torch.cuda.init(); torch.empty(1, device="cuda"); torch.cuda.synchronize()
mark("CUDA context")
import triton
import enginecfg.kernels.checks, enginecfg.kernels.paged_attention, enginecfg.kernels.mamba_ssm
import enginecfg.kernels.gated_delta, enginecfg.kernels.page_check
mark("import triton + kernel modules")
if FINE:
    g = torch.Generator(device="cuda").manual_seed(0)
    torch.randn(64, generator=g, device="cuda"); torch.randperm(64, generator=g, device="cuda")
    torch.cuda.synchronize()
    mark("first torch CUDA kernels (RNG, randperm)")
    a = torch.randn(8, 8, device="cuda", dtype=torch.float64); (a @ a).sum().item()
    mark("cuBLAS start (first float64 matmul)")
    from enginecfg.kernels.mamba_ssm import causal_conv1d_update, selective_state_update
    causal_conv1d_update(torch.zeros(1, 3, 8, device="cuda"), torch.zeros(1, 8, device="cuda"),
                         torch.zeros(8, 4, device="cuda")); torch.cuda.synchronize()
    mark("Triton: first launch in the process")
    selective_state_update(torch.zeros(1, 2, 4, 16, device="cuda"), torch.zeros(1, 2, 4, device="cuda"),
                           torch.zeros(1, 2, device="cuda"), torch.zeros(2, device="cuda"),
                           torch.zeros(1, 1, 16, device="cuda"), torch.zeros(1, 1, 16, device="cuda"))
    torch.cuda.synchronize()
    mark("Triton: a second kernel's first launch")
from enginecfg.stages import gpu_validation as gv
checks = {}
real = gv.GpuValidationStage._run_check
def timed(self, check, device, name, ctx):
    t = time.perf_counter()
    entry = real(self, check, device, name, ctx)
    torch.cuda.synchronize()
    checks[check.name] = [time.perf_counter() - t, entry["passed"]]
    return entry
gv.GpuValidationStage._run_check = timed
res = Pipeline(gpu_validation="require-gpu").run(EngineConfig.from_pretrained(cfg_path))
mark("stage (whole run)")
plan = gv.build_plan(res.config, interpret=False)
from enginecfg.kernels.checks import run_check
again = {}
for c in plan:
    t = time.perf_counter()
    run_check(c.check, device="cuda", **c.args)
    torch.cuda.synchronize()
    again[c.name] = time.perf_counter() - t
print("RESULT " + json.dumps({"marks": marks, "checks": checks, "again": again,
                              "status": res.to_dict()["validation"]["status"]}))
"""


USER = r"""
import sys, time
t = time.perf_counter()
from enginecfg import EngineConfig, Pipeline
if sys.argv[2] == "0":  # the baseline: no prefetch, the imports happen when the stage runs
    from enginecfg.stages import gpu_validation
    gpu_validation.start_prefetch = lambda: None
p = Pipeline(gpu_validation="require-gpu")
res = p.run(EngineConfig.from_pretrained(sys.argv[1]))
assert res.to_dict()["validation"]["status"] == "passed"
print("RESULT %.4f" % (time.perf_counter() - t))
"""


def user_run(cfg: Path, cache: str, prefetch: bool) -> float:
    """Whole process wall of a plain ``Pipeline(gpu_validation="require-gpu").run(...)``."""
    env = dict(os.environ, TRITON_CACHE_DIR=cache)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", USER, str(cfg), "1" if prefetch else "0"], capture_output=True,
                          text=True, env=env,
                          cwd=tempfile.gettempdir())
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    return time.perf_counter() - t


def child(cfg: Path, cache: str, fine: bool, env_extra: dict | None = None) -> dict:
    env = dict(os.environ, TRITON_CACHE_DIR=cache, **(env_extra or {}))
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, str(cfg), "1" if fine else "0"], capture_output=True, text=True, env=env,
                          cwd=tempfile.gettempdir())
    wall = time.perf_counter() - t
    for ln in proc.stdout.splitlines():
        if ln.startswith("RESULT "):
            out = json.loads(ln[7:])
            out["process_wall"] = wall
            return out
    raise RuntimeError(f"child failed ({proc.returncode}): {proc.stderr[-3000:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default=str(REPO / "tests" / "data" / "vllm-0.19.0" / "configs"))
    ap.add_argument("--models", default=DEFAULT)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    bare = time.perf_counter() - t
    report = {"python_c_pass_s": bare, "models": {}}
    print(f"python -c pass: {bare * 1e3:.0f} ms", flush=True)
    for model in a.models.split(","):
        cfg = Path(a.configs).resolve() / model
        with tempfile.TemporaryDirectory() as cache:
            runs = [child(cfg, cache, False) for _ in range(1 + a.runs)]
            fine = child(cfg, cache, True)
            users = {"prefetch off": user_run(cfg, cache, False), "prefetch on": user_run(cfg, cache, True)}
        cold, warm = runs[0], runs[1:]
        report["models"].setdefault(model, {})["fine"] = fine
        report["models"][model]["user_process_wall"] = users
        report["models"][model].update(cold=cold, warm=warm)
        print(f"\n== {model}: validation {cold['status']}; process wall cold {cold['process_wall']:.2f} s, "
              f"warm {statistics.median(r['process_wall'] for r in warm):.2f} s ==")
        print(f"{'phase':<44} {'cold ms':>9} {'warm ms':>9} {'2nd call ms':>11}")
        for k in cold["marks"]:
            wv = statistics.median(r["marks"][k] for r in warm)
            print(f"{k:<44} {cold['marks'][k] * 1e3:9.0f} {wv * 1e3:9.0f}")
        for k in cold["checks"]:
            wv = statistics.median(r["checks"][k][0] for r in warm)
            ag = statistics.median(r["again"].get(k, float("nan")) for r in warm)
            print(f"  check {k:<38} {cold['checks'][k][0] * 1e3:9.1f} {wv * 1e3:9.1f} {ag * 1e3:11.1f}")
        print(f"  finer split of one more warm process (process wall {fine['process_wall']:.2f} s):")
        for k, v in fine["marks"].items():
            print(f"    {k:<42} {v * 1e3:9.0f}")
        for k, v in fine["checks"].items():
            print(f"    check {k:<36} {v[0] * 1e3:9.1f}")
        print("  plain Pipeline(gpu_validation='require-gpu').run in a new process, warm: "
              + ", ".join(f"{k} {v:.2f} s" for k, v in users.items()))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_startup.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
