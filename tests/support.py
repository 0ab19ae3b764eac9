"""Test support: where the fixtures are, and how to read them."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

#: the checkout these tests belong to, and ``shared/`` beside it (CI lays it out the same way)
REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
FIXTURES = SHARED / "fixtures"
CONFIGS = FIXTURES / "configs"

#: the log lines of vLLM's config module (what the fixtures' "messages" hold)
SEED_MESSAGE = re.compile(
    r"^(Gemma4 model has heterogeneous head dimensions|Disabling calculate_kv_scales for hybrid"
    r"|Setting attention block size to|Padding mamba page size by|Mamba cache mode is set to"
    r"|Hybrid or mamba-based model detected without support|Warning: Prefix caching in Mamba cache"
    r"|Updating mamba_ssm_cache_dtype to|Qwen3\.5 model specifies mamba_ssm_dtype)")


#: a PostgreSQL server for the audit-store tests (``.ci/postgres.sh`` prints it); unset: skipped
PG_URL = os.environ.get("ENGINECFG_TEST_PG_URL")


def kill_at_marker(proc, marker: Path, what: str, timeout: float) -> None:
    """SIGKILL *proc* as soon as it creates *marker* (its hold point), and reap it."""
    import signal
    import time

    import pytest

    try:
        deadline = time.monotonic() + timeout
        while not marker.exists():
            if proc.poll() is not None:
                pytest.fail(f"{what} exited early ({proc.returncode}): {proc.stderr.read()}")
            if time.monotonic() > deadline:
                pytest.fail(f"{what} never reached the hold point")
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        proc.stderr.close()


def load_cases() -> list[dict]:
    return json.loads((FIXTURES / "cases.json").read_text())["cases"]


