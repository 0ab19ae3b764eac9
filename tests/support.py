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




#: which stage logs each of vLLM's config-module lines (the fixtures' "messages")
MESSAGE_STAGE = {
    "Gemma4 model has heterogeneous head dimensions": "gemma4-backend",
    "Disabling calculate_kv_scales for hybrid": "hybrid-kv-scales",
    "Mamba cache mode is set to": "mamba-cache-mode",
    "Hybrid or mamba-based model detected without support": "mamba-cache-mode",
    "Warning: Prefix caching in Mamba cache": "mamba-cache-mode",
    "Setting attention block size to": "hybrid-alignment",
    "Padding mamba page size by": "hybrid-alignment",
    "Updating mamba_ssm_cache_dtype to": "ssm-dtype",
    "Qwen3.5 model specifies mamba_ssm_dtype": "ssm-dtype",
}


def resolved_cases() -> list[dict]:
    return [c for c in load_cases() if c["expected"]["status"] == "resolved"]


def check_stage_against_fixture(stage_name: str, fields: dict[str, list[str]], case: dict) -> None:
    """Run the pipeline up to *stage_name* (``enginecfg.testing.run_stage``) on a fixture case:
    the fields the stage decides already hold vLLM's final values, and the stage logged
    exactly vLLM's lines of that step, in order."""
    from enginecfg import BUILTIN_STAGES
    from enginecfg.testing import run_stage

    stage = next(cls for cls in BUILTIN_STAGES if cls.name == stage_name)
    path = str(FIXTURES / case["config"])
    result = run_stage(stage, path, **case["engine_args"])
    config = result.to_dict()["config"]
    for section, names in fields.items():
        want = case["expected"]["config"].get(section)
        for name in names:
            if want is None or name not in want:
                continue
            assert config[section][name] == want[name], f"{section}.{name}"
    want_lines = [m["message"].replace("{model}", path) for m in case["expected"]["messages"]
                  if MESSAGE_STAGE.get(next((p for p in MESSAGE_STAGE if m["message"].startswith(p)), "")) == stage_name]
    got_lines = [m.message for m in result.messages if m.stage == stage_name]
    assert got_lines == want_lines
