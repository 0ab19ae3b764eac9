"""The rooms keep to their layers: one allow-list of imports, written positively per room, held
against every import statement of the package (those inside functions included: a lazy import
is still a dependency; ``if TYPE_CHECKING:`` blocks run no code and are skipped), and no
import cycle anywhere."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from support import REPO

#: the top-level folders of the checkout and the package names they are installed as
FOLDERS = {"enginecfg": "enginecfg", "pipeline": "enginecfg.pipeline", "stages": "enginecfg.stages",
           "store": "enginecfg.store", "kernels": "enginecfg.kernels", "migrations": "enginecfg.migrations"}

#: module (or package) name -> room; a module is in the room of its longest listed prefix
ROOM_OF = {
    # the shared vocabulary and where the rooms live: they import nothing of ours
    "enginecfg.pipeline.errors": "base",
    "enginecfg.pipeline.jsonvalue": "base",
    "enginecfg.pipeline.suggest": "base",
    "enginecfg._layout": "base",
    "enginecfg.pipeline.hf": "hf",
    "enginecfg.pipeline.releases": "releases",
    "enginecfg.pipeline.models": "models",
    "enginecfg.pipeline.logs": "logs",
    "enginecfg.pipeline": "engine",
    "enginecfg.pipeline.loading": "loading",
    "enginecfg.pipeline.loadmemo": "loading",
    "enginecfg.stages": "stages",
    "enginecfg.kernels": "kernels",
    "enginecfg.store": "store",
    "enginecfg.migrations": "migrations",
    "enginecfg.commands": "commands",
    "enginecfg": "app",
}

PIPELINE = {"base", "hf", "releases", "models", "engine", "loading"}

#: room -> the rooms it may import (besides itself)
ALLOWED = {
    "base": set(),
    "hf": {"base"},                                   # Hugging Face files, snapshots, caches
    "releases": {"base"},                             # the vLLM releases: dated rules, option tables
    "models": {"base", "hf", "releases"},             # vLLM's knowledge
    "engine": {"base", "hf", "releases", "models"},   # sections, stages, runs, events, plugins
    "loading": {"base", "hf", "releases", "models", "engine"},  # files + knowledge -> an EngineConfig
    "stages": {"base", "hf", "releases", "models", "engine", "kernels"},  # decisions; GPU validation runs kernels
    "kernels": {"base"},                              # Triton kernels: no configs, no stages
    "store": {"base", "engine", "migrations"},        # listens to events; runs its migrations
    "migrations": {"base", "store"},                  # the store's schema, applied by Alembic
    "logs": {"base", "releases"},                     # a vLLM start-up log read back: text -> values
    "commands": PIPELINE | {"stages", "store", "logs"},  # library functions the CLI wires up
    "app": PIPELINE | {"stages", "kernels", "store", "migrations", "commands", "logs"},
}

#: rooms whose own modules may be imported from outside only by the names their __init__ lists
PUBLIC_ONLY = {"hf", "models"}
#: ... by these rooms
HELD_TO_PUBLIC = {"models", "engine", "loading", "stages"}


def room_of(module: str) -> str | None:
    while module:
        if module in ROOM_OF:
            return ROOM_OF[module]
        module = module.rpartition(".")[0]
    return None


def modules() -> dict[str, Path]:
    """Every module of the package: installed name -> file."""
    out = {}
    for folder, package in FOLDERS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if "__pycache__" in rel.parts:
                continue
            out[".".join([package, *parts])] = path
    return out


MODULES = modules()


def _type_checking_lines(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                skip.update(range(sub.lineno, (sub.end_lineno or sub.lineno) + 1))
    return skip


def imports(module: str) -> list[tuple[str, tuple[str, ...], int]]:
    """``(module imported, names taken from it, line)`` for every import of *module* (relative
    ones resolved; ``if TYPE_CHECKING:`` blocks left out)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_lines(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(alias.name, (), node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            out.append((base, tuple(a.name for a in node.names), node.lineno))
    return out


def targets(module: str, names: tuple[str, ...]) -> list[str]:
    """The modules of ours an import reaches: each ``from X import Y`` that names a submodule
    reaches it (``from enginecfg.pipeline import hf`` is the hf room), anything else reaches X."""
    found = [f"{module}.{n}" for n in names if f"{module}.{n}" in MODULES]
    if len(found) < len(names) or not names:
        found.append(module)
    return [t for t in found if room_of(t) is not None]


def test_every_module_is_in_a_room():
    assert [m for m in MODULES if room_of(m) is None] == []
    assert {room_of(m) for m in MODULES} >= PIPELINE | {"stages", "kernels", "store", "migrations", "app"}


def test_each_room_imports_only_what_its_allow_list_names():
    found = []
    for module in MODULES:
        room = room_of(module)
        for imported, names, line in imports(module):
            for target in targets(imported, names):
                other = room_of(target)
                if other != room and other not in ALLOWED[room]:
                    found.append(f"{MODULES[module].relative_to(REPO)}:{line} ({room}) imports "
                                 f"{target} ({other})")
    assert found == []


def _public(package: str) -> set[str]:
    return set(importlib.import_module(package).__all__)


def test_the_engine_and_the_stages_use_only_the_public_names_of_hf_and_models():
    tops = {room: next(m for m, r in ROOM_OF.items() if r == room) for room in PUBLIC_ONLY}
    private = []
    for module in MODULES:
        if room_of(module) not in HELD_TO_PUBLIC:
            continue
        for imported, names, line in imports(module):
            room = room_of(imported)
            if room not in PUBLIC_ONLY or room == room_of(module):
                continue
            top = tops[room]
            rest = imported[len(top) + 1:].split(".") if imported != top else []
            where = f"{MODULES[module].relative_to(REPO)}:{line}"
            if len(rest) > 1 or (rest and rest[0] not in _public(top)):
                private.append(f"{where} imports {imported}, not a name {top} lists")
            elif names:
                listed = _public(imported)
                private += [f"{where} takes {n} from {imported}, which does not list it"
                            for n in names if n not in listed]
    assert private == []


@pytest.mark.parametrize("package", sorted({m for m, r in ROOM_OF.items()
                                           if r not in ("base", "loading") and m in MODULES}))
def test_each_room_lists_its_public_names(package):
    tree = ast.parse(MODULES[package].read_text())
    names = {t.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
             for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
             if isinstance(t, ast.Name)}
    assert "__all__" in names, f"{package}'s __init__ does not list its public names"
    missing = [n for n in importlib.import_module(package).__all__ if n != "__version__"
               and not hasattr(importlib.import_module(package), n)
               and f"{package}.{n}" not in MODULES]
    assert missing == []


# -- no cycles --------------------------------------------------------------------------------

def import_graph() -> dict[str, set[str]]:
    """module -> the modules of ours it imports (a module's own packages left out: importing
    a submodule runs them first anyway)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module in MODULES:
        for imported, names, _ in imports(module):
            for target in targets(imported, names):
                while target not in MODULES:
                    target = target.rpartition(".")[0]
                if target != module and not module.startswith(target + "."):
                    graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return found


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def test_the_walk_sees_lazy_imports_and_finds_a_cycle():
    # the checks above are only worth something if imports inside functions are seen ...
    lazy = [imported for imported, _, line in imports("enginecfg.pipeline.hf.cache")
            if line > 100]
    assert "enginecfg.pipeline.hf._worker" in lazy
    # ... and if a cycle through them is found
    graph = import_graph()
    graph["enginecfg.pipeline.errors"].add("enginecfg.pipeline.hf.cache")
    assert any("enginecfg.pipeline.hf.cache" in c for c in cycles(graph))
