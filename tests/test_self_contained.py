"""The repository carries everything it needs: a clone anywhere, with nothing beside it, runs
the README as printed and passes its tests.

- No test, benchmark, CI script or README reads a path outside the checkout (the workspace's
  ``../shared`` above all); only the scripts that ask an oracle, named below, may point at one.
- The ground truth under ``tests/data`` is what the oracles wrote, byte for byte (pinned
  hashes: a hand edit fails here; ``tests/data/vllm-0.19.0/make_cases.py`` is the way to
  change it), and that script turns the oracle's output into cases as ``cases.json`` holds them.
- The README's set-up block and every example name files of the repository, and the examples
  print what the README shows; the published configs under ``examples/models`` are the
  fixture configs of the same name, each with its provenance.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import shlex
from pathlib import Path

import pytest

from support import CONFIGS, EXAMPLES, FIXTURES, REPO, VLLM034, config_of_034, load_cases, run_cli

#: sha256 of the ground-truth files; change one only with the file, saying why
PINNED = {
    FIXTURES / "cases.json": "3d6e0f1131b52787f82fb61bfc92ce5f27ed6f1f0f539994d002d695a436b3f2",
    FIXTURES / "vllm-crashes.json": "2e9eba2e4c0b246f488713b59d72d243afbcf28a0c8f15bc7d486a77d566ab59",
    VLLM034 / "public-034.json": "9815e4fd2696c655259976feed0d1b6beda26c97db1c28987f7b6cf23ad01658",
    VLLM034 / "public.json": "90edfb7810b0b113d254b935630909f8bea44476c91b1bba01b1ac08697db8b1",
}

#: reads outside the checkout: the workspace's shared folder, in any spelling, or its root
OUTSIDE = [
    re.compile(r"\.\./shared\b"),
    re.compile(r"\bshared/(fixtures|oracle|spec|seed|design)"),
    re.compile(r"""/\s*["']shared["']"""),           # Path(...) / "shared"
    re.compile(r"""["']shared["']\s*/"""),           # "shared" / "fixtures"
    re.compile(r"""\(\s*["']\.\.["']\s*,\s*["']\.\.["']"""),  # Path("..", "..", ...)
    re.compile(r"/work/"),
]
#: the scripts that ask an oracle (development tools run with the oracle's venv, never by a
#: test): they may name where an oracle lives
ORACLE_SCRIPTS = ("tests/*_oracle/make_*.py", "tests/*_oracle/ask_*.py", "tests/data/*/make_*.py",
                  "tests/data/*/*/make_*.py")
#: the files that must stand alone (data files under tests/ included: a case file names paths)
SCANNED = ("tests/**/*.py", "tests/**/*.json", "tests/**/*.md", "bench/*.py", ".ci/*",
           "README.md", "docs/*.md", "examples/**/*.md")

_THIS = Path(__file__).resolve()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _scanned_files() -> list[Path]:
    exempt = {p for pattern in ORACLE_SCRIPTS for p in REPO.glob(pattern)}
    files = {p for pattern in SCANNED for p in REPO.glob(pattern) if p.is_file()}
    return sorted(p for p in files - exempt if p.resolve() != _THIS)


