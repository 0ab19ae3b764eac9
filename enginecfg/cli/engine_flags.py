"""vLLM's engine arguments as command-line flags, built from the one table
:data:`enginecfg.pipeline.engine_args.ENGINE_ARGS`, for every command that takes them.

Values are read as ``vllm serve`` reads them (``--max-model-len 32k`` is 32000, ``32K``
32768); a flag left out is absent from :func:`engine_args` (vLLM decides).  A value outside
a flag's choices is not refused by the parser: the run refuses it at the step where vLLM's
config checks it (and records the run), as a Python caller's would be.  A pasted ``vllm serve``
line is read by vLLM's own parser first, the parser of the release the command runs
(:func:`serve_table`), which refuses such a value, or an option it does not have, before
anything is read: :func:`vllm_serve_refusal` gives its answer.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from enginecfg.pipeline.engine_args import BOOL, ENGINE_ARGS, EngineArg, parse_flag_text

__all__ = ["add_engine_flags", "engine_args", "vllm_serve_choice_error", "vllm_serve_unrecognized",
           "vllm_serve_refusal", "serve_table", "serve_tables", "add_memory_flags", "memory_options", "print_gpus"]


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
            metavar = "{" + ",".join(arg.choices) + "}" if arg.choices else (
                "JSON" if arg.parser == "json" else "NAME")
            g.add_argument(*arg.flags, dest=arg.name, default=None, metavar=metavar, help=help_text)
    p.add_argument("--revision", default=None, metavar="REV",
                   help="a branch, tag or commit of the Hugging Face repo (with a repo id only)")


def engine_args(ns: argparse.Namespace) -> dict[str, Any]:
    """The engine arguments given on the command line (those left out are absent)."""
    return {k: getattr(ns, k) for k in ENGINE_ARGS if getattr(ns, k, None) is not None}


#: options whose values vLLM's parser lower-cases, dashes turned to underscores, before it looks
#: them up (0.19.0: --moe-backend; 0.34.0 also --linear-backend, --sparse-indexer-topk-backend)
_FOLDED = frozenset({"--moe-backend", "--linear-backend", "--sparse-indexer-topk-backend"})


def _as_parsed(option: str, type_name: str | None, text: str) -> Any:
    """*text* turned into what vLLM's parser compares with the option's choices."""
    if type_name == "int":
        return int(text)
    if option in _FOLDED:  # vLLM's parser folds case and dashes for these
        return text.lower().replace("-", "_")
    return text


def serve_table(release: str | None = None):
    """The option table of *release*'s ``vllm serve`` (a generated module: ``VLLM_VERSION``,
    ``VLLM_SERVE_OPTIONS``, ``VLLM_SERVE_CHOICES``, ``VLLM_SERVE_SWITCHES``;
    :meth:`Release.flag_table`: a release without a table of its own reads with the nearest
    earlier one); None, or a release not spoken for, gives the default release's (the run then
    refuses an unknown release)."""
    from enginecfg.pipeline import releases

    return (releases.get(release) if releases.known(release) else releases.first()).flag_table()


def serve_tables():
    """Every table a release spoken for reads with, oldest first."""
    from enginecfg.pipeline import releases

    return tuple({id(t): t for t in (r.flag_table() for r in releases.all_releases())}.values())


def _options(tokens: list[str], table) -> list[tuple[str, list[str], bool]]:
    """The options of a pasted line as vLLM's parser splits them: (name as the parser spells it,
    the values it takes, whether the name is an option of *table*).  An option *table* lacks takes
    the values another release's parser gives it (what follows it is then left over too)."""
    out: list[tuple[str, list[str], bool]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if tok == "--":
            break
        if not tok.startswith("--"):
            continue
        name, eq, value = tok.partition("=")
        name = "--" + name[2:].replace("_", "-")
        known = name in table.VLLM_SERVE_OPTIONS
        nargs = table.VLLM_SERVE_OPTIONS.get(name)
        if nargs is None:
            nargs = next((t.VLLM_SERVE_OPTIONS[name] for t in serve_tables() if name in t.VLLM_SERVE_OPTIONS),
                         None)
        values = [value] if eq else []
        if not eq and nargs == 1 and i < len(tokens):
            values, i = [tokens[i]], i + 1
        elif not eq and nargs in ("?", "*", "+"):
            while i < len(tokens) and not tokens[i].startswith("-"):
                values.append(tokens[i])
                i += 1
        out.append((name + ("=" + value if eq else ""), values, known))
    return out


def vllm_serve_choice_error(tokens: list[str], release: str | None = None) -> str | None:
    """The first value of a pasted ``vllm serve`` line outside its option's choices, as the
    parser of vLLM *release* (default: the default release) words the refusal (``argument
    --dtype: invalid choice: 'int8' (choose from ...)``), or None.  vLLM's parser refuses it
    before it reads anything; options are spelt as vLLM reads them (``--kv_cache_dtype``,
    ``--dtype=x``)."""
    table = serve_table(release)
    for name, values, known in _options(tokens, table):
        name = name.partition("=")[0]
        spec = table.VLLM_SERVE_CHOICES.get(name) if known else None
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


def vllm_serve_unrecognized(tokens: list[str], release: str | None = None) -> str | None:
    """The options of a pasted ``vllm serve`` line that another vLLM release's parser has but
    *release*'s has not (0.34.0 dropped ``--calculate-kv-scales``), with their values, as that
    parser refuses them once it has read the rest (``unrecognized arguments: ...``), or None.
    enginecfg's own options (``--json``, ``--gpu``) are no release's and never named."""
    table = serve_table(release)
    left = [" ".join([name, *values]) for name, values, known in _options(tokens, table)
            if not known and any(name.partition("=")[0] in t.VLLM_SERVE_OPTIONS for t in serve_tables())]
    return f"unrecognized arguments: {' '.join(left)}" if left else None


def vllm_serve_refusal(tokens: list[str], release: str | None = None) -> str | None:
    """What vLLM *release*'s parser answers to a pasted line it refuses, in its words (a value
    outside the choices first: the parser stops there; then the options it does not have), or
    None."""
    return vllm_serve_choice_error(tokens, release) or vllm_serve_unrecognized(tokens, release)


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
                        "the utilization and the figures skip the memory budget's estimate; 0: unset")
    g.add_argument("--num-gpu-blocks-override", dest="num_gpu_blocks_override", type=int, default=None,
                   metavar="N", help="KV-cache blocks, instead of the number the memory gives")
    g.add_argument("--enforce-eager", dest="enforce_eager", action="store_true", default=None,
                   help="vLLM's --enforce-eager: no CUDA graphs are captured, so the memory budget takes no "
                        "CUDA graph estimate (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS in the environment says "
                        "whether vLLM subtracts the estimate: on by default since rule K9a)")


