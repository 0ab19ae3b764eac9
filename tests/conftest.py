"""Shared test set-up: a fresh snapshot cache and audit DB per session."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from support import CONFIGS


def pytest_configure(config):
    # a cache of this session only: every snapshot is built by transformers for real
    tmp = Path(tempfile.mkdtemp(prefix="enginecfg-tests-"))
    os.environ["ENGINECFG_CACHE_DIR"] = str(tmp / "hf-cache")
    os.environ.setdefault("ENGINECFG_DB", f"sqlite:///{tmp / 'audit.db'}")
    os.environ["ENGINECFG_TEST_TMP"] = str(tmp)


@pytest.fixture(scope="session")
def warm_snapshots():
    """Build the snapshots of every fixture config in one transformers worker."""
    from enginecfg.pipeline.hfcache import snapshots_for

    dicts = [json.loads((d / "config.json").read_text()) for d in sorted(CONFIGS.iterdir())]
    snapshots_for(dicts)
    return True
