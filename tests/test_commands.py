"""``enginecfg.commands``: explain, plan and findings as library functions with typed results.

Each result's ``to_dict()`` is the command's ``--json`` document; ``plan`` loads every setting
the way ``run`` and ``explain`` do (a Hugging Face repo id from the hub cache, the dtype from
safetensors headers), opening the model's source once for the whole grid."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
from hubsupport import LocalHub, safetensors_bytes, write_cache_repo
from support import CONFIGS, REPO

from enginecfg import InvalidInputError
from enginecfg.commands import (
    ArgumentCause, ChangeCause, Explanation, Finding, Impact, ImpactOptions, ImpactUnavailable, Plan,
    PlanRow, RunOutcome, explain, findings, plan, run,
)

QWEN = CONFIGS / "qwen3.5-27b"
NEMOTRON_56B = CONFIGS / "nemotron-h-56b-base-8k"
GRID = {"tensor_parallel_size": [1, 2], "kv_cache_dtype": ["auto", "fp8"]}
#: a Qwen3-Next config that names no dtype: vLLM takes it from the safetensors headers
NEXT = json.loads((CONFIGS / "qwen3-next-default" / "config.json").read_text())
BIG_GPU = {"gpu_memory_gib": 1000}


def _cli(*args, env_extra=None, cwd=None):
    env = dict(os.environ)
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_ENDPOINT", "HF_TOKEN", "HF_HUB_OFFLINE"):
        env.pop(var, None)
    env["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "enginecfg", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)


# -- typed results ---------------------------------------------------------------------------

def test_explain_returns_typed_values():
    e = explain(QWEN, kv_cache_dtype="fp8", enable_prefix_caching=True)
    assert isinstance(e, Explanation) and isinstance(e.impact, Impact)
    assert e.engine_args == {"kv_cache_dtype": "fp8", "enable_prefix_caching": True}
    assert e.memory == ImpactOptions() and e.run_id == e.result.run_id
    imp = e.impact
    assert imp.kv_tokens > 0 and imp.concurrency_at(8192) == imp.concurrency[8192] > imp.max_concurrency
    assert imp.attention_block_size == 1568 == imp.groups[-1].block_size
    assert all(isinstance(f, Finding) for f in e.findings)
    big = {f.id: f for f in e.findings}["large-hybrid-block"]
    assert isinstance(big.caused_by, ChangeCause) and big.caused_by.stage == "hybrid-alignment"
    assert big.figures["block_size"] == 1568
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        e.findings[0].id = "other"
    with pytest.raises(TypeError):
        big.figures["block_size"] = 1  # read-only
    # findings() of the same run gives the same values
    assert findings(e.result) == e.findings


def test_a_finding_caused_by_an_engine_argument():
    e = explain(NEMOTRON_56B, mamba_ssm_cache_dtype="float16")
    f = {f.id: f for f in e.findings}["16-bit-ssm-state"]
    assert f.caused_by == ArgumentCause("--mamba-ssm-cache-dtype", "float16")
    assert f.to_dict()["caused_by"] == {"engine_argument": "--mamba-ssm-cache-dtype", "value": "float16"}


def test_unavailable_figures_are_a_value_and_a_finding(tmp_path):
    raw = json.loads((CONFIGS / "jamba-default" / "config.json").read_text())
    raw["mamba_dt_rank"] = -3
    (tmp_path / "config.json").write_text(json.dumps(raw))
    e = explain(tmp_path)
    assert isinstance(e.impact, ImpactUnavailable) and e.impact.field == "hf_config.mamba_dt_rank"
    assert [f.id for f in e.findings] == ["no-impact"]
    assert e.to_dict()["impact"] == {"error": e.impact.error, "field": "hf_config.mamba_dt_rank"}


def test_memory_options_typed_or_mapping():
    typed = explain(QWEN, memory=ImpactOptions(gpu_memory_gib=80.0))
    mapped = explain(QWEN, memory={"gpu_memory_gib": 80.0})
    assert typed.memory == mapped.memory and typed.impact == mapped.impact
    assert typed.impact.memory.gpu_memory_bytes == 80 * 2**30
    with pytest.raises(InvalidInputError, match="gpu_memory_utilization"):
        explain(QWEN, memory={"gpu_memory_utilization": 1.5})
    with pytest.raises(InvalidInputError, match="unknown impact option"):
        explain(QWEN, memory={"gpu_memory": 80})


def test_plan_returns_typed_rows_and_the_best_per_objective():
    p = plan(QWEN, GRID)
    assert isinstance(p, Plan) and len(p.rows) == 4 and all(isinstance(r, PlanRow) and r.ok for r in p.rows)
    assert [dict(r.setting) for r in p.rows] == [
        {"tensor_parallel_size": 1, "kv_cache_dtype": "auto"}, {"tensor_parallel_size": 1, "kv_cache_dtype": "fp8"},
        {"tensor_parallel_size": 2, "kv_cache_dtype": "auto"}, {"tensor_parallel_size": 2, "kv_cache_dtype": "fp8"}]
    best = p.best_row("concurrency")
    assert best.concurrency == max(r.concurrency for r in p.rows)
    assert p.best_row("granularity").granularity == min(r.block_size for r in p.rows)
    assert all(r.impact.concurrency_at(p.context) == r.concurrency for r in p.rows)
    with pytest.raises(InvalidInputError, match="objective"):
        p.best_row("speed")


@pytest.mark.parametrize("grid, context, needle", [
    ({"tensor_parralel_size": [1]}, 8192, "tensor_parallel_size"),   # the closest name is offered
    ({"tensor_parallel_size": []}, 8192, "non-empty list"),
    ({"kv_cache_dtype": "fp8"}, 8192, "non-empty list"),
    (GRID, 0, "context"),
])
def test_plan_bad_input_names_what_is_wrong(grid, context, needle):
    with pytest.raises(InvalidInputError, match=needle):
        plan(QWEN, grid, context=context)


def test_to_dict_is_the_clis_json():
    e = explain(QWEN, kv_cache_dtype="fp8", memory={"gpu_memory_gib": 80.0})
    proc = _cli("explain", str(QWEN), "--kv-cache-dtype", "fp8", "--gpu-memory", "80", "--json")
    assert proc.returncode == 0, proc.stderr
    cli = json.loads(proc.stdout)
    assert cli.pop("run_id") != e.run_id  # a run of its own
    mine = json.loads(json.dumps(e.to_dict(), default=str))
    mine.pop("run_id")
    assert cli == mine
    p = plan(QWEN, {"tensor_parallel_size": [1, 2]}, context=4096, enable_prefix_caching=True)
    proc = _cli("plan", str(QWEN), "--tp", "1,2", "--context", "4096", "--enable-prefix-caching", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == json.loads(json.dumps(p.to_dict(), default=str))


def test_run_yields_an_outcome_per_model_failures_included(tmp_path):
    from enginecfg.store import AuditStore

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("[]")
    with AuditStore(f"sqlite:///{tmp_path / 'audit.db'}").attach() as store:
        outcomes = list(run([QWEN, bad, CONFIGS / "olmo-hybrid-default"], store=store, tensor_parallel_size=4))
    ok, invalid, rejected = outcomes
    assert all(isinstance(o, RunOutcome) for o in outcomes)
    assert ok.exit_code == 0 and ok.error is None and ok.result.config.parallel_config.tensor_parallel_size == 4
    assert ok.to_dict() == ok.result.to_dict() and ok.recorded and ok.record_error is None
    assert invalid.result is None and invalid.exit_code == 2 and invalid.document["status"] == "invalid"
    assert rejected.exit_code == 1 and rejected.document["status"] == "rejected"
    assert all(o.recorded for o in outcomes)  # a failed run is recorded as failed
    assert [store.get_run(o.run_id)["status"] for o in outcomes] == ["resolved", "invalid", "rejected"]
    # without a store, nothing is recorded and nothing says it was
    alone = next(run([QWEN]))
    assert not alone.recorded and alone.record_error is None


# -- plan loads as run and explain do ---------------------------------------------------------

@pytest.fixture
def hub_home(tmp_path, monkeypatch):
    """A hub cache under HF_HOME holding org/next (its config names no dtype; the safetensors
    header says float16), offline."""
    home = tmp_path / "hf-home"
    config = json.dumps(NEXT).encode()
    commit = write_cache_repo(home / "hub", "org/next", {
        "config.json": config, "model.safetensors": safetensors_bytes({"w": ("F16", [4, 4])})})
    monkeypatch.setenv("HF_HOME", str(home))
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_ENDPOINT", "HF_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    return home, commit


def _agrees_with_explain(p: Plan, model, **base):
    """Every row of *p* has explain's figures and findings for the same setting."""
    for row in p.rows:
        assert row.ok, row.error
        one = explain(model, memory=p.memory, **base, **row.setting)
        assert row.impact.to_dict() == one.impact.to_dict()
        assert row.findings == one.findings
        assert row.result.config.to_config_dict() == one.result.config.to_config_dict()
        assert row.result.config.source == one.result.config.source


