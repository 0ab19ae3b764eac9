"""Where the subpackages live (inside ``enginecfg/`` when installed, beside it in a checkout), and
which version is running.

An installed enginecfg (a wheel, or an editable install's link tree) has its rooms inside the
package folder: ``enginecfg/pipeline``, ``enginecfg/stages``, ... In a source checkout the
rooms are top-level folders beside ``enginecfg/`` (the layout the project keeps). When Python
starts in the checkout's root, the checkout's own ``enginecfg/`` folder is found first, so the
package extends its ``__path__`` with the checkout root: ``enginecfg.pipeline`` is then the
checkout's ``pipeline/`` folder, exactly the files an install maps to that name.

The checkout root itself is never put on ``sys.path``: its ``kernels/`` folder would shadow
Hugging Face's ``kernels`` package (see :func:`hand_over_bare_import`).
"""

from __future__ import annotations

import os
import sys
import types

#: the rooms that are subpackages of ``enginecfg`` (top-level folders of a checkout)
ROOMS = ("pipeline", "stages", "kernels", "store", "migrations")


def checkout_root(package_file: str) -> str | None:
    """The checkout root when *package_file* is ``enginecfg/__init__.py`` of a source checkout."""
    package_dir = os.path.dirname(os.path.abspath(package_file))
    if os.path.isdir(os.path.join(package_dir, "pipeline")):
        return None  # installed layout: the rooms are inside the package
    root = os.path.dirname(package_dir)
    if all(os.path.isfile(os.path.join(root, room, "__init__.py")) for room in ROOMS):
        return root
    return None


def join_checkout(path: list[str], package_file: str) -> None:
    """Append the checkout root to the package ``__path__`` when running from a checkout."""
    root = checkout_root(package_file)
    if root is not None and root not in path:
        path.append(root)


def hand_over_bare_import(name: str, package_file: str) -> None:
    """A room imported under its bare name (``import kernels`` with a checkout on ``sys.path``)
    hands the import to whatever the name means without the checkout, or fails as it would.

    Without this, ``python -m pytest`` in a checkout's root would make ``import kernels``
    (which transformers does when Hugging Face's ``kernels`` package is installed) load
    enginecfg's Triton kernels instead. Replacing ``sys.modules[name]`` while the module
    executes is the documented way for an import to return another module.
    """
    from importlib.machinery import PathFinder
    from importlib.util import module_from_spec

    own = os.path.dirname(os.path.dirname(os.path.abspath(package_file)))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != own]
    spec = PathFinder.find_spec(name, path)
    if spec is None or spec.loader is None:
        # nothing else has the name: the checkout's folder reads as the plain folder it would
        # be without our code in it, an empty namespace package (no file, no version), which
        # is how transformers' availability probes recognise "not installed"
        sys.modules[name] = types.ModuleType(name)
        return
    module = module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


def version() -> str:
    """enginecfg's version: the installed distribution's (its metadata, written from
    ``pyproject.toml`` when it was installed).  A checkout that is not installed has no
    metadata: its ``pyproject.toml`` version with ``+checkout`` appended, or ``0+unknown``
    when even that cannot be read."""
    from importlib import metadata

    try:
        return metadata.version("enginecfg")
    except metadata.PackageNotFoundError:
        pass
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # beside enginecfg/
    try:
        import tomllib

        with open(os.path.join(root, "pyproject.toml"), "rb") as fh:
            return str(tomllib.load(fh)["project"]["version"]) + "+checkout"
    except (OSError, KeyError, ValueError):
        return "0+unknown"
