"""The version is read, not repeated: from the installed metadata, else from pyproject.toml."""

from __future__ import annotations

import tomllib
from importlib import metadata

import enginecfg
from enginecfg import _layout
from support import REPO


def test_the_version_is_the_installed_distributions():
    assert enginecfg.__version__ == metadata.version("enginecfg")
    from enginecfg import __version__

    assert __version__ == enginecfg.__version__


def test_a_checkout_that_is_not_installed_says_so(monkeypatch):
    def not_installed(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert _layout.version() == f"{declared}+checkout"
