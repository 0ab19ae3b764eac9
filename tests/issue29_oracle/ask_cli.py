#!/usr/bin/env python3
"""Ask the real vLLM 0.19.0 what ``vllm serve MODEL FLAGS...`` says before and at config time.

Run with the oracle venv's python (``cases.py cli`` does it)::

    $REF/venv19/bin/python tests/issue29_oracle/ask_cli.py CASES.json -o OUT.json \
        --extra-path $REF/tf523-overlay

A case is ``{"name", "item", "config_dir", "argv": [flag, value, ...]}``. Per case, as the
``serve`` command does it: vLLM's own parser (``make_arg_parser`` on a
``FlexibleArgumentParser``) parses ``[MODEL, *argv, --skip-tokenizer-init]``; when it refuses
(argparse exits), its message is the answer. Otherwise ``validate_parsed_serve_args``,
``AsyncEngineArgs.from_cli_args`` and ``create_engine_config(UsageContext.OPENAI_API_SERVER)``
run on the emulated H200 of ``../shared/oracle``, and the exception (if any) is recorded.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ORACLE = REPO.parent / "shared" / "oracle" / "run_oracle.py"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("cases")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--extra-path", action="append", default=[])
    ap.add_argument("--cases-root", default=str(HERE))
    ns = ap.parse_args(argv)
    cases = json.loads(Path(ns.cases).read_text())
    root = Path(ns.cases_root).resolve()
    tmp = tempfile.TemporaryDirectory(prefix="issue29-cli-")
    spec = importlib.util.spec_from_file_location("run_oracle19", ORACLE)
    ro = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ro)
    ro.setup_environment(types.SimpleNamespace(
        cache_dir=tmp.name, platform="cuda", gpu_name="NVIDIA H200", capability="9.0",
        gpu_mem_mib=143771, num_gpus=8, extra_path=ns.extra_path))

    import vllm
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.usage.usage_lib import UsageContext
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    results: list[dict[str, Any]] = []
    for case in cases:
        model = str((root / case["config_dir"]).resolve())
        res: dict[str, Any] = {"name": case["name"], "item": case.get("item"),
                               "config_dir": case["config_dir"], "argv": case["argv"]}
        parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                args = parser.parse_args([model, *case["argv"], "--skip-tokenizer-init"])
        except SystemExit as e:
            res.update(step="parse", status="refused", exit_code=e.code,
                       message=err.getvalue().strip().splitlines()[-1] if err.getvalue() else "")
            results.append(res)
            print(f"[ask_cli] {case['name']}: refused by the parser", file=sys.stderr)
            continue
        args.model = model
        step = "validate_parsed_serve_args"
        try:
            validate_parsed_serve_args(args)
            step = "from_cli_args"
            engine_args = AsyncEngineArgs.from_cli_args(args)
            step = "create_engine_config"
            vc = engine_args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
            res.update(step="create_engine_config", status="resolved",
                       block_size=vc.cache_config.block_size,
                       disable_hybrid_kv_cache_manager=vc.scheduler_config.disable_hybrid_kv_cache_manager)
        except Exception as e:  # noqa: BLE001 - vLLM's answer, recorded
            res.update(step=step, status="error", error=ro.describe_error(e))
        results.append(res)
        print(f"[ask_cli] {case['name']}: {res['status']} at {res['step']}", file=sys.stderr)
    text = json.dumps({"vllm_version": vllm.__version__,
                       "transformers_version": __import__("transformers").__version__,
                       "results": results}, indent=1, default=str)
    for a, b in ((str(root) + "/", ""), (str(REPO.parent) + "/", ""), (tmp.name + "/", "$CACHE/")):
        text = text.replace(a, b)
    Path(ns.output).write_text(text + "\n")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
