"""The command line as people meet it: 80 columns, typed names, help, formats, silent parts.

Every command runs as a real subprocess (``python -m enginecfg``) against a fresh audit
database, at ``COLUMNS=80``.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from support import CONFIGS, REPO
from enginecfg.pipeline.engine_args import ENGINE_ARGS, human_readable_int, human_readable_int_or_auto
from enginecfg.pipeline.jsonvalue import csv_cell

NEMOTRON_H = str(CONFIGS / "nemotron-h-56b-base-8k")
QWEN = str(CONFIGS / "qwen3.5-27b")
VLLM_FLAGS = json.loads((REPO / "tests" / "data" / "vllm_serve_flags.json").read_text())


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('people') / 'audit.db'}"


def cli(*args, db=None, columns=80, env=None):
    e = dict(os.environ, ENGINECFG_PLUGINS="none", COLUMNS=str(columns), **(env or {}))
    if db:
        e["ENGINECFG_DB"] = db
    return subprocess.run([sys.executable, "-P", "-m", "enginecfg", *args], capture_output=True, text=True,
                          timeout=300, cwd=os.environ["ENGINECFG_TEST_TMP"], env=e)


@pytest.fixture(scope="module")
def runs(db, warm_snapshots):
    """Two recorded runs of the issue's model: with and without prefix caching."""
    a = cli("run", NEMOTRON_H, "--enable-prefix-caching", "--gpu-validation", "off", db=db)
    b = cli("run", NEMOTRON_H, "--gpu-validation", "off", "--max-model-len", "4k", db=db)
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    rows = json.loads(cli("runs", "--json", db=db).stdout)
    return [r["run_id"] for r in rows]  # newest first: [b, a]


def _fits(text: str, width: int = 80) -> None:
    """No line is wider than the terminal, except by a model path (a name that stays whole)."""
    too_long = [line for line in text.splitlines()
                if len(line.replace(str(CONFIGS), "C")) > width]
    assert not too_long, too_long


def _lines_holding(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(rf"(^|\s){re.escape(name)}(\s|$)", line)]


# -- 80 columns: names whole, prose wrapped -------------------------------------------------------

def test_run_report_keeps_field_and_stage_names_whole_at_80_columns(warm_snapshots):
    proc = cli("run", NEMOTRON_H, "--enable-prefix-caching", "--gpu-validation", "off", "--no-audit")
    assert proc.returncode == 0, proc.stderr
    _fits(proc.stdout)
    doc = json.loads(cli("run", NEMOTRON_H, "--enable-prefix-caching", "--gpu-validation", "off",
                         "--no-audit", "--json").stdout)
    for c in doc["changes"]:
        assert _lines_holding(proc.stdout, c["field"]), c["field"]
        assert _lines_holding(proc.stdout, c["stage"]), c["stage"]
    for sec, fields in doc["config"].items():
        for k in fields or {}:
            assert _lines_holding(proc.stdout, f"{sec}.{k}")


def test_stages_keeps_every_name_whole_at_80_columns():
    proc = cli("stages")
    assert proc.returncode == 0, proc.stderr
    _fits(proc.stdout)
    names = [r["name"] for r in json.loads(cli("stages", "--json").stdout)]
    for name in names:
        assert _lines_holding(proc.stdout, name), name
    assert "…" not in proc.stdout


@pytest.mark.parametrize("columns", [80, 100])
def test_audit_tables_keep_names_whole(db, runs, columns):
    b, a = runs
    for args in (("runs",), ("show", a), ("history", "cache_config.block_size"), ("diff", a, b),
                 ("why", a, "cache_config.block_size")):
        proc = cli(*args, db=db, columns=columns)
        assert proc.returncode == 0, (args, proc.stderr)
        _fits(proc.stdout, columns)
        assert "…" not in proc.stdout
    show = cli("show", a, db=db, columns=columns).stdout
    for c in json.loads(cli("show", a, "--json", db=db).stdout)["changes"]:
        assert _lines_holding(show, c["field"]) and _lines_holding(show, c["stage"])


# -- explanations from the store -----------------------------------------------------------------

def test_why_and_show_give_back_the_stored_explanation(db, runs):
    a = runs[1]
    doc = json.loads(cli("why", a, "cache_config.block_size", "--json", db=db).stdout)
    (bs,) = [c for c in doc["changes"] if c["field"] == "cache_config.block_size"]
    assert "lcm(the Mamba chunk size 128, the kernel alignment 16) = 128" in bs["explanation"]
    for args in (("why", a, "cache_config.block_size"), ("show", a)):
        text = " ".join(cli(*args, db=db).stdout.split())
        assert " ".join(bs["explanation"].split()) in text
        assert "multiple of 16 tokens that covers" not in text


