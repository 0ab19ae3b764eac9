"""``enginecfg run org/name``: a repo id resolved from a local hub cache with HF_HUB_OFFLINE=1,
and one clear line (exit 2) for an unknown repo, a missing revision, or no network and no
cache.  Also: where vLLM's config class and transformers' disagree, enginecfg follows vLLM."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hubsupport import safetensors_bytes, write_cache_repo
from support import CONFIGS

CONFIG = (CONFIGS / "qwen3-next-default" / "config.json").read_bytes()


def _cli(*args, env_extra: dict[str, str], tmp_path):
    env = dict(os.environ)
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_ENDPOINT", "HF_TOKEN", "HF_HUB_OFFLINE"):
        env.pop(var, None)
    env["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"
    env.update(env_extra)
    return subprocess.run([sys.executable, "-P", "-m", "enginecfg", *args], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)


def test_run_repo_id_offline_from_the_cache(tmp_path):
    home = tmp_path / "hf"
    commit = write_cache_repo(home / "hub", "Qwen/Tiny-Next", {
        "config.json": CONFIG, "model.safetensors": safetensors_bytes({"w": ("BF16", [2])})})
    db = f"sqlite:///{tmp_path / 'audit.db'}"
    proc = _cli("run", "Qwen/Tiny-Next", "--json", "--db", db, "--gpu-validation", "off",
                "--enable-prefix-caching", env_extra={"HF_HOME": str(home), "HF_HUB_OFFLINE": "1"},
                tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["model"] == "Qwen/Tiny-Next"
    assert doc["source"]["repo_id"] == "Qwen/Tiny-Next" and doc["source"]["commit"] == commit
    # the config names no dtype: the safetensors header was read (the header only)
    assert {f["name"]: f["how"] for f in doc["source"]["files"]} == {"config.json": "file",
                                                                     "model.safetensors": "header"}
    assert doc["config"]["model_config"]["dtype"] == "bfloat16"
    assert doc["config"]["cache_config"]["block_size"] > 16               # the hybrid alignment ran
    # the audit store keeps the same provenance
    show = _cli("show", doc["run_id"], "--json", "--db", db, env_extra={}, tmp_path=tmp_path)
    assert show.returncode == 0, show.stderr
    assert json.loads(show.stdout)["source"] == doc["source"]
    from sqlalchemy import create_engine, text

    with create_engine(db).connect() as conn:
        stored = conn.execute(text("SELECT source FROM runs WHERE id = :i"), {"i": doc["run_id"]}).scalar_one()
    stored = json.loads(stored) if isinstance(stored, str) else stored
    assert stored == doc["source"]
    verify = _cli("audit", "verify", "--db", db, env_extra={}, tmp_path=tmp_path)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def _one_line_exit_2(proc, *needles):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_run_unknown_repo_offline(tmp_path):
    proc = _cli("run", "org/absent", "--no-audit", "--gpu-validation", "off",
                env_extra={"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}, tmp_path=tmp_path)
    _one_line_exit_2(proc, "'org/absent'", "HF_HUB_OFFLINE")


def test_run_missing_revision_offline(tmp_path):
    home = tmp_path / "hf"
    write_cache_repo(home / "hub", "org/name", {"config.json": CONFIG})
    proc = _cli("run", "org/name", "--revision", "v2", "--no-audit", "--gpu-validation", "off",
                env_extra={"HF_HOME": str(home), "HF_HUB_OFFLINE": "1"}, tmp_path=tmp_path)
    _one_line_exit_2(proc, "'v2'", "'org/name'", "HF_HUB_OFFLINE")


def test_run_without_network_and_without_cache(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = _cli("run", "org/name", "--no-audit", "--gpu-validation", "off",
                env_extra={"HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": f"http://127.0.0.1:{port}"},
                tmp_path=tmp_path)
    _one_line_exit_2(proc, "cannot reach the Hugging Face Hub", "for 'org/name'", "HF_HUB_OFFLINE=1")


def test_disable_sliding_window_flag(tmp_path):
    cfg = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 256,
           "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "max_position_embeddings": 32768, "sliding_window": 4096, "vocab_size": 1024, "torch_dtype": "bfloat16"}
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    runs = [_cli("run", str(tmp_path / "m"), "--json", "--no-audit", "--gpu-validation", "off", *flag,
                 env_extra={}, tmp_path=tmp_path) for flag in ((), ("--disable-sliding-window",))]
    plain, disabled = (json.loads(p.stdout)["config"]["model_config"] for p in runs)
    assert (plain["max_model_len"], plain["sliding_window"]) == (32768, 4096)
    assert (disabled["max_model_len"], disabled["sliding_window"], disabled["disable_sliding_window"]) == \
        (4096, None, True)


def test_kimi_linear_follows_vllms_class_where_transformers_disagrees():
    """Without MLA fields and a length, transformers' KimiLinear class makes the model MLA with
    a 1M context; vLLM's own class (what vLLM 0.19.0 reads) has no MLA and no length (2048)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "sources_oracle"))
    from cases import KIMI, _without

    from transformers import AutoConfig

    from enginecfg import EngineConfig

    cfg = _without(KIMI, "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "mla_use_nope",
                   "model_max_length")
    hf = AutoConfig.for_model(**cfg)
    assert hf.kv_lora_rank == 512 and hf.max_position_embeddings == 1048576   # transformers' defaults
    ours = EngineConfig.from_hf_config(cfg).model_config
    assert (ours.use_mla, ours.head_size, ours.max_model_len) == (False, 72, 2048)


