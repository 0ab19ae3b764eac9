"""Input a hostile user gives: each is refused in one line, in bounded time, or handled, and
never answered with a traceback.  The layer counts no engine builds, the tables of names
alone, the limits past any store, an empty downgrade target, a database enginecfg does not
keep its store in, a release no pack speaks for; and what people read, which never carries a
terminal's control characters (the stored values stay exact)."""

from __future__ import annotations

import json
import shutil

import pytest

from support import CONFIGS, EXAMPLES, run_cli
from enginecfg import EngineConfig, InvalidInputError
from enginecfg.pipeline.hf.limits import MAX_LAYERS, layer_count_error
from enginecfg.store import AuditStore
from enginecfg.testing import emit_run


def _no_traceback(proc) -> None:
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr


def _one_line(proc, code: int = 2) -> None:
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    _no_traceback(proc)
    assert proc.stderr.count("\n") == 1, proc.stderr


# -- layer counts no engine builds --------------------------------------------------------


def _deep_copy_of(tmp_path, model: str, layers: int, section: str | None = None):
    folder = tmp_path / f"{model}-deep"
    shutil.copytree(CONFIGS / model, folder)
    config = json.loads((folder / "config.json").read_text())
    target = config[section] if section else config
    target["num_hidden_layers"] = layers
    target.pop("layer_types", None)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("model, section, field", [
    ("jamba-1.5-mini", None, "hf_config.num_hidden_layers"),
    ("gemma-4-26b-a4b", "text_config", "hf_config.text_config.num_hidden_layers"),
])
def test_a_layer_count_no_engine_builds_is_refused_by_every_command(tmp_path, model, section, field):
    folder = _deep_copy_of(tmp_path, model, 10 ** 40, section)
    for argv in (["run", "--no-audit"], ["explain", "--no-audit"], ["upgrade"], ["stages"]):
        proc = run_cli(argv[0], str(folder), *argv[1:], timeout=60)  # it used to run without end
        assert proc.returncode == 2, (argv, proc.stderr)
        _no_traceback(proc)
        assert f"invalid {field}" in proc.stderr and "at most 10,000" in proc.stderr, proc.stderr
    plan = run_cli("plan", str(folder), "--tp", "1,2", timeout=60)
    _no_traceback(plan)
    assert plan.stdout.count("at most 10,000") == 2, plan.stdout
    with pytest.raises(InvalidInputError, match="at most 10,000") as err:
        EngineConfig.from_pretrained(str(folder))
    assert err.value.field == field


def test_the_layer_limit_is_checked_at_its_bound_and_where_transformers_names_it():
    assert layer_count_error({"num_hidden_layers": MAX_LAYERS}) is None
    assert layer_count_error({"text_config": {"n_layer": MAX_LAYERS + 1}})[0] == "hf_config.text_config.n_layer"
    assert layer_count_error({"num_layers": 1e40})[0] == "hf_config.num_layers"
    assert layer_count_error({"num_hidden_layers": True, "depth": 10 ** 9}) is None
    field, message = layer_count_error({"vision_config": {"layers": [{"num_layers": 10 ** 5000}]}})
    assert field == "hf_config.vision_config.layers.0.num_layers"
    assert "about 5001 digits" in message  # a number too long to print is not printed


def test_a_real_model_within_the_limit_still_resolves(tmp_path):
    folder = _deep_copy_of(tmp_path, "jamba-1.5-mini", 72)
    assert run_cli("run", str(folder), "--no-audit").returncode == 0


# -- tables, limits, revisions, URLs ------------------------------------------------------


def test_a_table_of_names_alone_narrower_than_the_terminal_is_printed(monkeypatch):
    proc = run_cli("upgrade", str(EXAMPLES / "gemma-4-26b-a4b"), env={"COLUMNS": "60"})
    assert proc.returncode == 0, proc.stderr
    _no_traceback(proc)
    assert "cache_config.block_size *" in proc.stdout
    from enginecfg.cli.tables import render

    wide = "cache_config.mamba_ssm_cache_dtype_and_more"
    assert render(["a", "b"], [[wide, wide]], names=(0, 1), total=20).splitlines()[-1] == f"{wide}  {wide}"


