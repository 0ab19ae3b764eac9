"""The equivalent ``vllm serve`` command of a run: it pins what was resolved, keeps the
caller's other flags, and pins nothing vLLM would decide again.

Every fixture case (tests/data/vllm-0.19.0/cases.json) that vLLM resolved is resolved, its
serve command read back as ``enginecfg run`` reads a pasted command line, and resolved again:
the config must be the same, and no stage may change a field the command pinned."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from support import CONFIGS, REPO

from enginecfg import Pipeline
from enginecfg.cli.app import _prepare, build_parser
from enginecfg.cli.engine_flags import engine_args, memory_options
from enginecfg.commands.serve import serve_command
from enginecfg.pipeline.engine_args import ENGINE_ARGS

CASES = [c for c in json.loads((REPO / "tests" / "data" / "vllm-0.19.0" / "cases.json").read_text())["cases"]
         if c["expected"]["status"] == "resolved"]
ROOT = CONFIGS.parent
PARSER = build_parser()
MAMBA_FLAGS = {"--mamba-cache-mode", "--mamba-block-size", "--mamba-ssm-cache-dtype", "--mamba-cache-dtype"}


def _read_back(tokens: list[str]):
    """The tokens as ``enginecfg run`` reads a pasted ``vllm serve`` line: (namespace, the
    vllm serve options set aside)."""
    aside: list[str] = []
    with contextlib.redirect_stderr(io.StringIO()):
        ns = PARSER.parse_args(_prepare(PARSER, ["run", *tokens], aside))
    return ns, aside


def _config(result) -> dict:
    doc = result.to_dict()["config"]
    doc["cache_config"].pop("user_specified_block_size")  # the command gives what vLLM chose
    return doc


def _printed(result) -> list[str]:
    """The command as ``run`` prints it (wrapped, shell-quoted), read back as a shell reads it."""
    import shlex

    from enginecfg.cli.report import command_lines

    return shlex.split(command_lines(serve_command(result)).replace("\\\n", " "))


def _round_trip(pipeline, case_args: dict, result):
    tokens = _printed(result)
    assert tokens == serve_command(result)
    assert tokens[:3] == ["vllm", "serve", str(result.config.model)]
    ns, _ = _read_back(tokens)
    again = pipeline.resolve(ns.paths[0], **engine_args(ns))
    pinned = {ENGINE_ARGS[n].config_field for n in engine_args(ns) if n not in case_args}
    return tokens, again, pinned


def test_every_fixture_case_resolves_again_to_the_same_config():
    pipeline = Pipeline(gpu_validation="off")
    assert len(CASES) > 400
    for case in CASES:
        result = pipeline.resolve(ROOT / case["config"], **case["engine_args"])
        tokens, again, pinned = _round_trip(pipeline, case["engine_args"], result)
        assert _config(again) == _config(result), (case["name"], tokens)
        # vLLM decides nothing the command pinned a second time
        assert not ({c.field for c in again.changes} & pinned), (case["name"], tokens)
        info = result.config.model_config.arch_info
        if not (info is not None and info.has_mamba_state):
            assert not (MAMBA_FLAGS & set(tokens)) or any(k.startswith("mamba") for k in case["engine_args"]), \
                (case["name"], tokens)


def test_after_a_skipped_stage_nothing_vllm_would_decide_again_is_pinned():
    """With the hybrid alignment left out the block stays 16, which vLLM would grow again: the
    command leaves the block size to vLLM, and resolving it with every stage pins nothing a
    stage then changes."""
    skipped = Pipeline(gpu_validation="off", disable=["hybrid-alignment", "mamba-cache-mode"])
    full = Pipeline(gpu_validation="off")
    hybrids = [c for c in CASES if not c["engine_args"] and "default" in c["name"]]
    checked = 0
    for case in hybrids:
        result = skipped.resolve(ROOT / case["config"], **case["engine_args"])
        if not result.config.model_config.is_hybrid:
            continue
        tokens = serve_command(result)
        assert "--block-size" not in tokens and "--mamba-cache-mode" not in tokens, (case["name"], tokens)
        ns, _ = _read_back(tokens)
        again = full.resolve(ns.paths[0], **engine_args(ns))
        pinned = {ENGINE_ARGS[n].config_field for n in engine_args(ns)}
        assert not ({c.field for c in again.changes} & pinned), (case["name"], tokens)
        checked += 1
    assert checked >= 8


def test_pooling_is_pinned_and_mamba_settings_only_where_there_is_mamba():
    pipeline = Pipeline(gpu_validation="off")
    embed = serve_command(pipeline.resolve(CONFIGS / "nemotron-vl-embed-avg"))
    assert embed[embed.index("--runner") + 1] == "pooling"
    assert json.loads(embed[embed.index("--pooler-config") + 1])["seq_pooling_type"] == "MEAN"
    gemma = serve_command(pipeline.resolve(CONFIGS / "gemma-4-26b-a4b"))
    assert gemma[gemma.index("--attention-backend") + 1] == "TRITON_ATTN"
    assert not (MAMBA_FLAGS & set(gemma))
    qwen = serve_command(pipeline.resolve(CONFIGS / "qwen3.5-27b", enable_prefix_caching=True))
    assert qwen[qwen.index("--mamba-cache-mode") + 1] == "align" and "--mamba-block-size" not in qwen
    assert qwen[qwen.index("--block-size") + 1] == "784"


def test_the_callers_other_flags_and_memory_flags_are_kept():
    line = ["vllm", "serve", str(CONFIGS / "qwen3.5-27b"), "--port", "8001", "--trust-remote-code",
            "--gpu-memory-utilization", "0.5", "--num-gpu-blocks-override", "900", "--max-model-len", "-1"]
    ns, aside = _read_back(line)
    assert aside == ["--port", "8001"]  # --trust-remote-code is an engine argument
    result = Pipeline(gpu_validation="off", impact=memory_options(ns)).resolve(ns.paths[0], **engine_args(ns))
    tokens = serve_command(result, memory=memory_options(ns), extra=aside)
    text = " ".join(tokens)
    for kept in ("--port 8001", "--trust-remote-code", "--gpu-memory-utilization 0.5",
                 "--num-gpu-blocks-override 900", "--max-model-len -1"):
        assert kept in text, kept
    ns2, aside2 = _read_back(tokens)
    assert memory_options(ns2) == memory_options(ns) and aside2 == aside


@pytest.mark.parametrize("columns", [80, 100])
def test_the_printed_command_reads_back(columns, monkeypatch, capsys):
    from enginecfg.cli.report import command_lines

    monkeypatch.setenv("COLUMNS", str(columns))
    result = Pipeline(gpu_validation="off").resolve(CONFIGS / "nemotron-vl-embed-avg")
    printed = command_lines(serve_command(result))
    import shlex

    assert shlex.split(printed.replace("\\\n", " ")) == serve_command(result)
    # A line may pass the width only where it holds one word that cannot be broken (a long
    # model path in a deep checkout); a flag and its value are never split.
    for line in printed.splitlines():
        words = shlex.split(line.removesuffix("\\"))
        assert len(line) <= columns or len(words) == 1, line


def test_a_path_longer_than_the_width_gets_a_line_of_its_own(monkeypatch):
    from enginecfg.cli.report import command_lines

    monkeypatch.setenv("COLUMNS", "80")
    path = "/srv/" + "deep/" * 20 + "model"
    printed = command_lines(["vllm", "serve", path, "--dtype", "bfloat16", "--max-model-len", "8192"])
    lines = printed.splitlines()
    assert lines[0].split() == ["vllm", "serve", "\\"]
    assert lines[1].strip() == path + " \\"
    assert all(len(line) <= 80 for line in lines if path not in line)
