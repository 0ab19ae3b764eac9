"""What a reader notices: a quoted value is never broken across lines, a count of one is
singular, and the page spells figures as every command does."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

import attrs
import pytest

from support import EXAMPLES

from enginecfg import Pipeline
from enginecfg.cli.tables import render
from enginecfg.commands import explain
from enginecfg.pipeline.models.capacity import Padding
from enginecfg.store import AuditStore

QWEN = str(EXAMPLES / "qwen3.5-27b")
GEMMA = str(EXAMPLES / "gemma-4-26b-a4b")


def test_a_quoted_value_stays_whole_in_a_narrow_table():
    long = '"Qwen3_5ForConditionalGeneration"'
    spaced = '"/models/my model folder/with spaces"'
    text = render(["field", "a", "b"], [["model_config.architecture", long, spaced]], names=(0,), total=50)
    assert long in text.splitlines()[-1] or any(long in line for line in text.splitlines())
    assert any(spaced in line for line in text.splitlines()), text
    assert all(len(line) <= 50 for line in text.splitlines()), text  # the table still fits the width
    # prose still wraps, to the width
    text = render(["field", "why"], [["x", "a " * 30 + "end"]], names=(0,), total=30)
    assert len(text.splitlines()) > 3 and all(len(line) <= 30 for line in text.splitlines()), text
    # a quoted value wider than the room left: the rows become blocks, the value still whole
    wide = '"' + "x" * 60 + '"'
    text = render(["field", "a"], [["model_config.model", wide]], names=(0,), total=50)
    assert any(wide in line for line in text.splitlines()), text


@pytest.mark.parametrize("columns", ["60", "80", "100"])
def test_cli_diff_keeps_quoted_names_whole(columns, tmp_path, warm_snapshots):
    env = dict(os.environ, ENGINECFG_PLUGINS="none", ENGINECFG_DB=f"sqlite:///{tmp_path / 'a.db'}", COLUMNS=columns)

    def cli(*args):
        return subprocess.run([sys.executable, "-P", "-m", "enginecfg", *args], capture_output=True, text=True,
                              timeout=300, env=env, cwd=tmp_path)

    for model in (QWEN, GEMMA):
        assert cli("run", model, "--gpu-validation", "off").returncode == 0
    a, b = [r["run_id"] for r in json.loads(cli("runs", "--json").stdout)]
    text = cli("diff", a, b).stdout
    lines = text.splitlines()
    for name in ('"Qwen3_5ForConditionalGeneration"', '"Gemma4ForConditionalGeneration"'):
        assert any(name in line for line in lines), text
    # every string value the diff holds is on one line whole
    values = [d[k] for d in json.loads(cli("diff", a, b, "--json").stdout)["differences"] for k in ("a", "b")]
    names = {json.dumps(v) for v in values if isinstance(v, str)}
    assert names and [n for n in names if not any(n in line for line in lines)] == [], text


def test_one_empty_slot_is_singular(warm_snapshots):
    from enginecfg.cli.explain import _kv_lines

    imp = explain(GEMMA).impact
    one = attrs.evolve(imp, padding=Padding(None, 1, 2.5))
    assert "Layer padding: 1 empty slot (2.50%)." in _kv_lines(one)
    two = attrs.evolve(imp, padding=Padding(None, 2, 5.0))
    assert "Layer padding: 2 empty slots (5.00%)." in _kv_lines(two)


def test_the_pages_diff_and_history_spell_figures_as_the_commands_do(tmp_path, warm_snapshots):
    from enginecfg.ui.pages import open_pages

    url = f"sqlite:///{tmp_path / 'a.db'}"
    with AuditStore(url).attach() as store:
        a = Pipeline(gpu_validation="off").resolve(QWEN)
        b = Pipeline(gpu_validation="off").resolve(GEMMA)
    store.close()
    app = open_pages(url, bound_to="127.0.0.1")
    try:
        def get(path, query):
            environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": query,
                       "HTTP_HOST": "127.0.0.1:8100", "wsgi.input": io.BytesIO()}
            return b"".join(app(environ, lambda status, headers: None)).decode()

        body = get("/diff", f"a={a.run_id}&b={b.run_id}")
        row = body.split("impact.max_concurrency</td>")[1].split("</tr>")[0]
        assert re.findall(r"<code>([^<]*)</code>", row) == [f"{a.impact.max_concurrency:,.2f}x",
                                                              f"{b.impact.max_concurrency:,.2f}x"]
        assert not re.search(r"\d\.\d{3,}", body.split('id="diff"')[1])
        body = get("/history", "field=impact.kv_tokens")
        assert f"<code>{a.impact.kv_tokens:,}</code>" in body
        body = get("/history", "field=cache_config.block_size")
        assert "<code>784</code>" in body  # config values stay JSON
    finally:
        app.store.close()
