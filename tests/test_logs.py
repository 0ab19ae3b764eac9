"""The start-up log reader (enginecfg.pipeline.logs) on the logs users pasted
(tests/data/logs), and on the forms they paste them in."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from enginecfg.pipeline.logs import gib_range, logical_lines, read, read_dict
from support import REPO

LOGS = REPO / "tests" / "data" / "logs"
INDEX = json.loads((LOGS / "index.json").read_text())
SLUGS = [d["slug"] for d in INDEX]


def _log(slug: str):
    return read((LOGS / slug / "start.log").read_text())


def test_the_index_lists_every_log_folder_with_its_source():
    folders = sorted(p.name for p in LOGS.iterdir() if p.is_dir())
    assert sorted(SLUGS) == folders
    assert len(folders) >= 20
    readme = (LOGS / "README.md").read_text()
    for d in INDEX:
        source = (LOGS / d["slug"] / "SOURCE.md").read_text()
        assert ("address: https://github.com/" in source) == (d["kind"] == "issue")
        assert f"`{d['slug']}`" in readme
        if d["check"]:
            assert (REPO / d["check"]["model"] / "config.json").is_file()
            assert "config: none" not in source
        else:
            assert d["config"] is None


@pytest.mark.parametrize("slug", [d["slug"] for d in INDEX if d.get("config_published")])
def test_a_config_whose_published_bytes_are_known_is_those_bytes(slug):
    # the size a download of the published file printed, and its Git blob id where a listing of the
    # hub's cache names it: a copy that differs by one byte fails
    d = next(d for d in INDEX if d["slug"] == slug)
    data = (REPO / d["check"]["model"] / "config.json").read_bytes()
    known = d["config_published"]
    assert len(data) == known["bytes"]
    if "git_blob" in known:
        assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == known["git_blob"]


@pytest.mark.parametrize("slug", SLUGS)
def test_every_log_reads_and_each_line_keeps_its_number_and_words(slug):
    raw = (LOGS / slug / "start.log").read_text().splitlines()
    log = _log(slug)
    assert log.starts, f"{slug}: no start found"
    assert log.lines == len(raw)
    for f in log.logged:
        assert 1 <= f.line <= len(raw)
        # the logged words begin on the line the fact names (a wrapped line goes on below it)
        assert f.text[:12].strip() in raw[f.line - 1], (f.line, f.text[:40], raw[f.line - 1][:80])
    json.dumps(log.to_dict())  # every value is plain data


#: what each log says, read by hand (release, model, starts, and a few figures)
EXPECTED = {
    "vllm-40691-qwen3.5-27b-h20": dict(release=None, kv_cache_size=290864, max_concurrency="33.04",
                                       command_model="Qwen3.5-27B"),
    "file-qwen3-next-80b-a3b-instruct-tp2-h200": dict(
        release="0.10.2", model="/data/models/Qwen3-Next-80B-A3B-Instruct", block_size=544, mamba_padding=1.49,
        available_kv_cache_memory="44.59", kv_cache_size=973760, max_concurrency="14.77", model_loading="74.2812",
        attention_backend="FLASH_ATTN", gpu="NVIDIA H200", args={"host": "0.0.0.0",
                                                                 "model": "/data/models/Qwen3-Next-80B-A3B-Instruct",
                                                                 "tensor_parallel_size": 2}),
    "file-qwen3.6-27b-nvfp4-mtp": dict(release="0.23.1rc1.dev531+ga65f93fb2", model="nvidia/Qwen3.6-27B-NVFP4",
                                       block_size=1600, available_kv_cache_memory="48.6", cuda_graph_memory="-0.81",
                                       kv_cache_size=1394129, max_concurrency="5.32", attention_backend="FLASHINFER",
                                       kv_cache_dtype="fp8", mamba_cache_mode="align"),
    "file-qwen3.5-9b-l40s": dict(release="0.19.0", model="Qwen/Qwen3.5-9B", block_size=528, mamba_padding=0.76,
                                 available_kv_cache_memory="20.27", kv_cache_size=165792, cuda_graph_memory="0.78",
                                 blocks_override=512, flash_attention_version=2, model_loading="17.66"),
    "file-nemotron-cascade-2-nvfp4-wsl": dict(release="0.20.1rc1.dev91+ga749a33d8", block_size=4176,
                                              available_kv_cache_memory="3.72", kv_cache_size=1206303,
                                              max_concurrency="4.71", kv_cache_dtype="fp8_e4m3", padding_layers=1),
    "file-qwen3-0.6b-rtx3060": dict(release="0.19.0", model="Qwen/Qwen3-0.6B", available_kv_cache_memory="8.03",
                                    kv_cache_size=75152, max_concurrency="9.17", command_model="Qwen/Qwen3-0.6B",
                                    args={"model_tag": "Qwen/Qwen3-0.6B", "max_model_len": 8192, "enforce_eager": True,
                                          "gpu_memory_utilization": 0.75}),
    "vllm-10517-llama-3.1-8b-rtx3090": dict(starts=2, gpu_blocks=1478, max_concurrency="0.82", model_loading="14.9888"),
    "vllm-42510-llama-3.1-8b-block-size": dict(release="0.14.1"),
    "vllm-gguf-plugin-101-qwen3-8b-compose": dict(release="0.18.0",
                                                  model="/models/unsloth/Qwen3-8B-GGUF/Qwen3-8B-Q4_K_M.gguf"),
    "vllm-38887-gemma-4-e4b-rtx4090": dict(forced_backend="TRITON_ATTN", attention_backend="TRITON_ATTN"),
    "vllm-49878-gemma4-kv-cache-memory-bytes": dict(kv_cache_memory_reserved="49.0", forced_backend="TRITON_ATTN"),
    "vllm-omni-1160-stage-prefix": dict(available_kv_cache_memory="100.43", kv_cache_size=2925232,
                                        max_concurrency="89.27"),
    "vllm-26646-qwen3-next-fp8": dict(kv_cache_size=90048, max_concurrency="1.66"),
    "arbor-103-nested-prefix": dict(model_loading="27.5185"),
    "club-3090-612-qwen3.6-35b-a3b-nvfp4-rtx5090": dict(available_kv_cache_memory="5.98", kv_cache_size=567978,
                                                        max_concurrency="4.33"),
    "file-qwen3-8b-a100-40gb": dict(release="0.19.1", model="Qwen/Qwen3-8B", max_model_len=40960,
                                    flash_attention_version=2, model_loading="15.27", cuda_graph_memory="2.35",
                                    available_kv_cache_memory="19.36", kv_cache_size=140960, max_concurrency="3.44"),
    "file-llama-3.1-8b-instruct-eager": dict(release="0.10.2", model="meta-llama/Llama-3.1-8B-Instruct",
                                             max_num_batched_tokens=2048, attention_backend="FLASH_ATTN",
                                             model_loading="14.9889", available_kv_cache_memory="85.79",
                                             kv_cache_size=702800, max_concurrency="5.36", gpu_blocks=43925,
                                             command_model="meta-llama/Llama-3.1-8B-Instruct"),
    "file-qwen3-14b-l40s": dict(model_loading="27.52", available_kv_cache_memory="11.57", kv_cache_size=75824,
                                max_concurrency="1.85", command_model="Qwen/Qwen3-14B"),
    # a log viewer's shortened header (a clock time and the level) and an engine line cut after its version
    "file-qwen3.5-9b-fp8-prefix-l40s": dict(release="0.18.0", model="Qwen/Qwen3.5-9B", kv_cache_dtype="fp8",
                                            mamba_cache_mode="align", block_size=1056, mamba_padding=0.76,
                                            attention_backend="FLASHINFER", available_kv_cache_memory="20.27",
                                            kv_cache_size=331584, max_concurrency="18.23"),
}


@pytest.mark.parametrize("slug", sorted(EXPECTED))
def test_what_each_log_says(slug):
    want = dict(EXPECTED[slug])
    log = _log(slug)
    assert len(log.starts) == want.pop("starts", 1)
    start = log.last
    if "release" in want:
        assert start.release == want.pop("release")
    if "model" in want:
        assert start.model == want.pop("model")
    if "command_model" in want:
        assert log.command is not None and log.command.model == want.pop("command_model")
    if "args" in want:
        assert dict(start.engine_args) == want.pop("args")
    for kind, value in want.items():
        f = start.first(kind)
        assert f is not None, kind
        assert (f.digits if isinstance(value, str) and f.digits is not None else f.value) == value, kind


def test_ranks_keep_their_process_and_the_first_rank_is_not_the_only_one():
    log = _log("file-qwen3-next-80b-a3b-instruct-tp2-h200")
    avail = log.last.all("available_kv_cache_memory")
    assert [f.process for f in avail] == ["Worker_TP1", "Worker_TP0"]
    assert [f.process for f in log.last.all("kv_cache_size")] == ["EngineCore_DP0", "EngineCore_DP0"]
    genesis = _log("genesis-vllm-patches-24-tp8-rtx3090")
    assert [f.process for f in genesis.last.all("block_size")] == ["Worker_TP0", "Worker_TP6", "Worker_TP7"]


def test_a_line_the_terminal_wrapped_is_read_whole():
    log = _log("intel-arc-b70-4-wrapped-error")
    error = log.last.first("start_error")
    assert error.parts["type"] == "ValueError"
    assert "(4.26 GiB KV cache is needed, which is larger than the available KV cache memory (4.25 GiB)" in error.value
    assert error.line == 18  # where it starts; the rest stood on line 19
    wrapped = next(line for line in logical_lines((LOGS / "intel-arc-b70-4-wrapped-error" / "start.log").read_text())
                   if line.number == 8)
    assert wrapped.message.endswith("in _initialize_kv_caches") and wrapped.physical == 2


def test_a_line_wrapped_by_hand_under_its_record_is_read_whole():
    log = _log("vllm-38887-gemma-4-e4b-rtx4090")
    f = log.last.first("forced_backend")
    assert f.text.endswith("global_head_dim=512). Forcing TRITON_ATTN backend to prevent mixed-backend numerical "
                           "divergence.")


def test_the_engines_config_line_gives_its_resolved_values():
    cfg = _log("file-qwen3-next-80b-a3b-instruct-tp2-h200").last.first("engine_config").value
    assert cfg["tensor_parallel_size"] == 2 and cfg["max_seq_len"] == 262144 and cfg["kv_cache_dtype"] == "auto"
    assert cfg["enable_prefix_caching"] is False and cfg["model"] == "/data/models/Qwen3-Next-80B-A3B-Instruct"


# --------------------------------------------------------------------------- the forms people paste
KV = "(EngineCore_DP0 pid=1805889) INFO 10-23 15:14:30 [kv_cache_utils.py:1028] GPU KV cache size: 973,760 tokens"


@pytest.mark.parametrize("line", [
    KV,
    "\x1b[1;36m(EngineCore_DP0 pid=1805889)\x1b[0;0m INFO 10-23 15:14:30 [kv_cache_utils.py:1028] GPU KV cache "
    "size: 973,760 tokens",
    "vllm-1  | " + KV,                                                     # docker compose
    "2026-05-01 19:59:06.913 | " + KV,                                     # docker compose logs -t
    "2026-05-01T19:59:06.913094871Z " + KV,                                # docker logs -t
    "[pod/vllm-qwen-7d9f/vllm] " + KV,                                     # kubectl logs --prefix
    "May 01 19:59:06 gpu-node-3 vllm[48211]: " + KV,                       # journald
    "> " + KV,                                                             # a Markdown quote
    "`" + KV + "`",                                                        # inline code
    "INFO [kv_cache_utils.py:1028] GPU KV cache size: 973,760 tokens",     # an excerpt without the process
    "GPU KV cache size: 973,760 tokens",                                   # the bare message
    "05:21:50 (EngineCore pid=75) INFO GPU KV cache size: 973,760 tokens",  # a log viewer's clock time and level
    "05:21:50 INFO GPU KV cache size: 973,760 tokens",
])
def test_the_prefixes_people_paste_are_taken_off(line):
    f = read(line).last.first("kv_cache_size")
    assert f.value == 973760 and f.text == "GPU KV cache size: 973,760 tokens" and f.line == 1


def test_the_0_34_line_states_both_figures():
    text = ("(EngineCore pid=9) INFO 09-18 22:23:42 [kv_cache_utils.py:1229] GPU KV cache size: 1,016,312 tokens, "
            "Maximum concurrency for 262,144 tokens per request: 3.88x")
    start = read(text).last
    assert start.first("kv_cache_size").value == 1016312
    conc = start.first("max_concurrency")
    assert conc.digits == "3.88" and conc.parts["max_model_len"] == 262144 and conc.line == 1


def test_a_level_word_inside_a_message_is_not_a_header():
    start = read("05:17:43 WARNING Mamba cache mode is set to 'align' for Qwen3_5ForConditionalGeneration by default "
                 "when prefix caching is enabled\nINFO GPU KV cache size: 1,024 tokens (INFO kept)").last
    assert start.first("mamba_cache_mode").value == "align"
    assert start.first("kv_cache_size").value == 1024


def test_the_engine_line_gives_its_release_without_its_config():
    start = read("(EngineCore pid=75) Initializing a V1 LLM engine (v0.18.0)\n"
                 "(EngineCore pid=75) INFO 03-01 05:21:50 [kv_cache_utils.py:1319] GPU KV cache size: 1,024 tokens").last
    assert start.release == "0.18.0" and start.first("engine_config").value == {}


def test_the_metrics_loggers_block_count_is_the_engines():
    line = ("(APIServer pid=387) INFO 09-21 21:38:32 [loggers.py:142] Engine 000: vllm cache_config_info with "
            "initialization after num_gpu_blocks is: 43925")
    f = read(line).last.first("gpu_blocks")
    assert (f.value, f.name, f.parts["from"]) == (43925, "GPU blocks", "metrics logger")


def test_the_vision_encoders_backend_is_not_the_decoders():
    start = read("(EngineCore pid=1) INFO 04-07 02:43:59 [cuda.py:390] Using backend AttentionBackendEnum.FLASH_ATTN "
                 "for vit attention\n(EngineCore pid=1) INFO 04-07 02:43:59 [cuda.py:334] Using TRITON_ATTN attention "
                 "backend out of potential backends: ['TRITON_ATTN'].").last
    assert [f.value for f in start.all("attention_backend")] == ["TRITON_ATTN"]


def test_a_paste_of_two_starts_is_two_starts_and_the_last_is_compared():
    log = _log("vllm-10517-llama-3.1-8b-rtx3090")
    assert [s.first("max_concurrency").parts["max_model_len"] for s in log.starts] == [20000, 29000]
    assert log.last.first("start_error").value.startswith("The model's max seq len (29000)")


def test_a_command_wrapped_with_backslashes_is_read_whole():
    log = _log("vllm-21348-qwen3-235b-a22b-fp8-4xh100")
    assert log.command.model == "/path/to/Qwen3-235B-A22B-FP8"
    assert log.command.words[1:3] == ("--tensor-parallel-size", "4")


def test_text_without_a_log_line_has_no_start():
    assert read("hello\nthis is not a log\n").starts == ()
    assert read("").starts == ()


@pytest.mark.parametrize("digits,low_gib,high_gib", [
    ("44.59", 44.585, 44.595), ("48.6", 48.595, 48.605), ("-0.81", -0.815, -0.805), ("14.9888", 14.98875, 14.98885)])
def test_a_printed_gib_figure_stands_for_an_interval_of_bytes(digits, low_gib, high_gib):
    low, high = gib_range(digits)
    assert str(round(low / 2**30, max(2, len(digits.split(".")[1])))) == str(float(digits))
    assert round((low - 1) / 2**30, max(2, len(digits.split(".")[1]))) != float(digits)
    assert round((high + 1) / 2**30, max(2, len(digits.split(".")[1]))) != float(digits)
    assert abs(low / 2**30 - low_gib) < 1e-6 and abs(high / 2**30 - high_gib) < 1e-6


def test_a_printed_dict_keeps_what_is_not_a_literal_as_its_text():
    args = read_dict("{'model': 'm', 'max_model_len': 1024, 'kv_transfer_config': KVTransferConfig(kv_role='kv_both'), "
                     "'x': -1}")
    assert args == {"model": "m", "max_model_len": 1024, "kv_transfer_config": "KVTransferConfig(kv_role='kv_both')",
                    "x": -1}
    assert read_dict("{'model': 'm', 'max_mod") is None
    start = read("INFO 04-03 17:24:25 [utils.py:233] non-default args: {'model': 'm', 'max_mod").last
    assert start.first("engine_args").parts["unread"].startswith("{'model'")


def test_the_bytes_of_every_logged_memory_figure_bracket_it():
    for slug in SLUGS:
        for f in _log(slug).logged:
            if f.kind == "available_kv_cache_memory":
                low, high = gib_range(f.digits)
                assert low <= float(f.digits) * 2**30 <= high + 1
                assert re.fullmatch(r"-?\d+(\.\d+)?", f.digits)
