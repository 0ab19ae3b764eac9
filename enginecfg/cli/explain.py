"""``enginecfg explain`` and ``enginecfg plan``: the command lines of
:func:`enginecfg.commands.explain` and :func:`enginecfg.commands.plan`.

They parse the flags, call the library function and print its result: a report (the memory
budget, the KV-cache groups, the capacity and concurrency, the findings with their causes) or
a table of the grid, or with ``--json`` the result's ``to_dict()``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from enginecfg.cli.engine_flags import add_engine_flags, add_memory_flags, engine_args, memory_options
from enginecfg.pipeline.errors import InvalidInputError

__all__ = ["register", "print_explanation", "print_plan"]

_GIB = 2**30


def _mib(n: int) -> str:
    """Bytes in MiB, or in KiB below one MiB."""
    if n < 2**20:
        return f"{n / 2**10:,.1f} KiB"
    return f"{n / 2**20:,.1f} MiB"


def _fmt_conc(x: float | None) -> str:
    return "-" if x is None else f"{x:,.2f}x"


_SHORT = {"tensor_parallel_size": "tp", "kv_cache_dtype": "kv dtype", "block_size": "block size",
          "mamba_cache_mode": "mamba mode"}


# --------------------------------------------------------------------------- printing
def print_explanation(e) -> None:
    """The report of an :class:`~enginecfg.commands.Explanation`."""
    from enginecfg.cli.tables import paragraph, render
    from enginecfg.pipeline.models.capacity import Impact

    imp = e.impact
    out = [f"{e.model}  (run {e.run_id[:12]})"]
    if not isinstance(imp, Impact):
        error = getattr(imp, "error", None) or "the impact stage recorded no figures"
        out.append(paragraph(f"KV-cache figures unavailable: {error}"))
        print("\n".join(out))
        return
    mem = imp.memory
    gpu = mem.gpu_memory_bytes / _GIB
    if mem.source == "estimate":
        w = mem.weights
        out.append(paragraph(
            f"Memory: {gpu:g} GiB GPU x {mem.gpu_memory_utilization:g} utilization - weights "
            f"{w.bytes_per_gpu / _GIB:.2f} GiB per GPU (estimated) = "
            f"{mem.kv_cache_memory / _GIB:.2f} GiB for the KV cache."))
        out.append(paragraph("Weights basis: " + "; ".join(w.basis) + ".", indent="  ", hanging="  "))
    else:
        out.append(f"Memory: {mem.kv_cache_memory / _GIB:.2f} GiB for the KV cache (--kv-cache-memory).")
    if not imp.groups:
        out.append(imp.note or "No KV cache.")
    else:
        rows = []
        for i, g in enumerate(imp.groups):
            kind = g.kind + (f" ({g.sliding_window})" if g.sliding_window else "")
            per_tok = f"{g.bytes_per_token:,}" if g.bytes_per_token is not None else \
                f"state {_mib(g.bytes_per_request)} per request"
            rows.append([i, kind, g.num_layers, f"{g.block_size:,}", _mib(g.page_size_bytes), per_tok])
        out.append(render(["#", "kind", "layers", "tokens/block", "page size", "bytes/token of context"],
                          rows, names=(0, 1), title="KV-cache groups (one block table each):"))
        pad = imp.padding
        if pad is not None and pad.mamba is not None:
            m = pad.mamba
            out.append(f"Mamba padding: {m.bytes:,} bytes per page ({m.percent:.2f}% of the state).")
        if pad is not None and pad.layers:
            out.append(f"Layer padding: {pad.layers} empty slots ({pad.layer_percent:.2f}%).")
        rnd = imp.block_rounding
        out.append(f"Block rounding: {rnd.bytes:,} bytes unused ({rnd.percent:.2f}%).")
        out.append(paragraph(f"KV cache: {imp.num_blocks:,} blocks = {imp.kv_tokens:,} tokens "
                             f"(vLLM: \"GPU KV cache size: {imp.kv_tokens:,} tokens\")."))
        conc = [[f"{n:,}", _fmt_conc(x)] for n, x in imp.concurrency.items()]
        conc.append([f"{imp.max_model_len:,} (max_model_len)", _fmt_conc(imp.max_concurrency)])
        out.append(render(["context", "requests"], conc, names=(0, 1), title="Concurrent requests:"))
        out.append(f"Largest max_model_len that fits: {imp.max_model_len_fits:,}.")
    if e.findings:
        out.append("Findings:")
        for f in e.findings:
            cause = f.caused_by
            if cause is None:
                why = ""
            elif hasattr(cause, "stage"):
                why = (f" [stage {cause.stage}: {cause.field} {json.dumps(cause.old)} -> "
                       f"{json.dumps(cause.new)}]")
            else:
                why = f" [engine argument {cause.engine_argument} {cause.value}]"
            out.append(paragraph(f"- {f.id}: {f.message}{why}", hanging="  "))
    else:
        out.append("No findings.")
    print("\n".join(out))


def print_plan(p) -> None:
    """The table of a :class:`~enginecfg.commands.Plan`."""
    from enginecfg.cli.tables import render

    names = list(p.grid)
    marks: dict[int, list[str]] = {}
    for objective, i in p.best.items():
        if i is not None:
            marks.setdefault(i, []).append(objective)
    rows = []
    for i, r in enumerate(p.rows):
        cells = [str(r.setting.get(n, "default")) for n in names]
        if not r.ok:
            rows.append(cells + ["error: " + r.error, "", "", "", "", ""])
            continue
        imp = r.impact
        rows.append(cells + [f"{r.block_size:,}", f"{imp.kv_tokens:,}", _fmt_conc(r.concurrency),
                             _fmt_conc(imp.max_concurrency), f"{imp.max_model_len_fits:,}",
                             ", ".join(marks.get(i, []))])
    title = (f"{p.model}: KV cache over the grid ({p.memory.card.name}, {p.memory.card.memory_gib:.2f} GiB, "
             f"utilization {p.memory.gpu_memory_utilization:g}):")
    columns = [_SHORT.get(n, n) for n in names] + [
        "tokens/block", "KV tokens", f"conc@{p.context:,}", "conc@max_len", "max len fits", "best for"]
    print(render(columns, rows, names=tuple(range(len(names) + 5)), title=title))


# --------------------------------------------------------------------------- commands
def _split(text: str | None, flag: str, kind=str) -> list[Any]:
    """A comma-separated flag value as a list (``[None]``: the flag was not given)."""
    if text is None:
        return [None]
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise InvalidInputError(f"invalid {flag}: {text!r} has an empty entry; allowed: a "
                                    f"comma-separated list", field=flag)
        if kind is int:
            try:
                out.append(int(part))
            except ValueError:
                raise InvalidInputError(f"invalid {flag}: {part!r} is not an integer; allowed: a "
                                        f"comma-separated list of integers", field=flag) from None
        else:
            out.append(part)
    return out


def register(sub) -> None:
    ex = sub.add_parser("explain", help="what a setting costs in KV cache, and why")
    ex.add_argument("path", help="a model folder holding config.json, a config.json file, or a Hugging "
                                 "Face repo id (org/name)")
    add_engine_flags(ex)
    add_memory_flags(ex)
    ex.add_argument("--json", action="store_true", help="print the figures and findings as JSON")
    ex.set_defaults(func=_cmd_explain)

    pl = sub.add_parser("plan", help="KV-cache figures side by side over a grid of settings")
    pl.add_argument("path", help="a model folder holding config.json, a config.json file, or a Hugging "
                                 "Face repo id (org/name)")
    pl.add_argument("--revision", default=None, metavar="REV",
                    help="a branch, tag or commit of the Hugging Face repo (with a repo id only)")
    pl.add_argument("--tp", default="1", help="tensor-parallel sizes, e.g. 1,2,4,8")
    pl.add_argument("--kv-cache-dtype", dest="kv_dtypes", default=None, help="e.g. auto,fp8")
    pl.add_argument("--block-size", dest="block_sizes", default=None, help="e.g. 16,32")
    pl.add_argument("--mamba-cache-mode", dest="mamba_modes", default=None, help="e.g. none,align,all")
    pl.add_argument("--enable-prefix-caching", dest="enable_prefix_caching",
                    action=argparse.BooleanOptionalAction, default=None)
    pl.add_argument("--max-model-len", dest="max_model_len", type=int, default=None)
    pl.add_argument("--context", type=int, default=8192,
                    help="context length of the concurrency objective (default 8192)")
    add_memory_flags(pl)
    pl.add_argument("--json", action="store_true")
    pl.set_defaults(func=_cmd_plan)


def _cmd_explain(ns: argparse.Namespace) -> int:
    from enginecfg.commands import explain

    e = explain(ns.path, memory=memory_options(ns), revision=ns.revision, **engine_args(ns))
    if ns.json:
        sys.stdout.write(json.dumps(e.to_dict(), indent=2, default=str) + "\n")
    else:
        print_explanation(e)
    return 0


def _cmd_plan(ns: argparse.Namespace) -> int:
    from enginecfg.commands import plan

    grid = {"tensor_parallel_size": _split(ns.tp, "--tp", int),
            "kv_cache_dtype": _split(ns.kv_dtypes, "--kv-cache-dtype"),
            "block_size": _split(ns.block_sizes, "--block-size", int),
            "mamba_cache_mode": _split(ns.mamba_modes, "--mamba-cache-mode")}
    grid = {k: v for k, v in grid.items() if v != [None]}
    base = {k: getattr(ns, k) for k in ("enable_prefix_caching", "max_model_len")
            if getattr(ns, k) is not None}
    p = plan(ns.path, grid, memory=memory_options(ns), context=ns.context, revision=ns.revision, **base)
    if ns.json:
        sys.stdout.write(json.dumps(p.to_dict(), indent=2, default=str) + "\n")
    else:
        print_plan(p)
    return 0
