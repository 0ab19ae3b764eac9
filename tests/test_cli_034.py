"""The command line under vLLM 0.34.0: a pasted ``vllm serve`` line read by 0.34.0's own
parser (its option table generated from that parser, its refusals checked against the real
parser: ``tests/serve_parser_oracle``), ``upgrade`` taking a pasted line, and the run report
naming the given flags its release's ``vllm serve`` does not take.  The CLI tests start the
real entry point (``python -m enginecfg``)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from support import CONFIGS, REPO

ANSWERS = json.loads((REPO / "tests" / "serve_parser_oracle" / "answers-034.json").read_text())
QWEN = str(CONFIGS / "qwen3.5-27b")
QUIET = ("--no-audit", "--gpu-validation", "off")


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "COLUMNS": "100", "ENGINECFG_PLUGINS": "none", **(env or {})}
    full.pop("ENGINECFG_VLLM_VERSION", None) if "ENGINECFG_VLLM_VERSION" not in (env or {}) else None
    return subprocess.run([sys.executable, "-m", "enginecfg", *args], cwd=REPO, env=full, capture_output=True,
                          text=True, timeout=300)


# -- the tables ---------------------------------------------------------------------------------

def _tool():
    spec = importlib.util.spec_from_file_location("dump_tool", REPO / "tools" / "dump_vllm_serve_flags.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


#: each held table: the dump of its release's parser, and the dump of the release whose table it
#: changes (None: the first, whole)
TABLES = [("0.19.0", "vllm_serve_flags.json", None),
          ("0.20.0", "vllm-0.20.0/vllm_serve_flags.json", "vllm_serve_flags.json"),
          ("0.24.0", "vllm-0.24.0/vllm_serve_flags.json", "vllm-0.20.0/vllm_serve_flags.json"),
          ("0.28.0", "vllm-0.28.0/vllm_serve_flags.json", "vllm-0.24.0/vllm_serve_flags.json"),
          ("0.32.0", "vllm-0.32.0/vllm_serve_flags.json", "vllm-0.28.0/vllm_serve_flags.json"),
          ("0.34.0", "vllm_serve_flags_034.json", "vllm-0.32.0/vllm_serve_flags.json")]


@pytest.mark.parametrize("release, dump, base", TABLES)
def test_the_shipped_tables_are_the_dumps_of_vllms_parsers(release, dump, base, tmp_path):
    """Each shipped file is what the tool writes from the dumps, and the table composed from
    the first through every change is the release's parser's table whole."""
    from enginecfg.pipeline.releases import options

    tool, data = _tool(), REPO / "tests" / "data"
    tool.table(str(data / dump), str(tmp_path / "t.json"), str(data / base) if base else None)
    assert (tmp_path / "t.json").read_text() == (REPO / "pipeline" / "releases" / "options" /
                                                 f"{release}.json").read_text()
    whole = tool.tables(json.loads((data / dump).read_text()))
    composed = options.table(release)
    assert composed.VLLM_VERSION == release
    assert dict(composed.VLLM_SERVE_OPTIONS) == whole["options"]
    assert dict(composed.VLLM_SERVE_CHOICES) == {k: (n, tuple(c), t) for k, (n, c, t) in whole["choices"].items()}
    assert dict(composed.VLLM_SERVE_SWITCHES) == {k: (d, v) for k, (d, v) in whole["switches"].items()}


def test_every_held_table_but_the_first_is_a_change_on_the_one_before():
    from enginecfg.pipeline.releases import options

    held = [r for r, _, _ in TABLES]
    for before, release in zip(held, held[1:]):
        doc = json.loads((REPO / "pipeline" / "releases" / "options" / f"{release}.json").read_text())
        assert doc["on"] == before and options.held(release)
        # a change, not a copy: fewer entries set than the table holds
        assert len(doc["options"]["set"]) < len(options.table(release).VLLM_SERVE_OPTIONS) / 2


def test_the_034_table_is_034s():
    from enginecfg.cli.engine_flags import serve_table

    t = serve_table("0.34.0")
    assert t.VLLM_VERSION == "0.34.0" and serve_table(None).VLLM_VERSION == "0.19.0"
    assert t.VLLM_SERVE_CHOICES["--mamba-cache-mode"][1] == ("align", "none")
    # 0.34.0's --enable-x/--disable-x pairs keep the hidden --no-enable-x spelling
    assert t.VLLM_SERVE_SWITCHES["--no-enable-prefix-caching"] == ("enable_prefix_caching", False)
    assert t.VLLM_SERVE_SWITCHES["--disable-prefix-caching"] == ("enable_prefix_caching", False)


def test_the_flags_034_no_longer_takes_are_what_the_serve_command_leaves_out():
    from enginecfg.cli.engine_flags import serve_table
    from enginecfg.pipeline import releases

    gone = set(serve_table("0.19.0").VLLM_SERVE_OPTIONS) - set(serve_table("0.34.0").VLLM_SERVE_OPTIONS)
    assert releases.get("0.34.0").sets_aside == gone
    # the five 0.34.0's parser dropped (read from its engine/arg_utils.py when the pack landed)
    assert gone == {"--calculate-kv-scales", "--no-calculate-kv-scales", "--max-long-partial-prefills",
                    "--max-num-partial-prefills", "--override-attention-dtype"}


# -- the parser's answers, against the real one -------------------------------------------------

#: refusals enginecfg does not give in the parser's words yet: a value the type of an option
#: without choices turns away (enginecfg's own flag refuses it, in its own words)
_NOT_YET = {"block-size-not-int": "a type error of an option without choices"}


@pytest.mark.parametrize("case", [pytest.param(c, id=c["name"], marks=[pytest.mark.xfail(
    reason=_NOT_YET[c["name"]], strict=True)] if c["name"] in _NOT_YET else []) for c in ANSWERS["cases"]])
def test_a_pasted_line_is_answered_as_034s_parser_answers(case):
    from enginecfg.cli.engine_flags import vllm_serve_refusal

    got = vllm_serve_refusal(case["argv"], "0.34.0")
    if case["status"] == "refused":
        assert case["exit_code"] == 2
        assert got is not None and "vllm serve: error: " + got == case["message"]
    else:
        assert got is None


def test_034s_switch_spellings_set_the_engine_argument_they_name():
    from enginecfg.cli.app import _own_options, build_parser, read_vllm_serve_line

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    own = _own_options(sub.choices["run"])
    by_name = {c["name"]: c for c in ANSWERS["cases"]}
    for name, flag in (("disable-prefix-caching", "--no-enable-prefix-caching"),
                       ("enable-sliding-window", "--no-disable-sliding-window"),
                       ("disable-chunked-prefill", "--no-enable-chunked-prefill")):
        case = by_name[name]
        keep, aside, unknown = read_vllm_serve_line(case["argv"], own, release="0.34.0")
        assert keep == ["M", flag] and not aside and not unknown
        dest, value = sub.choices["run"]._option_string_actions[flag].dest, case["values"]
        assert value == {dest: False}  # the real parser set the same argument to the same value


def test_run_refuses_a_pasted_line_in_034s_words():
    want = {c["name"]: c.get("message") for c in ANSWERS["cases"]}
    p = _cli("run", "vllm", "serve", QWEN, "--vllm-version", "0.34.0", "--mamba-cache-mode", "all", *QUIET)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == f"enginecfg: {want['mamba-cache-mode-all']}\n"
    # a flag 0.34.0 no longer has: refused once the rest is read, value and all
    p = _cli("run", "vllm", "serve", QWEN, "--max-num-partial-prefills", "2", *QUIET,
             env={"ENGINECFG_VLLM_VERSION": "0.34.0"})
    assert p.returncode == 2 and p.stderr == f"enginecfg: {want['max-num-partial-prefills']}\n"
    p = _cli("run", "vllm", "serve", QWEN, "--vllm-version=0.34.0", "--calculate-kv-scales", *QUIET)
    assert p.returncode == 2 and p.stderr == f"enginecfg: {want['calculate-kv-scales']}\n"


def test_the_default_release_still_reads_with_019s_parser(warm_snapshots):
    p = _cli("run", "vllm", "serve", QWEN, "--mamba-cache-mode", "all", "--enable-prefix-caching",
             "--max-num-partial-prefills", "2", *QUIET, "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["vllm_version"] == "0.19.0"
    assert doc["engine_args"] == {"mamba_cache_mode": "all", "enable_prefix_caching": True}


def test_a_034_switch_spelling_is_taken(warm_snapshots):
    p = _cli("run", "vllm", "serve", QWEN, "--vllm-version", "0.34.0", "--disable-prefix-caching", *QUIET,
             "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["engine_args"] == {"enable_prefix_caching": False} and doc["vllm_version"] == "0.34.0"
    assert doc["config"]["cache_config"]["enable_prefix_caching"] is False


def test_version_names_both_releases():
    p = _cli("--version")
    assert p.returncode == 0
    assert re.fullmatch(r"enginecfg \S+ \(vLLM 0\.19\.0 to 0\.\d+\.\d+ semantics: \d+ releases; default 0\.19\.0\)\n", p.stdout)


# -- upgrade takes a pasted line -----------------------------------------------------------------

def test_upgrade_takes_a_pasted_vllm_serve_line(warm_snapshots):
    p = _cli("upgrade", "vllm", "serve", QWEN, "--max_model_len=32k", "--served-model-name", "x", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["engine_args"] == {"max_model_len": 32000}
    assert "set aside vllm serve options that enginecfg does not use: --served-model-name x" in p.stderr


def test_upgrade_refuses_a_line_either_release_refuses():
    want = {c["name"]: c.get("message") for c in ANSWERS["cases"]}
    p = _cli("upgrade", "vllm", "serve", QWEN, "--mamba-cache-mode", "all")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == f"enginecfg: vLLM 0.34.0: {want['mamba-cache-mode-all']}\n"
    # 0.34.0's own spelling is not 0.19.0's: the release deployed now refuses it first
    p = _cli("upgrade", "vllm", "serve", QWEN, "--disable-prefix-caching")
    assert p.returncode == 2
    assert p.stderr == "enginecfg: vLLM 0.19.0: vllm serve: error: unrecognized arguments: --disable-prefix-caching\n"


# -- the run report's equivalent command --------------------------------------------------------

def _command(out: str) -> list[str]:
    block = out.split("Equivalent vllm serve command (pins the resolved values):\n")[1]
    return block.split("\nResolved config:")[0].split("\n  Left out")[0].replace("\\\n", " ").split()


def test_the_report_names_the_flags_its_release_does_not_take(warm_snapshots):
    p = _cli("run", QWEN, "--vllm-version", "0.34.0", "--max-num-partial-prefills", "2",
             "--max_long_partial_prefills=1", "--served-model-name", "x", *QUIET)
    assert p.returncode == 0, p.stderr
    command = _command(p.stdout)
    assert "--max-num-partial-prefills" not in command and "--max-long-partial-prefills=1" not in command
    assert command[-2:] == ["--served-model-name", "x"]
    text = " ".join(p.stdout.split())
    assert ("Left out of it: --max-num-partial-prefills, --max-long-partial-prefills, given on the command "
            "line: vllm serve 0.34.0 does not take them.") in text
    # 0.19.0 takes them: kept, nothing left out
    p = _cli("run", QWEN, "--max-num-partial-prefills", "2", *QUIET)
    assert p.returncode == 0, p.stderr
    assert _command(p.stdout)[-2:] == ["--max-num-partial-prefills", "2"] and "Left out" not in p.stdout
