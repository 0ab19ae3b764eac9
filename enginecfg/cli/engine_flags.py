"""vLLM's engine arguments as command-line flags, built from the one table
:data:`enginecfg.pipeline.engine_args.ENGINE_ARGS`, for every command that takes them.

Values are read as ``vllm serve`` reads them (``--max-model-len 32k`` is 32000, ``32K``
32768); a flag left out is absent from :func:`engine_args` (vLLM decides).  A value outside
a flag's choices is not refused by the parser: the run refuses it at the step where vLLM's
config checks it (and records the run), as a Python caller's would be.  A pasted ``vllm serve``
line is read by vLLM's own parser first, which refuses such a value before anything is read:
:func:`vllm_serve_choice_error` gives its answer.
"""

from __future__ import annotations

import argparse
from typing import Any

from enginecfg.pipeline.engine_args import BOOL, ENGINE_ARGS, EngineArg, parse_flag_text

__all__ = ["add_engine_flags", "engine_args", "vllm_serve_choice_error", "add_memory_flags", "memory_options",
           "print_gpus"]


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


def _as_parsed(option: str, type_name: str | None, text: str) -> Any:
    """*text* turned into what vLLM's parser compares with the option's choices."""
    if type_name == "int":
        return int(text)
    if option == "--moe-backend":  # vLLM's parser folds case and dashes for this one
        return text.lower().replace("-", "_")
    return text


def vllm_serve_choice_error(tokens: list[str]) -> str | None:
    """The first value of a pasted ``vllm serve`` line outside its option's choices, as vLLM
    0.19.0's parser words the refusal (``argument --dtype: invalid choice: 'int8' (choose from
    ...)``), or None.  vLLM's parser refuses it before it reads anything; options are spelt as
    vLLM reads them (``--kv_cache_dtype``, ``--dtype=x``)."""
    from enginecfg.cli.vllm_serve_flags import VLLM_SERVE_CHOICES, VLLM_SERVE_OPTIONS

    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if tok == "--":
            return None
        if not tok.startswith("--"):
            continue
        name, eq, value = tok.partition("=")
        name = "--" + name[2:].replace("_", "-")
        nargs = VLLM_SERVE_OPTIONS.get(name)
        values = [value] if eq else []
        if not eq and nargs == 1 and i < len(tokens):
            values, i = [tokens[i]], i + 1
        elif not eq and nargs in ("?", "*", "+"):
            while i < len(tokens) and not tokens[i].startswith("-"):
                values.append(tokens[i])
                i += 1
        spec = VLLM_SERVE_CHOICES.get(name)
        if spec is None:
            continue
        shown, choices, type_name = spec
        allowed = tuple(_as_parsed(name, type_name, c) for c in choices)
        for text in values:
            try:
                got = _as_parsed(name, type_name, text)
            except ValueError:
                return f"argument {shown}: invalid {type_name} value: {text!r}"
            if got not in allowed:
                return (f"argument {shown}: invalid choice: {got!r} (choose from "
                        f"{', '.join(map(repr, allowed))})")
    return None


# -- the memory the figures assume ----------------------------------------------------------------

def _bytes(text: str) -> int:
    """``--kv-cache-memory-bytes``: read as vLLM reads it (``16G`` = 16 GiB, ``20g`` = 20e9)."""
    from enginecfg.pipeline.engine_args import human_readable_int

    try:
        return human_readable_int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"--kv-cache-memory-bytes needs a number of bytes (k/m/g/t and K/M/G/T suffixes allowed), "
            f"got {text!r}: {exc}") from None


def _positive_float(flag: str):
    def parse(text: str) -> float:
        try:
            return float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} needs a number, got {text!r}") from None
    parse.__name__ = "number"
    return parse


def add_memory_flags(p: argparse.ArgumentParser) -> None:
    """vLLM's memory flags and the GPU the figures assume (the ``impact`` fact's options)."""
    g = p.add_argument_group("memory (what the KV-cache figures assume; vLLM's flags and meaning)")
    g.add_argument("--gpu", default=None, metavar="PRESET",
                   help="the GPU: a preset (H200, H100-80GB, B200, A100-40GB, L40S, ...; `--gpu help` or "
                        "`enginecfg gpus` lists them with their memory); default H200. Its memory sizes the "
                        "KV cache; its compute capability picks the attention backends at start-up")
    g.add_argument("--gpu-memory", dest="gpu_memory", type=_positive_float("--gpu-memory"), default=None,
                   metavar="GIB",
                   help="the card's memory in GiB as its driver reports it, instead of the preset's")
    g.add_argument("--gpu-memory-utilization", dest="gpu_memory_utilization",
                   type=_positive_float("--gpu-memory-utilization"), default=None, metavar="F",
                   help="vLLM's share of the GPU memory, > 0 and <= 1 (default 0.9)")
    g.add_argument("--kv-cache-memory-bytes", "--kv-cache-memory", dest="kv_cache_memory", type=_bytes,
                   default=None, metavar="BYTES",
                   help="KV-cache bytes per GPU (k/m/g/t and K/M/G/T suffixes allowed); vLLM then ignores "
                        "the utilization and the figures skip the weights estimate; 0: unset")
    g.add_argument("--num-gpu-blocks-override", dest="num_gpu_blocks_override", type=int, default=None,
                   metavar="N", help="KV-cache blocks, instead of the number the memory gives")


def memory_options(ns: argparse.Namespace) -> dict[str, Any]:
    """The memory flags given (those left out are absent: the defaults apply)."""
    names = {"gpu": "gpu", "gpu_memory": "gpu_memory_gib", "gpu_memory_utilization": "gpu_memory_utilization",
             "kv_cache_memory": "kv_cache_memory", "num_gpu_blocks_override": "num_gpu_blocks_override"}
    return {option: getattr(ns, attr) for attr, option in names.items() if getattr(ns, attr, None) is not None}


def print_gpus() -> None:
    """The GPU presets, with the memory each reports and its compute capability."""
    from enginecfg.cli.tables import paragraph, render
    from enginecfg.pipeline.models.gpus import DEFAULT_GPU, GPUS

    rows = [[g.name + (" *" if g is DEFAULT_GPU else ""), g.device_name, f"{g.memory_gib:,.2f}",
             g.capability_text, ", ".join(g.aliases)] for g in GPUS.values()]
    out = [render(["preset", "device", "memory GiB", "sm", "also"], rows, names=(0, 1, 2, 3),
                  title="GPU presets (--gpu PRESET; --gpu-memory GIB for another card; * the default):")]
    measured = [g for g in GPUS.values() if g.measured]
    for g in measured:
        out.append(paragraph(f"{g.name}: {g.memory_bytes:,} bytes, {g.measured}.", hanging="  "))
    out.append(paragraph("The others: the total nvidia-smi lists for the card, a little more than CUDA "
                         "reports (the driver keeps some); --gpu-memory gives the exact figure.", hanging="  "))
    print("\n".join(out))