@pytest.fixture
def store_url(tmp_path):
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    with AuditStore(url).attach():
        emit_run()
        emit_run(block_size=16)
    return url


@pytest.mark.parametrize("argv", [["runs"], ["history", "cache_config.block_size"]])
def test_a_limit_past_any_store_means_every_run(store_url, argv):
    proc = run_cli(*argv, "--limit", str(10 ** 20), "--db", store_url, "--json")
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)) == 2


@pytest.mark.parametrize("target", ["", " ", "-0", "no-such-revision"])
def test_a_downgrade_target_that_names_no_revision_is_one_line(store_url, target):
    proc = run_cli("db", "downgrade", target, "--db", store_url)
    _one_line(proc)
    assert "invalid revision" in proc.stderr and "base" in proc.stderr


@pytest.mark.parametrize("url, says", [
    ("mysql://u:secret@localhost/audit", "not mysql"),
    ("oracle://u:secret@localhost/audit", "not oracle"),
    ("postgresql+asyncpg://u:secret@localhost/audit", "driver asyncpg is not installed"),
    ("not a url", "Could not parse"),
])
def test_a_database_the_store_is_not_kept_in_is_named_with_the_urls_that_work(url, says):
    for argv in (["runs"], ["audit", "verify"], ["run", str(EXAMPLES / "qwen3.5-27b")]):
        proc = run_cli(*argv, "--db", url)
        assert proc.returncode == 2, (argv, proc.stderr)
        _no_traceback(proc)
        assert says in proc.stderr and "sqlite:///PATH" in proc.stderr and "postgresql://" in proc.stderr
        assert "secret" not in proc.stderr


def test_upgrade_refuses_a_release_setting_no_pack_speaks_for_as_every_command_does():
    for argv in (["upgrade"], ["run", "--no-audit"], ["explain", "--no-audit"]):
        proc = run_cli(argv[0], str(EXAMPLES / "jamba-1.5-mini"), *argv[1:],
                       env={"ENGINECFG_VLLM_VERSION": "junk"})
        _one_line(proc)
        assert "ENGINECFG_VLLM_VERSION" in proc.stderr and "0.19.0, 0.19.1, 0.20.0" in proc.stderr and "0.33.0, 0.34.0" in proc.stderr


def test_runs_of_a_release_no_pack_speaks_for_is_refused(store_url):
    proc = run_cli("runs", "--vllm-version", "junk", "--db", store_url)
    _one_line(proc)
    assert "--vllm-version" in proc.stderr and "0.33.0, 0.34.0, or another release number" in proc.stderr
    assert run_cli("runs", "--vllm-version", "0.34.0", "--db", store_url).returncode == 0


# -- what people read ---------------------------------------------------------------------

ESCAPES = "\x1b[2J\x1b]0;owned\x07\u202e"


def test_escape_codes_in_a_folder_name_are_shown_as_text_and_stored_exactly(tmp_path):
    folder = tmp_path / f"model{ESCAPES}x"
    shutil.copytree(CONFIGS / "qwen3.5-27b", folder)
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    ran = run_cli("run", str(folder), "--db", url, "--enable-prefix-caching")
    assert ran.returncode == 0, ran.stderr
    rid = json.loads(run_cli("runs", "--json", "--db", url).stdout)[0]["run_id"]
    for argv in (["runs"], ["show", rid], ["why", rid, "cache_config.block_size"],
                 ["history", "cache_config.block_size"], ["run", str(folder), "--no-audit"]):
        proc = run_cli(*argv, "--db", url) if argv[0] != "run" else run_cli(*argv)
        assert proc.returncode == 0, (argv, proc.stderr)
        shown = proc.stdout + proc.stderr
        assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown, argv
        assert "\\x1b[2J" in shown, (argv, shown[:2000])
    doc = json.loads(run_cli("show", rid, "--json", "--db", url).stdout)
    assert doc["model"] == str(folder)  # the record keeps the name exactly