#: vLLM's environment switch for its CUDA graph estimate, read from enginecfg's environment as
#: vLLM reads it from its own (0: off, any other integer: on)
ESTIMATE_CUDAGRAPHS_ENV = "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"


def memory_options(ns: argparse.Namespace) -> dict[str, Any]:
    """The memory flags given (those left out are absent: the defaults apply), and vLLM's
    ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` where the environment sets it."""
    import os

    names = {"gpu": "gpu", "gpu_memory": "gpu_memory_gib", "gpu_memory_utilization": "gpu_memory_utilization",
             "kv_cache_memory": "kv_cache_memory", "num_gpu_blocks_override": "num_gpu_blocks_override",
             "enforce_eager": "enforce_eager"}
    out = {option: getattr(ns, attr) for attr, option in names.items() if getattr(ns, attr, None) is not None}
    raw = os.environ.get(ESTIMATE_CUDAGRAPHS_ENV, "").strip()
    if raw and hasattr(ns, "gpu"):
        try:
            out["estimate_cudagraphs"] = bool(int(raw))
        except ValueError:
            sys.stderr.write(f"enginecfg: error: invalid {ESTIMATE_CUDAGRAPHS_ENV}: got {raw!r}; allowed: an "
                             "integer (0: off, else on), as vLLM reads it\n")
            raise SystemExit(2) from None
    return out


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