# -- names that can be typed ---------------------------------------------------------------------

@pytest.mark.parametrize("args, wanted", [
    (("history", "block_size"), "cache_config.block_size"),
    (("history", "cache_config.block_sise"), "cache_config.block_size"),
])
def test_unknown_fields_exit_2_with_the_closest_names(db, runs, args, wanted):
    proc = cli(*args, db=db)
    assert proc.returncode == 2 and proc.stdout == ""
    assert wanted in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_why_unknown_field_and_run_id_suggest(db, runs):
    a = runs[1]
    proc = cli("why", a, "block_size", db=db)
    assert proc.returncode == 2 and "cache_config.block_size" in proc.stderr
    typo = a[:6] + ("0" if a[6] != "0" else "1")
    proc = cli("why", typo, "cache_config.block_size", db=db)
    assert proc.returncode == 2 and a in proc.stderr


def test_unknown_stage_names_exit_2_with_the_closest(warm_snapshots):
    proc = cli("run", QWEN, "--no-audit", "--skip-stage", "engine-defau")
    assert proc.returncode == 2 and "'engine-defaults'" in proc.stderr
    proc = cli("stages", "--only-stage", "hybrid-alignmnet")
    assert proc.returncode == 2 and "'hybrid-alignment'" in proc.stderr


def test_unknown_option_exits_2_with_the_closest():
    proc = cli("run", QWEN, "--no-audit", "--max-model-length", "4096")
    assert proc.returncode == 2 and "--max-model-len" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


# -- silent parts --------------------------------------------------------------------------------

def test_run_says_gpu_validation_status_and_where_it_was_recorded(db, warm_snapshots):
    proc = cli("run", QWEN, "--gpu-validation", "off", db=db)
    assert proc.returncode == 0, proc.stderr
    assert "GPU validation: skipped (mode off): GPU validation is off" in proc.stdout
    rid = json.loads(cli("runs", "--json", "--limit", "1", db=db).stdout)[0]["run_id"]
    assert f"recorded as run {rid} in {db}" in proc.stdout
    proc = cli("run", QWEN, "--gpu-validation", "off", "--json", db=db)
    rid = json.loads(proc.stdout)["run_id"]
    assert f"recorded as run {rid} in {db}" in proc.stderr
    proc = cli("run", QWEN, "--gpu-validation", "off", "--no-audit")
    assert "not recorded (--no-audit)" in proc.stdout


def test_a_cold_snapshot_build_shows_progress_on_stderr(tmp_path):
    proc = cli("run", QWEN, "--gpu-validation", "off", "--no-audit", "--json",
               env={"ENGINECFG_CACHE_DIR": str(tmp_path / "cold")})
    assert proc.returncode == 0, proc.stderr
    assert "reading 1 model config(s) with transformers" in proc.stderr
    json.loads(proc.stdout)  # stdout is still the document alone


# -- help ----------------------------------------------------------------------------------------

def test_every_engine_flag_has_its_help_and_choices():
    text = " ".join(cli("run", "--help").stdout.split())
    for arg in ENGINE_ARGS.values():
        for flag in arg.flags:
            assert flag in text, flag
        assert " ".join(arg.help.split()) in text, arg.name
        if arg.choices:
            assert "Choices: " + ", ".join(arg.choices) + "." in text


def test_engine_flags_are_vllms():
    """Names, choices, boolean pairs and value readers match vLLM 0.19.0's parser (committed dump)."""
    by_dest = {o["dest"]: o for o in VLLM_FLAGS["options"]}
    for arg in ENGINE_ARGS.values():
        v = by_dest[arg.name]
        assert set(arg.flags) <= set(v["options"]), arg.name
        assert (arg.kind == "bool") == v["boolean_optional"], arg.name
        if arg.kind == "str":
            assert arg.choices == (tuple(v["choices"]) if v["choices"] else None), arg.name
        if arg.parser in ("human_readable_int", "human_readable_int_or_auto"):
            assert v["type"] == arg.parser, arg.name
        elif arg.kind == "int":
            assert v["type"] in ("int", "_optional_type"), arg.name


