"""Test support: where the fixtures are, and how to read them."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared"
FIXTURES = SHARED / "fixtures"
CONFIGS = FIXTURES / "configs"

#: the log lines of vLLM's config module (what the fixtures' "messages" hold)
SEED_MESSAGE = re.compile(
    r"^(Gemma4 model has heterogeneous head dimensions|Disabling calculate_kv_scales for hybrid"
    r"|Setting attention block size to|Padding mamba page size by|Mamba cache mode is set to"
    r"|Hybrid or mamba-based model detected without support|Warning: Prefix caching in Mamba cache"
    r"|Updating mamba_ssm_cache_dtype to|Qwen3\.5 model specifies mamba_ssm_dtype)")


def load_cases() -> list[dict]:
    return json.loads((FIXTURES / "cases.json").read_text())["cases"]


