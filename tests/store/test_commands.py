"""The CLI commands, through an argparse parser built with ``register``."""

from __future__ import annotations

import argparse
import csv
import io
import json

import pytest

from enginecfg.store import engine as eng
from enginecfg.testing import emit_run
from enginecfg.cli.audit import parse_time, register


@pytest.fixture
def cli(capsys):
    parser = argparse.ArgumentParser(prog="enginecfg")
    register(parser.add_subparsers(dest="cmd", required=True))

    def run(*argv: str) -> tuple[int, str, str]:
        args = parser.parse_args(list(argv))
        code = args.func(args)
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def recorded(store):
    a = emit_run(model="/models/alpha")
    b = emit_run(model="/models/beta", block_size=16, final_block_size=2048)
    return store, a, b


def test_runs_table_and_json(cli, recorded):
    store, a, b = recorded
    code, out, _ = cli("runs", "--db", store.url)
    assert code == 0 and a[:12] in out and b[:12] in out
    code, out, _ = cli("runs", "--json", "--model", "beta", "--db", store.url)
    rows = json.loads(out)
    assert code == 0 and [r["run_id"] for r in rows] == [b]
    code, out, _ = cli("runs", "--json", "--limit", "1", "--since", "1h", "--db", store.url)
    assert [r["run_id"] for r in json.loads(out)] == [b]


def test_db_url_from_environment(cli, recorded, monkeypatch):
    store, a, b = recorded
    monkeypatch.setenv("ENGINECFG_DB", store.url)
    code, out, _ = cli("runs", "--json")
    assert code == 0 and len(json.loads(out)) == 2


def test_show_history_why_diff(cli, recorded):
    store, a, b = recorded
    code, out, _ = cli("show", b[:8], "--db", store.url)
    assert code == 0 and "hybrid-alignment" in out and "2048" in out
    code, out, _ = cli("show", b, "--json", "--db", store.url)
    assert json.loads(out)["run_id"] == b
    code, out, _ = cli("history", "cache_config.block_size", "--json", "--db", store.url)
    assert [r["value"] for r in json.loads(out)] == [2048, 1056]
    code, out, _ = cli("history", "cache_config.block_size", "--db", store.url)
    assert code == 0 and "hybrid-alignment" in out
    code, out, _ = cli("why", b, "cache_config.block_size", "--json", "--db", store.url)
    doc = json.loads(out)
    assert code == 0 and doc["final"] == 2048 and len(doc["changes"]) == 2
    code, out, _ = cli("why", b, "cache_config.block_size", "--db", store.url)
    assert "initial: 16" in out and "final:   2048" in out
    code, out, _ = cli("diff", a, b, "--json", "--db", store.url)
    assert code == 0 and any(d["field"] == "cache_config.block_size"
                             for d in json.loads(out)["differences"])
    code, out, _ = cli("diff", a, b, "--db", store.url)
    assert code == 0 and "cache_config.block_size" in out


def test_export_to_file_and_stdout(cli, recorded, tmp_path):
    store, a, b = recorded
    target = tmp_path / "changes.csv"
    code, _, err = cli("export", "--format", "csv", "--table", "changes", "-o", str(target),
                       "--db", store.url)
    assert code == 0 and "exported 10" in err
    assert len(list(csv.DictReader(io.StringIO(target.read_text())))) == 10
    code, out, _ = cli("export", "--db", store.url)
    rows = [json.loads(x) for x in out.splitlines()]
    assert [r["run_id"] for r in rows] == [a, b]
    assert all(r["started_at"].endswith("+00:00") and "T" in r["started_at"] for r in rows)
    code, out, _ = cli("export", "--raw", "--db", store.url)
    rows = [json.loads(x) for x in out.splitlines()]
    assert [r["id"] for r in rows] == [a, b] and all(isinstance(r["started_at"], float) for r in rows)


def test_db_commands(cli, db_url):
    code, out, _ = cli("db", "current", "--json", "--db", db_url)
    assert code == 0 and json.loads(out)["current"] is None
    assert cli("db", "upgrade", "--db", db_url)[0] == 0
    assert json.loads(cli("db", "current", "--json", "--db", db_url)[1])["current"] == eng.head_revision()
    code, out, _ = cli("db", "downgrade", "0001", "--db", db_url)
    assert code == 0 and "0001" in out
    code, out, _ = cli("db", "downgrade", "base", "--db", db_url)
    assert code == 0 and "base" in out
    assert cli("db", "upgrade", "--db", db_url)[0] == 0
    code, _, err = cli("db", "downgrade", "nonsense", "--db", db_url)
    assert code == 2 and err.count("\n") == 1


@pytest.mark.parametrize("argv, needle", [
    (("show", "0" * 32), "no stored run"),
    (("why", "0" * 32, "cache_config.block_size"), "no stored run"),
    (("diff", "0" * 32, "1" * 32), "no stored run"),
    (("runs", "--since", "last tuesday"), "--since"),
    (("runs", "--limit", "0"), "--limit"),
])
def test_bad_input_exits_2_with_one_line(cli, recorded, argv, needle):
    store = recorded[0]
    code, out, err = cli(*argv, "--db", store.url)
    assert code == 2 and out == ""
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_why_unknown_field_exits_2(cli, recorded):
    store, a, b = recorded
    code, _, err = cli("why", a, "no.such_field", "--db", store.url)
    assert code == 2 and "no.such_field" in err


@pytest.mark.parametrize("url", ["nosuchdialect://x", "postgresql+psycopg://u:p@127.0.0.1:1/x"
                                 "?connect_timeout=2", "   "])
def test_bad_or_unreachable_database_exits_2(cli, url):
    code, out, err = cli("runs", "--db", url)
    assert code == 2 and err.startswith("enginecfg: error:") and err.count("\n") == 1


def test_parse_time_forms():
    assert parse_time("1970-01-02") == 86400
    assert parse_time("1970-01-01T01:00:00+01:00") == 0
    import time

    assert abs(parse_time("2h") - (time.time() - 7200)) < 5