def test_plan_of_a_repo_id_from_the_hub_cache_agrees_with_explain(hub_home):
    home, commit = hub_home
    p = plan("org/next", GRID, memory=BIG_GPU)
    assert p.model == "org/next"
    _agrees_with_explain(p, "org/next")
    first = p.rows[0].result.config
    assert first.model_config.dtype == "float16"  # from the safetensors header, as vLLM reads it
    assert first.source["kind"] == "hub" and first.source["commit"] == commit
    assert {g.dtype for g in p.rows[0].impact.attention_groups} == {"float16"}
    # and from the command line, in a fresh process
    proc = _cli("plan", "org/next", "--tp", "1,2", "--kv-cache-dtype", "auto,fp8", "--gpu-memory", "1000",
                "--json", env_extra={"HF_HOME": str(home), "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == json.loads(json.dumps(p.to_dict(), default=str))
    proc = _cli("plan", "org/next", "--tp", "1,2", "--gpu-memory", "1000",
                env_extra={"HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "COLUMNS": "120"})
    assert proc.returncode == 0 and "org/next: KV cache over the grid" in proc.stdout


def test_plan_of_a_folder_takes_the_dtype_from_safetensors_headers(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(NEXT))
    (tmp_path / "model.safetensors").write_bytes(safetensors_bytes({"w": ("F16", [4, 4])}))
    p = plan(tmp_path, GRID, memory=BIG_GPU, enable_prefix_caching=True)
    _agrees_with_explain(p, tmp_path, enable_prefix_caching=True)
    assert {r.result.config.model_config.dtype for r in p.rows} == {"float16"}
    assert "model.safetensors" in {f["name"] for f in p.rows[0].result.config.source["files"]}
    # the headers decide: without them the same config resolves to bfloat16
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "config.json").write_text(json.dumps(NEXT))
    assert plan(alone, GRID, memory=BIG_GPU).rows[0].result.config.model_config.dtype == "bfloat16"


def test_plan_of_a_sentence_transformers_folder_agrees_with_explain(tmp_path):
    # the pooling settings beside config.json make it an embedding model, as in run and explain
    src = CONFIGS / "qwen3.5-27b"
    (tmp_path / "config.json").write_bytes((src / "config.json").read_bytes())
    (tmp_path / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    (tmp_path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 4096, "do_lower_case": False}))
    p = plan(tmp_path, {"tensor_parallel_size": [1, 2]})
    _agrees_with_explain(p, tmp_path)
    assert p.rows[0].impact.max_model_len == 4096


def test_plan_online_opens_the_repo_once(tmp_path, monkeypatch):
    import huggingface_hub.constants

    repo = {"commit": "c" * 40, "files": {"config.json": json.dumps(NEXT).encode(),
                                         "model.safetensors": safetensors_bytes({"w": ("F16", [64, 64])})}}
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    with LocalHub({"org/next": repo}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        explain("org/next", memory=BIG_GPU)  # fills the cache
        before = len(hub.requests)
        one = explain("org/next", memory=BIG_GPU)
        per_load = len(hub.requests) - before
        before = len(hub.requests)
        p = plan("org/next", GRID, memory=BIG_GPU)
        assert len(hub.requests) - before == per_load > 0  # four settings, one source
    assert one.result.config.model_config.dtype == "float16"  # the remote header, by ranged reads
    assert p.rows[0].impact.to_dict() == one.impact.to_dict()
    assert [f["how"] for f in p.rows[0].result.config.source["files"] if f["name"] == "model.safetensors"] \
        == ["remote-header"]


def test_plan_of_a_missing_model_is_bad_input(tmp_path):
    with pytest.raises(InvalidInputError, match="does not exist"):
        plan(tmp_path / "absent", GRID)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(InvalidInputError, match="not valid JSON"):
        plan(tmp_path, GRID)


def test_the_readme_example_runs():
    text = (REPO / "README.md").read_text()
    code = next(block for block in re.findall(r"```python\n(.*?)```", text, re.S)
                if "from enginecfg.commands import" in block)
    code = code.replace('"path/to/model"', repr(str(QWEN))).replace('"org/name"', repr(str(QWEN)))
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    assert isinstance(scope["e"], Explanation) and isinstance(scope["p"], Plan)
    assert len(scope["p"].rows) == 8


# -- the room --------------------------------------------------------------------------------

def _imported(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found


def test_commands_never_import_the_cli_and_the_cli_has_no_cycle():
    for path in sorted((REPO / "enginecfg" / "commands").rglob("*.py")):
        assert not any(m == "enginecfg.cli" or m.startswith("enginecfg.cli.") for m in _imported(path)), path
    # explain's command line takes the engine flags from their own module, not from the app
    assert not any(m.startswith("enginecfg.cli.app") for m in _imported(REPO / "enginecfg" / "cli" / "explain.py"))


def test_import_of_commands_stays_light():
    code = ("import sys, enginecfg.commands; "
            "print(sorted(m for m in ('torch', 'triton', 'transformers', 'enginecfg.cli', 'enginecfg.store') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_vllms_memory_flags_are_keyword_arguments_of_the_commands():
    e = explain(QWEN, gpu_memory_utilization=0.5, gpu="H100")
    assert e.engine_args == {} and e.memory == ImpactOptions(gpu="H100-80GB", gpu_memory_utilization=0.5)
    assert e.impact.memory.gpu == "H100-80GB" and e.impact.memory.gpu_memory_utilization == 0.5
    assert e.impact == explain(QWEN, memory={"gpu": "H100-80GB", "gpu_memory_utilization": 0.5}).impact
    outcome = next(run([QWEN], num_gpu_blocks_override=100, kv_cache_memory_bytes=8 * 2**30))
    assert outcome.result.impact.num_blocks == 100 and outcome.result.impact.memory.kv_cache_memory == 8 * 2**30
    p = plan(QWEN, {"gpu": ["H100", "B200"]}, gpu_memory_utilization=0.8)
    assert [r.impact.memory.gpu for r in p.rows] == ["H100-80GB", "B200"]
    assert {r.impact.memory.gpu_memory_utilization for r in p.rows} == {0.8}
    with pytest.raises(InvalidInputError, match="memory flags"):
        next(run([QWEN], pipeline=__import__("enginecfg").Pipeline(), gpu_memory_utilization=0.5))


def test_curves_are_the_figures_own():
    e = explain(QWEN, kv_cache_dtype="fp8")
    points = e.curve()
    assert points[0][0] == 128 and points[-1][0] == e.impact.max_model_len
    assert points[-1][1] == e.impact.max_concurrency
    assert dict((n, x) for n, x, _ in e.curve([1024, 8192, 32768])) == dict(e.impact.concurrency)
    assert all(a[1] >= b[1] and a[2] <= b[2] for a, b in zip(points, points[1:]))
    assert plan(QWEN, {"kv_cache_dtype": ["fp8"]}).rows[0].curve() == points


@pytest.mark.parametrize("folder, args", [("deepseek-v2-lite-like", {"kv_cache_dtype": "fp8"}),
                                          ("gemma4-text-default", {"disable_hybrid_kv_cache_manager": True})])
def test_the_curve_is_made_at_the_start_up_decisions(folder, args):
    """The drawn curve uses the block size the engine starts with (FLASHMLA's 64 for an fp8
    MLA cache) and the hybrid-manager flag, as the figures beside it do."""
    from enginecfg.commands import explain

    e = explain(str(CONFIGS / folder), **args)
    points = {n: x for n, x, _ in e.curve(list(e.impact.concurrency))}
    for n, x in e.impact.concurrency.items():
        if x is not None:
            assert points[n] == pytest.approx(x), n
    if folder == "deepseek-v2-lite-like":  # one MLA group: a request of 1,024 tokens takes 16 blocks of 64
        assert {n: p for n, _, p in e.curve([1024])}[1024] == 1024 // 64
