"""A release's name is spelt in one room: the release room (``pipeline/releases/``) holds every
release as data; the commands, the command line, the stages and the knowledge modules ask a
:class:`~enginecfg.pipeline.releases.Release` what they used to work out by comparing names."""

from __future__ import annotations

import ast
import re

import pytest

from support import REPO

#: the shipped folders
SHIPPED = ("enginecfg", "pipeline", "stages", "store", "kernels", "migrations")
#: a release name inside a string literal
NAME = re.compile(r"(?<![\d.])0\.\d+\.\d+(?![\d.])")
#: files allowed to spell a release, and why
ALLOWED = {
    # the release room: the releases, their rules and option tables are its data
    "pipeline/releases/": "the release room",
    # generated registries: each is one release's model registry, dumped from its source; the
    # numbers are that release's own "last release with this model" data
    "pipeline/models/vllm_registry_019.py": "generated: 0.19.0's model registry",
    "pipeline/models/v034/vllm_registry_034.py": "generated: 0.34.0's model registry",
    # the store's history: runs recorded before releases were named were all of the first
    # release, and migration 0010 wrote that value into their rows; it is a fact about old rows,
    # not a choice of release (and the store may not read the release room)
    "store/rows.py": "the release old rows were decided by (migration 0010)",
    "store/models.py": "the column default migration 0010 gave old rows",
    "migrations/": "schema history",
}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def literals(path) -> list[tuple[int, str]]:
    """``(line, text)`` of every string literal (docstrings left out) that spells a release."""
    tree = ast.parse(path.read_text(), str(path))
    skip = _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
            and NAME.search(node.value)]


def _allowed(rel: str) -> bool:
    return any(rel == a or (a.endswith("/") and rel.startswith(a)) for a in ALLOWED)


#: files whose messages quote what one release's own code does (prose naming the release whose
#: source the sentence describes, or a report measured on it), never a name compared or looked up
QUOTING = {
    "enginecfg/commands/findings.py": "the Gemma 4 decode-speed report was measured on one release",
    "pipeline/hf/_worker.py": "quotes the first release's handling of a config it reads",
    "pipeline/models/engine_start.py": "quotes the first release's Bamba class",
    "pipeline/models/mamba_state.py": "quotes how the first release sizes the Mamba state",
    "pipeline/models/memory.py": "quotes how the first release treats the CUDA-graph estimate",
    "pipeline/models/v034/memory.py": "quotes how 0.34.0's worker treats the CUDA-graph estimate",
    "pipeline/run.py": "quotes what the first release accepts while it builds its config",
    "stages/v034/config_time.py": "quotes 0.34.0's validation error text",
    "store/queries.py": "an example in a help text (the store may not read the release room)",
}


def _shipped():
    for folder in SHIPPED:
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if "__pycache__" not in rel and not _allowed(rel):
                yield rel, path


def test_no_release_name_outside_the_release_room():
    # a string that is a release's name: a comparison, a table key, a default
    found = [f"{rel}:{line}: {text!r}" for rel, path in _shipped() for line, text in literals(path)
             if NAME.fullmatch(text.strip())]
    assert found == []


def test_prose_names_a_release_only_where_it_quotes_that_release():
    found = [f"{rel}:{line}: {text[:80]!r}" for rel, path in _shipped() if rel not in QUOTING
             for line, text in literals(path)]
    assert found == []


def test_the_check_finds_a_name():
    # the check above is only worth something if it sees a comparison with a release's name
    sample = REPO / "tests" / "data" / "releases" / "README.md"  # any file: parse a snippet instead
    assert sample.exists()
    tree = ast.parse('def f(r):\n    """0.19.0 in a docstring is prose."""\n    return r == "0.19.0" or f"{r}"\n')
    skip = _docstrings(tree)
    hits = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in skip and NAME.search(n.value)]
    assert hits == ["0.19.0"]


@pytest.mark.parametrize("rel", sorted(ALLOWED) + sorted(QUOTING))
def test_every_allowed_path_exists(rel):
    assert (REPO / rel.rstrip("/")).exists(), rel
