"""The rooms keep to their layers: a walk over every import statement of the package,
those inside functions included (a lazy import is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from support import REPO

ROOMS = {"engine": REPO / "pipeline", "models": REPO / "pipeline" / "models", "stages": REPO / "stages",
         "kernels": REPO / "kernels", "store": REPO / "store", "migrations": REPO / "migrations",
         "app": REPO / "enginecfg"}


def _modules(room: str) -> list[Path]:
    base = ROOMS[room]
    files = base.rglob("*.py") if room != "engine" else base.glob("*.py")  # engine: models apart
    return sorted(files)


def _imports(path: Path) -> list[tuple[str, tuple[str, ...], int]]:
    """(module, names imported from it, line) for every import in the file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(alias.name, (), node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, tuple(a.name for a in node.names), node.lineno))
    return out


def _violations(room: str, forbidden: tuple[str, ...]) -> list[str]:
    found = []
    for path in _modules(room):
        for module, names, line in _imports(path):
            targets = [module] + [f"{module}.{n}" for n in names]
            for prefix in forbidden:
                if any(t == prefix or t.startswith(prefix + ".") for t in targets):
                    found.append(f"{path.relative_to(REPO)}:{line} imports {module}")
    return found


@pytest.mark.parametrize("room, forbidden", [
    ("engine", ("enginecfg.store", "enginecfg.cli", "enginecfg.testing", "enginecfg.kernels")),
    ("models", ("enginecfg.store", "enginecfg.cli", "enginecfg.stages", "enginecfg.kernels",
                "enginecfg.pipeline.run", "enginecfg.pipeline.stage", "enginecfg.pipeline.plugins",
                "enginecfg.pipeline.loading", "enginecfg.pipeline.ordering")),
    ("stages", ("enginecfg.store", "enginecfg.cli", "enginecfg.testing", "enginecfg.pipeline.run",
                "enginecfg.pipeline.loading")),
    # kernels know nothing of configs, stages or the store (the error types are shared vocabulary)
    ("kernels", ("enginecfg.pipeline.config", "enginecfg.pipeline.run", "enginecfg.pipeline.stage",
                 "enginecfg.pipeline.events", "enginecfg.pipeline.loading", "enginecfg.pipeline.models",
                 "enginecfg.stages", "enginecfg.store", "enginecfg.cli")),
    ("store", ("enginecfg.stages", "enginecfg.cli", "enginecfg.kernels", "enginecfg.testing")),
])
def test_a_room_imports_nothing_above_or_beside_it(room, forbidden):
    assert _violations(room, forbidden) == []


def test_the_engine_uses_only_the_public_names_of_the_model_knowledge():
    private = []
    for path in _modules("engine") + _modules("stages"):
        for module, names, line in _imports(path):
            if not module.startswith("enginecfg.pipeline.models"):
                continue
            parts = module.split(".")[3:] + list(names)
            if any(p.startswith("_") for p in parts):
                private.append(f"{path.relative_to(REPO)}:{line} {module} {names}")
    assert private == []


def test_the_walk_sees_lazy_imports():
    # the check above is only worth something if imports inside functions are seen
    imports = _imports(REPO / "pipeline" / "run.py")
    assert any(m == "enginecfg.pipeline.plugins" for m, _, _ in imports)