@pytest.mark.parametrize("text, want", [("32k", 32000), ("32K", 32768), ("25.6k", 25600), ("1m", 10**6),
                                        ("1M", 2**20), ("2G", 2 * 2**30), ("1t", 10**12), ("4096", 4096),
                                        (" 7 ", 7)])
def test_human_readable_int_reads_as_vllm(text, want):
    assert human_readable_int(text) == want


def test_human_readable_int_refuses_decimal_binary_and_reads_auto():
    with pytest.raises(ValueError, match="1.5k"):
        human_readable_int("1.5K")
    assert human_readable_int_or_auto("auto") == human_readable_int_or_auto("-1") == -1


@pytest.mark.parametrize("flag, want", [("32k", 32000), ("32K", 32768)])
def test_max_model_len_32k_as_vllm_reads_it(flag, want, warm_snapshots):
    proc = cli("run", QWEN, "--no-audit", "--gpu-validation", "off", "--json", "--max-model-len", flag)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["config"]["model_config"]["max_model_len"] == want


def test_version_bare_usage_and_global_flags_after_the_command(warm_snapshots):
    proc = cli("--version")
    assert proc.returncode == 0 and re.match(r"enginecfg \S+ \(vLLM 0\.19\.0 to 0\.\d+\.\d+ semantics: \d+ releases; default "
                                             r"0\.19\.0\)", proc.stdout)
    proc = cli()
    assert proc.returncode == 0 and proc.stdout.startswith("usage: enginecfg") and "run" in proc.stdout
    proc = cli("run", QWEN, "--no-audit", "--gpu-validation", "off", "--json", "--log-format", "json")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    assert {"run_started", "run_finished"} <= {e["event"] for e in events}


