"""The option table of ``vllm serve`` per vLLM release, for enginecfg's command line and tests.

Two steps per release::

    # 1. with the oracle's Python (a venv holding that vLLM, and the oracle's platform
    #    environment as run_oracle.py sets it up; vLLM logs to stdout, hence a file name)
    $ORACLE_PY tools/dump_vllm_serve_flags.py dump tests/data/vllm_serve_flags.json
    # 2. with any Python: the table enginecfg reads at run time, as what it changes on the
    #    table of the release before it (the first one whole)
    python tools/dump_vllm_serve_flags.py table tests/data/vllm_serve_flags.json \
        pipeline/releases/options/0.19.0.json
    python tools/dump_vllm_serve_flags.py table tests/data/vllm-0.20.0/vllm_serve_flags.json \
        pipeline/releases/options/0.20.0.json tests/data/vllm_serve_flags.json

vLLM 0.19.0 (the files above) was dumped with the 0.19 oracle's venv.  vLLM 0.34.0 was dumped
with the 0.34 oracle's venv, the oracle's emulated H200 set up first by ``dump-oracle``, which
imports ``setup_environment`` from ``shared/oracle34/run_oracle34.py`` (read-only) and then
dumps as ``dump`` does::

    $REF/venv34/bin/python tools/dump_vllm_serve_flags.py dump-oracle ../shared/oracle34 \
        tests/data/vllm_serve_flags_034.json

The tables live in the release room as ``pipeline/releases/options/X.Y.Z.json``, composed by
``pipeline/releases/options.py`` (a release without one reads with the nearest earlier
table): 0.19.0 whole, then 0.20.0, 0.24.0, 0.28.0, 0.32.0 and 0.34.0, each on the one before,
from ``tests/data/vllm-X.Y.Z/vllm_serve_flags.json`` (0.34.0: ``tests/data/vllm_serve_flags_034.json``).

0.34.0 moved ``make_arg_parser`` from ``vllm.entrypoints.openai.cli_args`` to
``vllm.entrypoints.common.cli_args``; ``dump`` takes it from where the release has it.

The dump holds, for every option: its option strings, destination, whether it takes a
value, whether it is a ``--x/--no-x`` pair, its choices and its type's name (not vLLM's
help texts: enginecfg writes its own).  Tests compare enginecfg's engine flags with it;
the table lets ``enginecfg run`` read a pasted ``vllm serve`` line.
"""

import json
import sys


def dump(path: str) -> None:
    import argparse

    import vllm
    import importlib

    # the module moved between releases: entrypoints/openai/, launchers/ (0.32.0), common/ (0.34.0)
    for where in ("openai", "launchers", "common"):
        try:
            make_arg_parser = importlib.import_module(
                f"vllm.entrypoints.{where}.cli_args").make_arg_parser
            break
        except ImportError:
            continue
    else:
        raise ImportError("this vLLM keeps make_arg_parser in none of entrypoints/"
                          "{openai,launchers,common}/cli_args.py")
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    out = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        # every string the parser takes for the action: 0.34.0's --enable-x/--disable-x pairs
        # keep their --no-enable-x/--no-disable-x spellings registered but hidden from help
        accepted = [o for o, a in parser._option_string_actions.items() if a is action]
        negative = getattr(action, "negative_option_strings", None)
        if negative is None and isinstance(action, argparse.BooleanOptionalAction):
            negative = [o for o in accepted if o.startswith("--no-")]
        out.append({
            "options": list(action.option_strings),
            "accepted": accepted,
            "negative": sorted(negative or []),
            "dest": action.dest,
            "takes_value": action.nargs != 0,
            "nargs": action.nargs if isinstance(action.nargs, (str, int, type(None))) else str(action.nargs),
            "boolean_optional": isinstance(action, argparse.BooleanOptionalAction),
            "choices": [str(c) for c in action.choices] if action.choices else None,
            "type": getattr(action.type, "__name__", None) if action.type else None,
        })
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"vllm": vllm.__version__, "options": out}, fh, indent=1)
        fh.write("\n")


def dump_oracle(oracle_dir: str, path: str) -> None:
    """``dump`` inside the environment of the oracle in *oracle_dir* (``run_oracle34.py``'s
    ``setup_environment``: the emulated H200 platform plugin, offline caches)."""
    import os
    import tempfile
    import types

    sys.path.insert(0, os.path.abspath(oracle_dir))
    import run_oracle34

    run_oracle34.setup_environment(types.SimpleNamespace(
        cache_dir=tempfile.mkdtemp(prefix="serve-flags-"), gpu_name="NVIDIA H200", capability="9.0",
        gpu_mem_mib=143771, num_gpus=8))
    dump(path)


def tables(data: dict) -> dict[str, dict]:
    """The three parts of a release's option table from its dump (see
    ``pipeline/releases/options.py``), each sorted by option string."""
    def nargs(a):
        if not a["takes_value"]:
            return 0
        return a["nargs"] if a["nargs"] in ("?", "*", "+") else 1
    options = {o: nargs(a) for a in data["options"] for o in a.get("accepted", a["options"])}
    choices = {o: ["/".join(a["options"]), list(a["choices"]), a["type"]]
               for a in data["options"] if a["choices"] for o in a["options"]}
    switches = {}
    for a in data["options"]:
        if a["boolean_optional"]:
            negative = a.get("negative", [x for x in a["options"] if x.startswith("--no-")])
            for o in a.get("accepted", a["options"]):
                switches[o] = [a["dest"], o not in negative]
    return {part: dict(sorted(d.items())) for part, d in
            (("options", options), ("choices", choices), ("switches", switches))}


def table(src: str, dst: str, base: str | None = None) -> None:
    """Write the option table of the release dumped in *src* to *dst*: whole, or (with *base*,
    the dump of the release before it) as what it sets and drops on that release's table."""
    data = json.load(open(src, encoding="utf-8"))
    now = tables(data)
    doc: dict = {"vllm": data["vllm"], "on": None}
    if base is None:
        for part, entries in now.items():
            doc[part] = {"set": entries, "drop": []}
    else:
        before_data = json.load(open(base, encoding="utf-8"))
        before = tables(before_data)
        doc["on"] = before_data["vllm"]
        for part, entries in now.items():
            doc[part] = {"set": {k: v for k, v in entries.items() if before[part].get(k) != v},
                         "drop": sorted(k for k in before[part] if k not in entries)}
    with open(dst, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, sort_keys=False)
        fh.write("\n")


if __name__ == "__main__":
    {"dump": dump, "dump-oracle": dump_oracle, "table": table}[sys.argv[1]](*sys.argv[2:])
