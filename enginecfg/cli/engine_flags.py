"""vLLM's engine arguments as command-line flags, built from the one table
:data:`enginecfg.pipeline.engine_args.ENGINE_ARGS`, for every command that takes them.

Values are read as ``vllm serve`` reads them (``--max-model-len 32k`` is 32000, ``32K``
32768); a flag left out is absent from :func:`engine_args` (vLLM decides).
"""

from __future__ import annotations

import argparse
from typing import Any

from enginecfg.pipeline.engine_args import BOOL, ENGINE_ARGS, EngineArg, parse_flag_text

__all__ = ["add_engine_flags", "engine_args"]


def _flag_type(arg: EngineArg):
    flag = arg.flags[0]

    def parse(text: str) -> Any:
        try:
            return parse_flag_text(arg, text)
        except ValueError as exc:
            what = "an integer (k/m/g/t and K/M/G/T suffixes allowed)" if arg.parser and arg.parser != "int" \
                else "an integer"
            detail = f": {exc}" if "suffix" in str(exc) else ""
            raise argparse.ArgumentTypeError(f"{flag} needs {what}, got {text!r}{detail}") from None
    parse.__name__ = arg.kind
    return parse


def add_engine_flags(p: argparse.ArgumentParser) -> None:
    """Every engine argument as its ``vllm serve`` flag, and ``--revision``."""
    g = p.add_argument_group("engine arguments (vLLM's names; unset: as vLLM decides)")
    for arg in ENGINE_ARGS.values():
        help_text = arg.help
        if arg.choices:
            help_text += " Choices: " + ", ".join(arg.choices) + "."
        if arg.kind == BOOL:
            g.add_argument(*arg.flags, dest=arg.name, action=argparse.BooleanOptionalAction, default=None,
                           help=help_text)
        elif arg.kind == "int":
            g.add_argument(*arg.flags, dest=arg.name, type=_flag_type(arg), default=None, metavar="N",
                           help=help_text)
        else:
            # choices are checked by the loader, so a bad value is a recorded 'invalid' run
            metavar = "{" + ",".join(arg.choices) + "}" if arg.choices else "NAME"
            g.add_argument(*arg.flags, dest=arg.name, default=None, metavar=metavar, help=help_text)
    p.add_argument("--revision", default=None, metavar="REV",
                   help="a branch, tag or commit of the Hugging Face repo (with a repo id only)")


def engine_args(ns: argparse.Namespace) -> dict[str, Any]:
    """The engine arguments given on the command line (those left out are absent)."""
    return {k: getattr(ns, k) for k in ENGINE_ARGS if getattr(ns, k, None) is not None}
