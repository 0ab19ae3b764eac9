"""``enginecfg run`` end to end: the run document, exit codes, and words for people."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

from support import FIXTURES, SEED_MESSAGE, load_cases

CASES = load_cases()
SAMPLE = random.Random(7).sample(CASES, 24)

_FLAGS = {"block_size": "--block-size", "kv_cache_dtype": "--kv-cache-dtype",
          "mamba_cache_mode": "--mamba-cache-mode", "mamba_block_size": "--mamba-block-size",
          "mamba_ssm_cache_dtype": "--mamba-ssm-cache-dtype", "attention_backend": "--attention-backend",
          "tensor_parallel_size": "-tp", "max_model_len": "--max-model-len", "dtype": "--dtype"}


def flags_for(engine_args):
    out = []
    for k, v in engine_args.items():
        if isinstance(v, bool):
            if k == "calculate_kv_scales":
                out += ["--calculate-kv-scales"] if v else []
            else:
                out.append(f"--{'' if v else 'no-'}{k.replace('_', '-')}")
        else:
            out += [_FLAGS[k], str(v)]
    return out


def cli(*args):
    # built-in stages only: an installed site plugin must not change what vLLM is compared with
    env = dict(os.environ, ENGINECFG_PLUGINS="none")
    return subprocess.run([sys.executable, "-P", "-m", "enginecfg", *args], capture_output=True, text=True,
                          timeout=300, cwd=os.environ["ENGINECFG_TEST_TMP"], env=env)


DOC_KEYS = {"status", "run_id", "model", "engine_args", "config", "changes", "messages", "pages", "error",
            "fingerprint"}


@pytest.mark.parametrize("case", SAMPLE, ids=[c["name"] for c in SAMPLE])
def test_run_json_matches_vllm_on_a_sample(case, warm_snapshots):
    path = str(FIXTURES / case["config"])
    proc = cli("run", path, "--json", "--no-audit", "--gpu-validation", "off", *flags_for(case["engine_args"]))
    doc = json.loads(proc.stdout)
    assert DOC_KEYS <= set(doc)
    assert doc["model"] == path and doc["engine_args"] == case["engine_args"]
    expected = case["expected"]
    if expected["status"] == "error":
        assert proc.returncode in (1, 2) and doc["status"] in ("rejected", "invalid")
        assert doc["error"]["message"] and len(proc.stderr.strip().splitlines()) == 1
        return
    assert proc.returncode == 0 and doc["status"] == "resolved"
    for sec, fields in expected["config"].items():
        if fields is None:
            assert doc["config"][sec] is None
            continue
        for k, v in fields.items():
            assert doc["config"][sec][k] == v
    assert doc["pages"] == (None if not expected.get("pages") else {**doc["pages"], **expected["pages"]})
    got = [(m["level"], m["message"]) for m in doc["messages"] if SEED_MESSAGE.match(m["message"])]
    assert got == [(m["level"], m["message"].replace("{model}", path)) for m in expected["messages"]]
    for c in doc["changes"]:
        assert set(c) >= {"seq", "stage", "field", "old", "new", "reason", "level"}
        assert c["level"] in ("INFO", "WARNING") and "." in c["field"]
    assert [c["seq"] for c in doc["changes"]] == list(range(1, len(doc["changes"]) + 1))
    assert isinstance(doc["fingerprint"], str) and len(doc["fingerprint"]) == 64


def test_rejected_run_exits_1_and_invalid_exits_2():
    path = str(FIXTURES / "configs" / "qwen3.5-27b")
    proc = cli("run", path, "--json", "--no-audit", "--enable-prefix-caching", "--mamba-cache-mode", "align",
               "--no-enable-chunked-prefill")
    assert proc.returncode == 1 and json.loads(proc.stdout)["status"] == "rejected"
    assert "Chunked prefill is required" in proc.stderr
    proc = cli("run", path, "--json", "--no-audit", "--kv-cache-dtype", "int4")
    assert proc.returncode == 2 and json.loads(proc.stdout)["status"] == "invalid"


def test_hybrid_run_explains_the_block_size_in_words():
    """The human report shows each change's explanation, the same text as the run document."""
    path = str(FIXTURES / "configs" / "nemotron-3-nano-30b-a3b-bf16")
    proc = cli("run", path, "--no-audit", "--gpu-validation", "off")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    doc = json.loads(cli("run", path, "--no-audit", "--gpu-validation", "off", "--json").stdout)
    explained = [c for c in doc["changes"] if c["explanation"]]
    assert {c["field"] for c in explained} >= {"cache_config.block_size", "cache_config.mamba_page_size_padded"}
    for c in explained:
        assert " ".join(c["explanation"].split()) in text


def test_stages_lists_the_builtins_in_order():
    proc = cli("stages", "--json")
    assert proc.returncode == 0, proc.stderr
    names = [r["name"] for r in json.loads(proc.stdout)]
    assert names.index("pooling") < names.index("mamba-cache-mode") < names.index("hybrid-alignment") \
        < names.index("gpu-validation")