def test_a_pasted_vllm_serve_line_sets_aside_what_enginecfg_does_not_use(warm_snapshots):
    line = ["run", "vllm", "serve", QWEN, "--gpu-memory-utilization", "0.5", "--trust-remote-code",
            "--max_model_len=32k", "--served-model-name", "a", "b", "--enable-prefix-caching",
            "--no-audit", "--gpu-validation", "off"]
    proc = cli(*line, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    # --trust-remote-code is an engine argument of enginecfg's too (what the config loader may run)
    assert doc["engine_args"] == {"max_model_len": 32000, "enable_prefix_caching": True, "trust_remote_code": True}
    # vLLM's memory flag is taken, with vLLM's meaning: the figures are those of 0.5
    assert doc["impact"]["memory"]["gpu_memory_utilization"] == 0.5
    notes = [line for line in proc.stderr.splitlines() if line.startswith("enginecfg: note:")]
    assert notes == ["enginecfg: note: set aside vllm serve options that enginecfg does not use: "
                     "--served-model-name a b"]
    # the equivalent vllm serve command keeps the caller's other flags, the memory one included
    text = cli(*line).stdout
    block = text.split("Equivalent vllm serve command (pins the resolved values):\n")[1]
    command = block.split("\nResolved config:")[0].replace("\\\n", " ").split()
    for flags in (["--gpu-memory-utilization", "0.5"], ["--trust-remote-code"],
                  ["--served-model-name", "a", "b"], ["--max-model-len", "32000"]):
        assert any(command[i:i + len(flags)] == flags for i in range(len(command))), flags


# -- formats -------------------------------------------------------------------------------------

def test_runs_and_history_show_engine_flags_iso_times_and_csv(db, runs):
    b, a = runs
    rows = json.loads(cli("runs", "--json", db=db).stdout)
    by_id = {r["run_id"]: r for r in rows}
    assert by_id[a]["engine_args"] == {"enable_prefix_caching": True}
    assert by_id[b]["engine_args"] == {"max_model_len": 4000}
    table = cli("runs", db=db, columns=200).stdout
    assert "--enable-prefix-caching" in table and "--max-model-len 4000" in table
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", table)
    parsed = list(csv.DictReader(io.StringIO(cli("runs", "--csv", db=db).stdout)))
    assert {r["run_id"] for r in parsed} >= {a[:12], b[:12]} and "engine flags" in parsed[0]
    changes = list(csv.DictReader(io.StringIO(cli("show", a, "--csv", db=db).stdout)))
    stored = json.loads(cli("show", a, "--json", db=db).stdout)["changes"]
    assert [(int(r["seq"]), r["field"], r["explanation"]) for r in changes] == \
        [(c["seq"], c["field"], csv_cell(c["explanation"])) for c in stored]  # as the CSV rule writes it
    hist = list(csv.DictReader(io.StringIO(cli("history", "cache_config.block_size", "--csv", db=db).stdout)))
    values = {r["run_id"]: r["value"] for r in hist}
    # 'all' mode (prefix caching): a multiple of lcm(128, 16); 'none': of the alignment 16
    assert values[a[:12]] == "4224" and values[b[:12]] == "4128"


def test_values_are_spelt_as_json_everywhere(db, runs):
    b, a = runs
    show = cli("show", a, db=db, columns=200).stdout
    rows = [line.split() for line in show.splitlines()
            if re.match(r"\d+\s+ssm-dtype\s+cache_config\.mamba_ssm_cache_dtype\s", line)]
    assert rows and rows[0][3:5] == ['"auto"', '"float32"']  # old, new: JSON, not Python's 'auto'
    assert re.search(r"cache_config\.mamba_block_size\s+null\s+16\s", show)
    why = cli("why", a, "cache_config.mamba_cache_mode", db=db).stdout
    assert '"none" -> "all"' in why
    diff = json.loads(cli("diff", a, b, "--json", db=db).stdout)
    assert (diff["run_id_a"], diff["run_id_b"]) == (a, b)
    text = cli("diff", a, b, db=db, columns=200).stdout
    assert '"all"' in text and '"none"' in text


@pytest.mark.parametrize("where", ["the clone", "a folder with spaces"])
def test_the_equivalent_vllm_serve_flags_resolve_to_the_same_config(where, tmp_path, warm_snapshots):
    model = NEMOTRON_H
    if where != "the clone":  # wherever the model (or the clone) lies: the line is read as a shell reads it
        folder = tmp_path / "my models" / "nemotron h"
        folder.mkdir(parents=True)
        shutil.copy(os.path.join(NEMOTRON_H, "config.json"), folder / "config.json")
        model = str(folder)
    proc = cli("run", model, "--enable-prefix-caching", "--gpu-validation", "off", "--no-audit")
    block = proc.stdout.split("Equivalent vllm serve command (pins the resolved values):\n")[1]
    command = shlex.split(block.split("\nResolved config:")[0].replace("\\\n", " "))
    assert command[:3] == ["vllm", "serve", model]
    first = json.loads(cli("run", model, "--enable-prefix-caching", "--gpu-validation", "off",
                           "--no-audit", "--json").stdout)["config"]
    again = cli("run", *command, "--gpu-validation", "off", "--no-audit", "--json")
    assert again.returncode == 0, again.stderr
    second = json.loads(again.stdout)["config"]
    first["cache_config"].pop("user_specified_block_size")
    second["cache_config"].pop("user_specified_block_size")
    assert first == second


# -- start-up ------------------------------------------------------------------------------------

def test_run_json_no_audit_imports_neither_structlog_nor_alembic(warm_snapshots):
    code = ("import sys\nfrom enginecfg.cli import main\n"
            f"rc = main(['run', {QWEN!r}, '--json', '--no-audit', '--gpu-validation', 'off'])\n"
            "sys.stderr.write(repr(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('structlog', 'alembic', 'transformers', 'torch'))))\n")
    proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, ENGINECFG_PLUGINS="none"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().endswith("[]"), proc.stderr


def test_reading_a_vllm_serve_line_in_all_its_spellings():
    from enginecfg.cli.app import read_vllm_serve_line

    keep, aside, unknown = read_vllm_serve_line(
        ["vllm", "serve", "M", "-O3", "--compilation-config.mode", "3", "--max_model_len=4k",
         "--api-key", "a", "b", "-tp", "2", "--enforce-eager", "--max-model-len", "-1", "--foo"],
        {"--max-model-len", "-tp"})
    assert keep == ["M", "--max-model-len=4k", "-tp", "2", "--max-model-len", "-1"]
    assert aside == ["-O3", "--compilation-config.mode 3", "--api-key a b", "--enforce-eager"]
    assert unknown == ["--foo"]


def test_interpret_mode_validation_reports_each_check_and_its_outcome(warm_snapshots):
    pytest.importorskip("triton")
    proc = cli("run", str(CONFIGS / "gemma-4-26b-a4b"), "--gpu-validation", "interpret", "--no-audit")
    assert proc.returncode == 0, proc.stderr
    checks = re.findall(r"^enginecfg: gpu-validation: (\S+) passed \(", proc.stderr, re.M)
    assert len(checks) >= 1
    assert f"GPU validation: passed, {len(checks)} kernel check(s) on cpu (mode interpret)" in proc.stdout