def _make_cases():
    spec = importlib.util.spec_from_file_location("make_cases_019", FIXTURES / "make_cases.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _readme() -> str:
    return (REPO / "README.md").read_text()


def _code_blocks() -> list[tuple[str, list[str]]]:
    """``(info string, lines)`` of every fenced block of the README, in order."""
    blocks, current, info = [], None, ""
    for line in _readme().splitlines():
        if line.startswith("```"):
            if current is None:
                current, info = [], line[3:].strip()
            else:
                blocks.append((info, current))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def _setup_block() -> list[str]:
    """The README's first ``bash`` block: the commands a new user (and ``.ci/run``) runs."""
    block = next(lines for info, lines in _code_blocks() if info == "bash")
    return [line for line in block if line.strip()]


def _console_examples() -> list[tuple[str, list[str]]]:
    """``(command, the output the README shows)`` of every ``$ enginecfg ...`` example."""
    return [(lines[0][2:], lines[1:]) for info, lines in _code_blocks()
            if info == "" and lines and lines[0].startswith("$ enginecfg ")]


# ----------------------------------------------------------------------------- nothing outside

def test_no_test_bench_ci_or_doc_reads_outside_the_checkout():
    files = _scanned_files()
    assert REPO / ".ci" / "run" in files and REPO / "tests" / "support.py" in files
    found = [f"{p.relative_to(REPO)}:{n}: {line.strip()}"
             for p in files
             for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
             if any(rx.search(line) for rx in OUTSIDE)]
    assert found == []


def test_the_oracle_scripts_default_to_the_data_in_the_repository():
    """The scripts that ask an oracle may point at the oracle, but the cases and configs they
    ask about are the repository's own."""
    texts = {p: p.read_text() for pattern in ORACLE_SCRIPTS for p in REPO.glob(pattern)}
    assert len(texts) >= 5
    for path, text in texts.items():
        assert "shared/fixtures" not in text and '"shared" / "fixtures"' not in text, path


def test_the_readme_setup_block_names_only_paths_in_the_repository():
    lines = _setup_block()
    assert any(line.startswith("enginecfg run ") for line in lines)
    assert any(line.split("#")[0].split() == ["pytest", "-q"] for line in lines)
    paths = []
    for line in lines:
        for word in shlex.split(line, comments=True):
            if word.startswith("-") or "==" in word or word in {"&&", "pip", "install"}:
                continue
            if "/" in word or word.startswith("."):
                paths.append(re.sub(r"\[.*\]$", "", word))  # ".[dev]": the checkout, with extras
    assert "examples/models/qwen3.5-27b" in paths
    for word in paths:
        assert not word.startswith(("/", "..", "~")), word
        assert (REPO / word).exists(), word


def test_every_readme_example_names_a_path_in_the_repository():
    text = _readme()
    named = set(re.findall(r"""["'](examples/[^"']+)["']""", text))
    for command, _ in _console_examples():
        named.update(w for w in shlex.split(command) if w.startswith("examples/"))
    assert {"examples/models/qwen3.5-27b", "examples/models/gemma-4-26b-a4b",
            "examples/models/nemotron-3-nano-30b-a3b-bf16"} <= named
    for path in named:
        assert (REPO / path / "config.json").is_file(), path
    # the placeholders of old are gone: every example runs as printed
    assert "path/to/model" not in text and '"model-a"' not in text


def test_the_readme_console_examples_print_what_the_readme_shows(monkeypatch, warm_snapshots):
    """Run from the clone's root, each ``$ enginecfg ...`` example prints the README's text
    (the run id aside); a block whose first line is not the output's first (``Findings:``,
    ``Does not start: ...``) shows the end of the output from that line."""
    examples = _console_examples()
    assert [c.split()[1] for c, _ in examples] == ["explain", "explain", "explain", "plan", "plan"]
    monkeypatch.chdir(REPO)
    run_id = re.compile(r"\(run [0-9a-f]{12}\)")
    for command, shown in examples:
        proc = run_cli(*shlex.split(command)[1:], env={"COLUMNS": "100"})
        assert proc.returncode == 0, proc.stderr
        got = [run_id.sub("(run ID)", line) for line in proc.stdout.splitlines()]
        want = [run_id.sub("(run ID)", line) for line in shown]
        if want[0] in got and want[0] != got[0]:
            got = got[got.index(want[0]):]
        assert got == want, command


# ----------------------------------------------------------------------------- the ground truth

def test_the_ground_truth_is_the_oracles_output_byte_for_byte():
    assert {str(p.relative_to(REPO)): _sha256(p) for p in PINNED} == {
        str(p.relative_to(REPO)): h for p, h in PINNED.items()}


def test_the_fixture_data_is_complete():
    cases = load_cases()
    crashes = json.loads((FIXTURES / "vllm-crashes.json").read_text())
    assert len(cases) == 578
    names = [c["name"] for c in [*cases, *crashes]]
    assert len(names) == len(set(names))
    for case in [*cases, *crashes]:
        assert (FIXTURES / case["config"] / "config.json").is_file(), case["name"]
    for case in cases:  # a constructed config says how it was built; a published one where from
        folder = FIXTURES / case["config"]
        assert case["constructed"] == (folder / "SOURCE.txt").is_file(), case["name"]
    provenance = (FIXTURES / "PROVENANCE.md").read_text()
    for folder in CONFIGS.iterdir():
        assert (folder / "SOURCE.txt").is_file() or f"`{folder.name}`" in provenance, folder.name
    for name in ("README.md", "make_cases.py"):
        assert (FIXTURES / name).is_file()


def test_the_034_answers_name_configs_kept_here():
    cases = json.loads((VLLM034 / "public.json").read_text())
    results = json.loads((VLLM034 / "public-034.json").read_text())
    assert results["vllm_version"] == "0.34.0"
    assert [r["name"] for r in results["results"]] == [c["name"] for c in cases]
    for case in cases:
        assert (config_of_034(case) / "config.json").is_file(), case["config_dir"]
    assert (VLLM034 / "README.md").is_file()


def test_make_cases_turns_oracle_answers_into_cases_as_cases_json_holds_them():
    """Real run_oracle.py output (vLLM 0.34.0's, the same result format as 0.19.0's oracle):
    where 0.34.0 refuses a case with the same exception as 0.19.0, the case it makes is
    byte for byte the one in cases.json."""
    make = _make_cases()
    answers = json.loads((VLLM034 / "public-034.json").read_text())
    fixture = {c["name"]: c for c in load_cases()}
    same = [r["name"] for r in answers["results"]
            if r["error"] and r["name"] in fixture
            and fixture[r["name"]]["expected"]["status"] == "error"
            and make._root(r["error"])["message"] == fixture[r["name"]]["expected"]["error"]["message"]]
    assert len(same) >= 15  # falcon-h1-0.5b's validator, the LlamaNemotronVL pooling rule, ...
    wanted = [c for c in make.load_case_list() if c["name"] in same]
    built, crashes = make.build(wanted, answers, None)
    assert crashes == []
    assert built["produced_by"]["vllm"] == "0.34.0"
    assert [json.dumps(c) for c in built["cases"]] == [json.dumps(fixture[c["name"]]) for c in wanted]


def test_make_cases_refuses_an_answer_it_cannot_turn_into_a_case():
    """vLLM 0.34.0's ``ModelConfig`` no longer has ``supports_mamba_prefix_caching`` (the
    oracle's snapshot records the AttributeError) nor its ``CacheConfig``
    ``calculate_kv_scales``: the script says which case and field instead of writing a case
    without them."""
    make = _make_cases()
    answers = json.loads((VLLM034 / "public-034.json").read_text())
    resolved = next(r for r in answers["results"] if r["name"] == "qwen3.5-27b/default")
    with pytest.raises(make.OracleOutputError, match=r"^qwen3\.5-27b/default: model_config\."
                       "supports_mamba_prefix_caching could not be read: AttributeError"):
        make.expected_of(resolved, resolved["config_dir"])
    resolved["after_verify"]["model_config"]["supports_mamba_prefix_caching"] = False
    with pytest.raises(make.OracleOutputError, match=r"^qwen3\.5-27b/default: cache_config has "
                       "no calculate_kv_scales$"):
        make.expected_of(resolved, resolved["config_dir"])


def test_make_cases_sorts_crashes_and_marks_gemma4_runs():
    make = _make_cases()
    assert make.needs_gemma_overlay(CONFIGS / "gemma-4-26b-a4b")
    assert make.needs_gemma_overlay(CONFIGS / "gemma4-text-default")
    assert not make.needs_gemma_overlay(CONFIGS / "qwen3.5-27b")
    gemma_cases = {c["name"] for c in load_cases() if "transformers" in c}
    assert gemma_cases == {c["name"] for c in load_cases()
                           if make.needs_gemma_overlay(FIXTURES / c["config"])}
    crash = {"name": "x/y", "error": {"type": "ValidationError", "root_type": "TypeError",
                                      "root_message": "unsupported operand", "message": "1 error",
                                      "raised_at": "a.py:1 in f", "stage": "VllmConfig.try_verify_and_update_config"}}
    assert make.is_crash(crash)
    assert make.crash_of({"name": "x/y"}, crash)["vllm_error"] == {
        "type": "TypeError", "message": "unsupported operand", "raised_at": "a.py:1 in f"}


# ----------------------------------------------------------------------------- the examples

def test_the_example_configs_are_published_fixture_configs_with_their_provenance():
    folders = sorted(d for d in EXAMPLES.iterdir() if d.is_dir())
    assert {d.name for d in folders} >= {"qwen3.5-27b", "gemma-4-26b-a4b",
                                         "nemotron-3-nano-30b-a3b-bf16", "jamba-1.5-mini"}
    provenance = (FIXTURES / "PROVENANCE.md").read_text()
    for folder in folders:
        assert (folder / "config.json").read_bytes() == (CONFIGS / folder.name / "config.json").read_bytes()
        assert not (CONFIGS / folder.name / "SOURCE.txt").exists(), f"{folder.name} is constructed"
        assert f"`{folder.name}`" in provenance
        note = (folder / "PROVENANCE.md").read_text()
        assert "Copied from" in note and "licence" in note, folder.name
        assert sorted(p.name for p in folder.iterdir()) == ["PROVENANCE.md", "config.json"]
