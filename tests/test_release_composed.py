"""The releases between 0.19.0 and 0.34.0 are composed from dated rules; where the unmodified vLLM
of a release was run (``tests/data/vllm-X.Y.Z/``), its config-time decisions that the wired rules
switch (the block size, prefix caching, the Mamba cache mode and block size) and whether config
time refuses the setting are held against its answers on every public case."""

from __future__ import annotations

import gzip
import json

import pytest

from support import REPO

from enginecfg import EngineCfgError, Pipeline

CONFIGS = REPO / "tests" / "data" / "vllm-0.19.0" / "configs"
FIELDS = ("block_size", "enable_prefix_caching", "mamba_cache_mode", "mamba_block_size")


def _answers(release: str) -> list[dict]:
    tag = "".join(release.split(".")[:2])[1:].zfill(3)  # 0.28.0 -> 028
    return json.loads(gzip.open(REPO / "tests" / "data" / f"vllm-{release}" / f"public-{tag}.json.gz").read())["results"]


@pytest.mark.parametrize("release", ["0.20.0", "0.28.0", "0.32.0"])
def test_config_time_decisions_match_the_release_run(release):
    differ = []
    for case in _answers(release):
        path = CONFIGS / case["config_dir"].rsplit("/", 1)[1]
        try:
            result = Pipeline(vllm_version=release, gpu_validation="off").resolve(str(path), **case["args"])
        except EngineCfgError as exc:
            if not case.get("error"):
                differ.append(f"{case['name']}: refused ({exc}), vLLM {release} resolves it")
            continue
        if case.get("error"):
            differ.append(f"{case['name']}: resolved, vLLM {release} refuses it")
            continue
        final = case["final"]["cache_config"]
        differ += [f"{case['name']}: {f} {final.get(f)!r} vs {getattr(result.config.cache_config, f)!r}"
                   for f in FIELDS if final.get(f) != getattr(result.config.cache_config, f)]
    assert differ == []
