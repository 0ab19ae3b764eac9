#!/usr/bin/env python3
"""Ask the real ``vllm serve`` parser of vLLM 0.34.0 what it says to a command line.

Run with the 0.34 oracle venv's python, from the repository root::

    $REF/venv34/bin/python tests/serve_parser_oracle/ask_parser.py \
        tests/serve_parser_oracle/cases.json -o tests/serve_parser_oracle/answers-034.json

The oracle's emulated H200 is set up first (``setup_environment`` of
``shared/oracle34/run_oracle34.py``, imported read-only). Per case (``{"name", "argv"}``, the
tokens after ``vllm serve``), the parser ``vllm serve`` builds (``make_arg_parser`` on a
``FlexibleArgumentParser(prog="vllm serve")``, as ``tools/dump_vllm_serve_flags.py`` reads it)
parses ``argv``; when argparse exits, the last line it wrote and its exit status are the answer,
else the parsed values of the destinations the case names in ``"show"``. Nothing after the
parser runs. The answers are committed; tests read them, never this script.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ORACLE34 = REPO.parent / "shared" / "oracle34"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases")
    ap.add_argument("-o", "--output", required=True)
    ns = ap.parse_args(argv)
    cases = json.loads(Path(ns.cases).read_text())
    sys.path.insert(0, str(ORACLE34))
    import run_oracle34

    run_oracle34.setup_environment(types.SimpleNamespace(
        cache_dir=tempfile.mkdtemp(prefix="serve-parser-"), gpu_name="NVIDIA H200", capability="9.0",
        gpu_mem_mib=143771, num_gpus=8))
    import vllm
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    out = []
    for case in cases:
        parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
        err = io.StringIO()
        res = {"name": case["name"], "argv": case["argv"]}
        try:
            with contextlib.redirect_stderr(err):
                args = parser.parse_args(case["argv"])
        except SystemExit as exc:
            lines = err.getvalue().strip().splitlines()
            res.update(status="refused", exit_code=exc.code, message=lines[-1] if lines else "")
        else:
            res.update(status="parsed", values={d: getattr(args, d, None) for d in case.get("show", [])})
        out.append(res)
        print(f"[ask_parser] {case['name']}: {res['status']}", file=sys.stderr)
    Path(ns.output).write_text(json.dumps({"vllm": vllm.__version__, "cases": out}, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
