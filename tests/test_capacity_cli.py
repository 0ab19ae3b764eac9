"""Capacity for the deployment the user runs, on the command line: vLLM's memory flags in
``run``, ``explain`` and ``plan``; whether vLLM would start, and ``--require-start``; the
stored figures in ``history``, ``why`` and ``diff``; ``explain`` recording its run; ``plan``'s
header at any width and its axes; the pictures; one number format; ISO times in the logs.

Every command runs as a real subprocess against a fresh audit database."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from support import CONFIGS

QWEN = str(CONFIGS / "qwen3.5-27b")
GEMMA = str(CONFIGS / "gemma-4-26b-a4b")
START_LINE = "enginecfg: does not start (--require-start)"


def cli(*args, db=None, columns=100):
    env = dict(os.environ, ENGINECFG_PLUGINS="none", COLUMNS=str(columns))
    if db:
        env["ENGINECFG_DB"] = db
    return subprocess.run([sys.executable, "-P", "-m", "enginecfg", *args], capture_output=True, text=True,
                          timeout=300, cwd=os.environ["ENGINECFG_TEST_TMP"], env=env)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('capacity') / 'audit.db'}"


@pytest.fixture(scope="module")
def two_runs(db, warm_snapshots):
    """The same model at vLLM's default utilization and at 0.6 (at 0.5 the profiling run's activation
    peak leaves too little for one request of max_model_len); run ids, newest first."""
    full = cli("run", QWEN, "--gpu-validation", "off", db=db)
    half = cli("run", QWEN, "--gpu-validation", "off", "--gpu-memory-utilization", "0.6", db=db)
    assert full.returncode == 0 and half.returncode == 0, full.stderr + half.stderr
    return [r["run_id"] for r in json.loads(cli("runs", "--json", db=db).stdout)][:2]


# -- memory as vLLM takes it -------------------------------------------------------------------

def test_run_stores_the_figures_of_the_utilization_given(db, two_runs):
    half, full = two_runs
    a, b = (json.loads(cli("show", r, "--json", db=db).stdout) for r in (half, full))
    assert a["gpu_memory_utilization"] == 0.6 and b["gpu_memory_utilization"] == 0.9
    assert a["result"]["impact"]["memory"]["gpu_memory_utilization"] == 0.6
    assert a["kv_tokens"] < b["kv_tokens"] and a["max_concurrency"] < b["max_concurrency"]
    assert a["gpu"] == b["gpu"] == "H200" and a["starts"] is True
    # the figures are explain's for the same flags
    doc = json.loads(cli("explain", QWEN, "--gpu-memory-utilization", "0.6", "--json", "--no-audit").stdout)
    assert doc["impact"]["kv_tokens"] == a["kv_tokens"]


def test_history_why_and_diff_take_the_figures_in_one_number_format(db, two_runs):
    half, full = two_runs
    history = cli("history", "impact.max_concurrency", db=db, columns=200)
    assert history.returncode == 0, history.stderr
    rows = json.loads(cli("history", "impact.max_concurrency", "--json", db=db).stdout)
    assert [r["run_id"] for r in rows] == [half, full]
    for r in rows:
        assert f"{r['value']:,.2f}x" in history.stdout
    for field in ("impact.kv_tokens", "impact.concurrency.8192", "impact.memory.gpu_memory_utilization"):
        proc = cli("history", field, "--json", db=db)
        assert proc.returncode == 0 and len(json.loads(proc.stdout)) == 2, (field, proc.stderr)
    why = cli("why", half, "impact.kv_tokens", db=db)
    kv = json.loads(cli("show", half, "--json", db=db).stdout)["kv_tokens"]
    assert why.returncode == 0 and f"value:   {kv:,}" in why.stdout
    assert "no stage changes it" in " ".join(why.stdout.split())
    diff = cli("diff", half, full, db=db, columns=200).stdout
    line = next(x for x in diff.splitlines() if x.startswith("impact.max_concurrency "))
    assert re.fullmatch(r"impact\.max_concurrency\s+[\d,]+\.\d\dx\s+[\d,]+\.\d\dx", line.strip()), line
    assert re.search(r"impact\.kv_tokens\s+\d{1,3}(,\d{3})+\s", diff)
    # --csv and --json keep the numbers exact
    exact = json.loads(cli("diff", half, full, "--json", db=db).stdout)
    value = next(d["a"] for d in exact["differences"] if d["field"] == "impact.max_concurrency")
    assert repr(value) in cli("diff", half, full, "--csv", db=db).stdout
    bad = cli("history", "impact.max_concurency", db=db)
    assert bad.returncode == 2 and "impact.max_concurrency" in bad.stderr


def test_gpu_presets_are_listed_and_taken():
    listed = cli("gpus")
    assert listed.returncode == 0 and "H200 *" in listed.stdout and "139.80" in listed.stdout
    assert cli("explain", QWEN, "--gpu", "help").stdout == listed.stdout
    assert cli("run", "--gpu", "list").stdout == listed.stdout
    rows = json.loads(cli("gpus", "--json").stdout)
    assert {r["name"] for r in rows} >= {"H200", "H100-80GB", "B200", "A100-40GB", "A100-80GB", "L40S", "L4"}
    doc = json.loads(cli("explain", QWEN, "--gpu", "b200", "--json", "--no-audit").stdout)
    assert doc["impact"]["memory"]["gpu"] == "B200"
    doc = json.loads(cli("explain", QWEN, "--gpu-memory", "96", "--json", "--no-audit").stdout)
    assert doc["impact"]["memory"]["gpu_memory_bytes"] == 96 * 2**30
    bad = cli("run", QWEN, "--gpu", "H300", "--no-audit")
    assert bad.returncode == 2 and "did you mean 'H200'" in bad.stderr and "Traceback" not in bad.stderr


def test_kv_cache_memory_bytes_takes_vllms_suffixes_and_the_override():
    doc = json.loads(cli("explain", QWEN, "--kv-cache-memory-bytes", "16G", "--num-gpu-blocks-override", "200",
                         "--json", "--no-audit").stdout)
    mem = doc["impact"]["memory"]
    assert mem["kv_cache_memory"] == mem["kv_cache_memory_bytes"] == 16 * 2**30
    assert mem["num_gpu_blocks_override"] == 200 and doc["impact"]["num_blocks"] == 200
    assert doc["impact"]["blocks_from_memory"] > 200
    same = json.loads(cli("explain", QWEN, "--kv-cache-memory", "17179869184", "--json", "--no-audit").stdout)
    assert same["impact"]["memory"]["kv_cache_memory"] == 16 * 2**30
    bad = cli("explain", QWEN, "--kv-cache-memory-bytes", "lots")
    assert bad.returncode == 2 and "--kv-cache-memory-bytes" in bad.stderr


# -- whether it starts ---------------------------------------------------------------------------

def test_a_config_that_cannot_start_says_so_in_vllms_words_and_fails_under_require_start(db, warm_snapshots):
    args = ("run", QWEN, "--gpu", "A100-40GB", "--gpu-validation", "off")
    plain = cli(*args, db=db)
    assert plain.returncode == 0, plain.stderr
    text = " ".join(plain.stdout.split())
    error = ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
             "when initializing the engine.")
    assert f"Does not start: vLLM 0.19.0 would stop at start-up with {error}" in text
    assert "GPU KV cache size" not in text  # vLLM never logs it: it stops first
    strict = cli(*args, "--require-start", db=db)
    assert strict.returncode == 1 and START_LINE in strict.stderr and error in strict.stderr
    assert cli("run", QWEN, "--gpu-validation", "off", "--require-start", "--no-audit").returncode == 0
    # the run is recorded, and says it would not start
    run = json.loads(cli("runs", "--json", db=db).stdout)[0]
    assert run["starts"] is False and run["gpu"] == "A100-40GB"
    explained = cli("explain", QWEN, "--gpu", "A100-40GB", "--require-start", "--no-audit")
    assert explained.returncode == 1 and START_LINE in explained.stderr
    assert "- no-kv-memory:" in explained.stdout and "GPU KV cache size" not in explained.stdout


def test_one_request_that_does_not_fit_names_the_largest_max_model_len():
    proc = cli("explain", QWEN, "--gpu-memory", "60", "--no-audit")
    text = " ".join(proc.stdout.split())
    assert "vLLM 0.19.0 would stop at start-up with ValueError: To serve at least one request with the " \
           "models's max seq len (262144)" in text
    # the largest length (from the budget's point estimate) is named in the figures and the finding alike
    fits = int(re.search(r"Largest max_model_len that fits: ([0-9,]+)\.", text).group(1).replace(",", ""))
    assert 0 < fits < 262144 and f"--max-model-len {fits}" in text
    assert "GPU KV cache size" not in text


def test_a_backend_that_cannot_serve_the_head_sizes_does_not_start():
    proc = cli("explain", GEMMA, "--attention-backend", "FLASH_ATTN", "--require-start", "--no-audit")
    assert proc.returncode == 1
    assert "- backend-head-size: The attention backend FLASH_ATTN cannot serve attention layers of head " \
           "size 512" in " ".join(proc.stdout.split())
    assert "Reason: ['head_size not supported']" in proc.stderr


# -- explain behaves like run --------------------------------------------------------------------

def test_explain_records_its_run_or_shows_no_run_id(db, warm_snapshots):
    proc = cli("explain", QWEN, db=db)
    assert proc.returncode == 0, proc.stderr
    shown = re.search(r"\(run ([0-9a-f]{12})\)", proc.stdout.splitlines()[0]).group(1)
    assert f"recorded as run {shown}" in proc.stderr
    assert cli("show", shown, "--json", db=db).returncode == 0
    quiet = cli("explain", QWEN, "--no-audit", db=db)
    assert "(not recorded)" in quiet.stdout.splitlines()[0] and "(run " not in quiet.stdout
    actor = cli("explain", QWEN, "--actor", "ci-capacity", "--json", db=db)
    run_id = json.loads(actor.stdout)["run_id"]
    assert json.loads(cli("show", run_id, "--json", db=db).stdout)["actor"] == "ci-capacity"


def test_explain_takes_a_pasted_vllm_serve_line():
    proc = cli("explain", "vllm", "serve", QWEN, "--kv-cache-dtype", "fp8", "--port", "8000",
               "--gpu-memory-utilization", "0.8", "--json", "--no-audit")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["engine_args"] == {"kv_cache_dtype": "fp8"}
    assert doc["impact"]["memory"]["gpu_memory_utilization"] == 0.8
    assert "set aside vllm serve options that enginecfg does not use: --port 8000" in proc.stderr
    by_option = cli("explain", "vllm", "serve", "--model", QWEN, "--kv-cache-dtype", "fp8", "--json", "--no-audit")
    assert by_option.returncode == 0, by_option.stderr
    assert json.loads(by_option.stdout)["engine_args"] == {"kv_cache_dtype": "fp8"}


# -- plan ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("columns", [80, 100])
def test_plan_keeps_its_header_at_any_width(columns):
    proc = cli("plan", QWEN, "--tp", "1,2", "--kv-cache-dtype", "auto,fp8", "--mamba-cache-mode", "none,align",
               "--enable-prefix-caching", columns=columns)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert all(len(line) <= columns for line in lines), [x for x in lines if len(x) > columns]
    rule = next(i for i, line in enumerate(lines) if line.startswith("--  "))
    header = " ".join(lines[1:rule])
    for word in ("tp", "kv", "mamba", "KV", "conc@", "max len"):
        assert word in header, (word, header)
    rows = lines[rule + 1:rule + 9]
    assert len(rows) == 8 and all(re.match(r"[12]\s", r) for r in rows)
    # rows say what vLLM resolves: prefix caching runs 'none' in the 'align' mode
    assert sum("align*" in r for r in rows) == 4 and not any(re.search(r"\bnone\b", r) for r in rows)
    assert "* mamba mode: vLLM resolves none to align" in proc.stdout


def test_plan_grids_over_gpus_and_max_model_len():
    proc = cli("plan", QWEN, "--gpu", "H100,H200,B200", "--max-model-len", "8192,32k", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [(r["setting"]["gpu"], r["setting"]["max_model_len"]) for r in doc["rows"]] == [
        (g, n) for g in ("H100-80GB", "H200", "B200") for n in (8192, 32000)]
    tokens = {r["setting"]["gpu"]: r["kv_tokens"] for r in doc["rows"]}
    assert tokens["H100-80GB"] < tokens["H200"] < tokens["B200"]
    assert all(r["gpu"] == r["setting"]["gpu"] and r["starts"] for r in doc["rows"])
    text = cli("plan", QWEN, "--gpu", "A100-40GB,H200", columns=100).stdout
    assert "does not start" in text and "A100-40GB" in text


def test_plan_never_marks_a_setting_that_does_not_start_best():
    doc = json.loads(cli("plan", QWEN, "--gpu", "A100-40GB,H200", "--json").stdout)
    assert [r["starts"] for r in doc["rows"]] == [False, True]
    assert set(doc["best"].values()) == {1}


# -- pictures ------------------------------------------------------------------------------------

def _png_checked(path, min_size=(600, 300)):
    from PIL import Image

    with Image.open(path) as img:
        assert img.format == "PNG" and img.size[0] >= min_size[0] and img.size[1] >= min_size[1]
        colours = img.convert("RGB").getcolors(maxcolors=1 << 16)
        assert colours is None or len(colours) > 20  # not blank: axes, text and curves
        return img.size


def test_plot_png_and_svg(tmp_path):
    pytest.importorskip("matplotlib")
    png, svg = tmp_path / "plan.png", tmp_path / "plan.svg"
    proc = cli("plan", QWEN, "--tp", "1,2", "--kv-cache-dtype", "auto,fp8", "--plot", str(png))
    assert proc.returncode == 0, proc.stderr
    _png_checked(png)
    proc = cli("plan", QWEN, "--mamba-cache-mode", "none,align", "--enable-prefix-caching", "--plot", str(svg))
    assert proc.returncode == 0, proc.stderr
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    texts = {"".join(t.itertext()).strip() for t in root.iter() if t.tag.endswith("text")}
    assert {"mamba align (asked none)", "mamba align"} <= texts
    assert "concurrent requests" in texts and "context length per request (tokens)" in texts
    one = tmp_path / "one.png"
    proc = cli("explain", QWEN, "--kv-cache-dtype", "fp8", "--no-audit", "--plot", str(one))
    assert proc.returncode == 0, proc.stderr
    width, _ = _png_checked(one)
    assert width > 900  # two panels: the curve and the pages per request
    bad = cli("explain", QWEN, "--no-audit", "--plot", str(tmp_path / "x.pdf"))
    assert bad.returncode == 2 and "--plot" in bad.stderr


# -- formats -------------------------------------------------------------------------------------

def test_json_logs_write_iso_times():
    proc = cli("--log-format", "json", "run", QWEN, "--no-audit", "--gpu-validation", "off", "--json")
    events = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    started = next(e for e in events if e["event"] == "run_started")
    iso = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d"
    assert re.match(iso, started["started_at"]) and re.match(iso, started["timestamp"])
    finished = next(e for e in events if e["event"] == "run_finished")
    assert re.match(iso, finished["finished_at"])


@pytest.mark.parametrize("release", ["0.19.0", "0.34.0"])
def test_reasons_use_the_right_article(release):
    proc = cli("run", str(CONFIGS / "mamba-130m-hf"), "--no-audit", "--gpu-validation", "off",
               "--vllm-version", release, columns=200)
    assert "for an attention_free generate model" in proc.stdout and "for a attention_free" not in proc.stdout


def test_the_readme_picture_is_what_the_command_draws(tmp_path):
    """The README shows docs/img/plan-nemotron-3-nano.svg and the command that draws it: drawn
    again, it holds the same series, title and axes."""
    pytest.importorskip("matplotlib")
    import shlex

    from support import REPO

    readme = (REPO / "README.md").read_text()
    command = next(line for line in readme.splitlines() if line.startswith("enginecfg plan ") and "--plot" in line)
    args = shlex.split(command)[1:]
    committed = REPO / args[args.index("--plot") + 1]
    assert f"]({committed.relative_to(REPO)})" in readme
    args[args.index("--plot") + 1] = str(tmp_path / "again.svg")
    args = [str(REPO / a) if a.startswith("examples/") else a for a in args]
    proc = cli(*args)
    assert proc.returncode == 0, proc.stderr

    def texts(path):  # every text of the picture, the model named as the README names it
        root = ET.parse(path).getroot()
        return sorted(" ".join("".join(t.itertext()).split()).replace(str(REPO) + "/", "")
                      for t in root.iter() if t.tag.endswith("text"))

    want = texts(committed)
    assert texts(tmp_path / "again.svg") == want
    assert {"gpu H200, kv fp8", "gpu B200, kv auto", "gpu H100-80GB, kv fp8"} <= set(want)