def test_run_repo_id_online_then_offline(tmp_path):
    """Online the small files land in the standard cache (weights: header bytes only, by range);
    the same command offline then resolves from that cache, to the same config."""
    from hubsupport import LocalHub

    commit = "e" * 40
    weights = safetensors_bytes({"w": ("BF16", [128, 128]), "A_log": ("F32", [4])})
    repo = {"commit": commit, "files": {"config.json": CONFIG, "model.safetensors": weights,
                                        "tokenizer_config.json": b'{"model_max_length": 1024}'}}
    home = str(tmp_path / "hf")
    with LocalHub({"org/next": repo}) as hub:
        online = _cli("run", "org/next", "--json", "--no-audit", "--gpu-validation", "off",
                      env_extra={"HF_HOME": home, "HF_ENDPOINT": hub.url}, tmp_path=tmp_path)
        assert online.returncode == 0, online.stderr
        ranges = hub.bytes_sent_for("model.safetensors")
    assert ranges and all(r and r.startswith("bytes=") for r in ranges)
    offline = _cli("run", "org/next", "--json", "--no-audit", "--gpu-validation", "off",
                   env_extra={"HF_HOME": home, "HF_HUB_OFFLINE": "1"}, tmp_path=tmp_path)
    assert offline.returncode == 0, offline.stderr
    on, off = json.loads(online.stdout), json.loads(offline.stdout)
    assert (on["source"]["commit"], on["source"]["offline"]) == (commit, False)
    assert (off["source"]["commit"], off["source"]["offline"]) == (commit, True)
    # online vLLM reads the remote headers (bf16 + f32 -> float32 -> bfloat16); offline the
    # weights are not in the cache, so vLLM (and enginecfg) see no safetensors at all
    assert {f["name"]: f["how"] for f in on["source"]["files"]}["model.safetensors"] == "remote-header"
    assert "model.safetensors" not in {f["name"] for f in off["source"]["files"]}
    assert on["config"]["model_config"] == off["config"]["model_config"]


def test_run_report_names_the_source_and_pins_the_commit(tmp_path):
    home = tmp_path / "hf"
    commit = write_cache_repo(home / "hub", "Qwen/Tiny-Next", {
        "config.json": CONFIG, "model.safetensors": safetensors_bytes({"w": ("BF16", [2])})})
    proc = _cli("run", "Qwen/Tiny-Next", "--no-audit", "--gpu-validation", "off",
                env_extra={"HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}, tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert (f"source: Hugging Face repo Qwen/Tiny-Next at commit {commit} (from the local cache); "
            f"read: config.json, model.safetensors (header)") in text
    assert f"vllm serve Qwen/Tiny-Next --revision {commit}" in text


def test_kimi_linear_values_vllms_class_refuses_name_the_field():
    from enginecfg import EngineConfig, InvalidInputError

    sys.path.insert(0, str(Path(__file__).resolve().parent / "sources_oracle"))
    from cases import KIMI

    bad_router = dict(KIMI, moe_router_activation_func="relu")
    with pytest.raises(InvalidInputError, match="moe_router_activation_func") as info:
        EngineConfig.from_hf_config(bad_router)
    assert info.value.field == "hf_config.moe_router_activation_func"
    no_kda = dict(KIMI, linear_attn_config={"full_attn_layers": [4], "num_heads": 32, "head_dim": 128})
    with pytest.raises(InvalidInputError, match="linear_attn_config"):
        EngineConfig.from_hf_config(no_kda)
