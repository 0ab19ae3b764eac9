"""``enginecfg explain`` and ``enginecfg plan``: the command lines of
:func:`enginecfg.commands.explain` and :func:`enginecfg.commands.plan`.

They parse the flags, call the library function and print its result: a report (the memory
budget, the KV-cache groups, the capacity and concurrency, whether vLLM would start, the
findings with their causes) or a table of the grid, or with ``--json`` the result's
``to_dict()``; ``--plot FILE.png|.svg`` draws the concurrency curves (:mod:`.plot`).

``explain`` behaves like ``run`` where they overlap: it records its run in the audit store
(``--no-audit``, ``--db``, ``--actor``), takes a pasted ``vllm serve`` line, and with
``--require-start`` exits 1 when vLLM would not start.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from enginecfg.cli.engine_flags import add_engine_flags, add_memory_flags, engine_args, memory_options
from enginecfg.cli.numbers import concurrency as _fmt_conc
from enginecfg.pipeline.errors import InvalidInputError

__all__ = ["register", "print_explanation", "print_plan"]

_GIB = 2**30


def _mib(n: int) -> str:
    """Bytes in MiB, or in KiB below one MiB."""
    if n < 2**20:
        return f"{n / 2**10:,.1f} KiB"
    return f"{n / 2**20:,.1f} MiB"


#: short column names of the grid axes (two lines when the table must be narrow)
_SHORT = {"vllm_version": "vllm", "tensor_parallel_size": "tp", "kv_cache_dtype": "kv dtype", "block_size": "block size",
          "mamba_cache_mode": "mamba mode", "max_model_len": "max len", "gpu": "gpu",
          "gpu_memory_utilization": "util", "enable_prefix_caching": "prefix cache"}
#: the marks of the objectives when the table is narrow (a legend follows)
_MARKS = {"concurrency": "c", "context": "x", "granularity": "g"}


# --------------------------------------------------------------------------- printing
def _gib_range(low: int, high: int) -> str:
    return f"{low / _GIB:.2f}" if low == high else f"{low / _GIB:.2f}-{high / _GIB:.2f}"


def _memory_lines(imp) -> list[str]:
    """The memory section: what vLLM requests, every part its worker takes with its basis and
    range (none left out), and what the KV cache gets."""
    from enginecfg.cli.tables import paragraph, render

    mem = imp.memory
    gpu = f"{mem.gpu} {mem.gpu_memory_bytes / _GIB:.2f} GiB"
    out = []
    if mem.source != "estimate":
        out.append(paragraph(f"Memory: {mem.kv_cache_memory / _GIB:.2f} GiB for the KV cache "
                             f"(--kv-cache-memory-bytes {mem.kv_cache_memory_bytes}; vLLM ignores the "
                             f"utilization and skips the memory profiling; {gpu})."))
        return out
    kv = f"{mem.kv_cache_memory / _GIB:.2f} GiB"
    if mem.is_range:
        kv += (f" (range {_gib_range(mem.kv_cache_memory_low, mem.kv_cache_memory_high)} GiB; uncertain: "
               + ", ".join(p.title for p in mem.parts if p.name in mem.uncertain) + ")")
    out.append(paragraph(f"Memory: {gpu} x {mem.gpu_memory_utilization:g} utilization = "
                         f"{mem.requested_memory / _GIB:.2f} GiB requested by vLLM; its worker takes the parts "
                         f"below and leaves {kv} for the KV cache."))
    rows = [["requested", f"{mem.requested_memory / _GIB:.2f}", "", ""]]
    for p in mem.parts:
        rows.append([p.title, f"{p.bytes / _GIB:.2f}", _gib_range(p.low, p.high), "yes" if p.subtracted else "no"])
    if any(p.step == "warmup" for p in mem.parts):
        rows.insert(1 + len([p for p in mem.parts if p.step == "profile"]),
                    ["= \"Available KV cache memory\" (vLLM logs it)", f"{mem.available_kv_cache_memory / _GIB:.2f}",
                     _gib_range(mem.available_kv_cache_memory_low, mem.available_kv_cache_memory_high), ""])
    rows.append(["= KV cache", f"{mem.kv_cache_memory / _GIB:.2f}",
                 _gib_range(mem.kv_cache_memory_low, mem.kv_cache_memory_high), ""])
    out.append(render(["part", "GiB", "range GiB", "taken"], rows, names=(1, 2, 3)))
    for p in mem.parts:
        out.append(paragraph(f"{p.title[0].upper() + p.title[1:]}: " + "; ".join(p.basis) + ".",
                             indent="  ", hanging="  "))
    return out


def _kv_lines(imp) -> list[str]:
    """The groups, the paddings, the blocks and what vLLM would log (only what it logs)."""
    from enginecfg.cli.tables import paragraph, render

    out = []
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
        out.append(f"Layer padding: {pad.layers} empty slot{'' if pad.layers == 1 else 's'} "
                   f"({pad.layer_percent:.2f}%).")
    rnd = imp.block_rounding
    if imp.memory.kv_cache_memory > 0:
        out.append(f"Block rounding: {rnd.bytes:,} bytes unused ({rnd.percent:.2f}%).")
    if imp.blocks_from_memory is not None:
        out.append(paragraph(f"Blocks: --num-gpu-blocks-override {imp.num_blocks:,} replaces the "
                             f"{imp.blocks_from_memory:,} the memory gives."))
    if imp.starts:
        out.append(paragraph(f"KV cache: {imp.num_blocks:,} blocks = {imp.kv_tokens:,} tokens "
                             f"(vLLM: \"GPU KV cache size: {imp.kv_tokens:,} tokens\")."))
    r = imp.kv_range
    if r is not None and (imp.starts or r.starts[1]):
        conc = r.max_concurrency
        text = (f"Over the memory's range ({_gib_range(*r.memory)} GiB): {r.num_blocks[0]:,}-{r.num_blocks[1]:,} "
                f"blocks = {r.kv_tokens[0]:,}-{r.kv_tokens[1]:,} tokens")
        if conc[0] is not None and conc[1] is not None:
            text += f", {_fmt_conc(conc[0])}-{_fmt_conc(conc[1])} requests of max_model_len"
        if r.starts[0] != r.starts[1]:
            text += "; at its low end vLLM would not start" if not r.starts[0] else ""
        out.append(paragraph(text + "."))
    if imp.auto_fit:
        out.append(paragraph(f"max_model_len: {imp.max_model_len:,}, chosen by vLLM's start-up auto-fit of "
                             f"--max-model-len -1 (the model allows more)."))
    return out


def _concurrency_table(imp) -> str | None:
    from enginecfg.cli.tables import render

    if imp.starts:
        r = imp.kv_range
        if r is not None:
            def span(x):
                return "-" if x is None or x[0] is None else f"{_fmt_conc(x[0])}-{_fmt_conc(x[1])}"
            conc = [[f"{n:,}", _fmt_conc(x), span(r.concurrency.get(n))] for n, x in imp.concurrency.items()]
            conc.append([f"{imp.max_model_len:,} (max_model_len)", _fmt_conc(imp.max_concurrency),
                         span(r.max_concurrency)])
            return render(["context", "requests", "over the memory's range"], conc, names=(0, 1, 2),
                          title="Concurrent requests:")
        conc = [[f"{n:,}", _fmt_conc(x)] for n, x in imp.concurrency.items()]
        conc.append([f"{imp.max_model_len:,} (max_model_len)", _fmt_conc(imp.max_concurrency)])
        return render(["context", "requests"], conc, names=(0, 1), title="Concurrent requests:")
    if imp.fits is None:  # it stops before the KV-cache check: no context would make it start
        return None
    conc = [[f"{n:,}", _fmt_conc(x)] for n, x in imp.concurrency.items()
            if x is not None and n <= imp.max_model_len_fits]
    if not conc:
        return None
    return render(["context", "requests"], conc, names=(0, 1),
                  title="Concurrent requests, were --max-model-len lowered to the context:")


def _startup_lines(result) -> list[str]:
    """What a release that decides the block size at engine start (C8) decides there: the
    block size the attention layers run with, the Mamba block and padded page, and why."""
    st = result.facts.get("startup")
    from enginecfg.commands.findings import start_decision

    if start_decision(result) is None:
        return []
    backends = ", ".join(st.attention_backends) or "no attention layer"
    line = f"Engine start: attention on {backends}; block size {st.block_size:,} tokens"
    if st.mamba_block_size is not None and result.config.model_config.is_hybrid:
        line += f", Mamba block {st.mamba_block_size:,}"
    if st.mamba_page_size_padded is not None:
        line += f", Mamba page padded to {st.mamba_page_size_padded:,} bytes"
    out = [line + " (decided before loading; vLLM itself knows it only after loading the weights)."]
    from enginecfg.cli.tables import paragraph

    out = [paragraph(out[0])]
    out += [paragraph(f"{d.field}: {d.old} -> {d.new}: {d.reason}", indent="  ", hanging="    ")
            for d in st.decisions]
    return out


def _fits_line(imp, release: str) -> str:
    """The largest max_model_len that fits; with a block-count override whose blocks hold less
    than the memory the start-up check measures, both, so the two figures do not contradict."""
    line = f"Largest max_model_len that fits: {imp.max_model_len_fits:,}"
    held = imp.override_max_model_len
    if held is None or held >= imp.max_model_len_fits:
        return line + "."
    return (line + f" in the memory, which vLLM {release}'s start-up check measures; the "
            f"{imp.num_blocks:,} blocks --num-gpu-blocks-override keeps hold one request of at most "
            f"{held:,} tokens" + (" (not one token)." if held == 0 else "."))


def print_explanation(e, *, recorded: str | None = None) -> None:
    """The report of an :class:`~enginecfg.commands.Explanation`; *recorded* says where its
    run was recorded (None: it was not, and no run id is shown)."""
    from enginecfg.cli.report import start_lines
    from enginecfg.cli.tables import paragraph
    from enginecfg.pipeline.models.capacity import Impact

    imp = e.impact
    out = [f"{e.model}  (run {e.run_id[:12]})" if recorded else f"{e.model}  (not recorded)"]
    gpu = e.result.gpu or {}
    out.append(f"as vLLM {e.vllm_version} decides it, on the {gpu.get('name')} (compute capability "
               f"{gpu.get('capability')})")
    out += _startup_lines(e.result)
    if not isinstance(imp, Impact):
        error = getattr(imp, "error", None) or "the impact stage recorded no figures"
        out.append(paragraph(f"KV-cache figures unavailable: {error}"))
        out += [paragraph(line, hanging="  ") for line in start_lines(imp, release=e.vllm_version)]
        out += _finding_lines(e.findings)
        print("\n".join(out))
        return
    out += _memory_lines(imp)
    if not imp.groups:
        out.append(imp.note or "No KV cache.")
    else:
        out += _kv_lines(imp)
    out += [paragraph(line, hanging="  ") for line in start_lines(imp, release=e.vllm_version)]
    if imp.groups:
        table = _concurrency_table(imp)
        if table:
            out.append(table)
        if imp.starts:
            out.append(paragraph(_fits_line(imp, e.vllm_version)))
    out += _finding_lines(e.findings)
    print("\n".join(out))


def _finding_lines(findings) -> list[str]:
    from enginecfg.cli.tables import paragraph

    if not findings:
        return ["No findings."]
    out = ["Findings:"]
    for f in findings:
        cause = f.caused_by
        if cause is None:
            why = ""
        elif hasattr(cause, "stage"):
            why = (f" [stage {cause.stage}: {cause.field} {json.dumps(cause.old)} -> "
                   f"{json.dumps(cause.new)}]")
        else:
            why = f" [engine argument {cause.engine_argument} {cause.value}]"
        out.append(paragraph(f"- {f.id}: {f.message}{why}", hanging="  "))
    return out


def _label(row, name: str) -> str:
    """A setting's cell: what vLLM resolved, marked ``*`` where it is not what was asked."""
    asked = row.setting.get(name)
    if name not in row.setting:
        return "default"
    got = row.resolved.get(name, asked) if row.ok else asked
    text = "default" if got is None else str(got)
    return text + ("*" if row.ok and name in row.differs else "")


def print_plan(p) -> None:
    """The table of a :class:`~enginecfg.commands.Plan`, kept whole at the terminal's width:
    the column names go on two lines, and the objectives become marks with a legend, when
    the table would not fit otherwise."""
    from enginecfg.cli.tables import render, width

    names = list(p.grid)
    marks: dict[int, list[str]] = {}
    for objective, i in p.best.items():
        if i is not None:
            marks.setdefault(i, []).append(objective)
    used = sorted({r.memory.gpu_memory_utilization for r in p.rows if r.ok and r.memory is not None}) or [
        p.memory.gpu_memory_utilization]
    util = f"utilization {used[0]:g}" if len(used) == 1 else "each release's default utilization"
    if "gpu" in p.grid:
        where = util
    else:
        card = p.memory.card
        where = f"{card.name}, {card.memory_gib:.2f} GiB, {util}"
    releases = ", ".join(p.vllm_versions)
    title = (f"{p.model}: KV cache over the grid ({where}; vLLM {releases}):" if len(p.vllm_versions) == 1 else
             f"{p.model}: KV cache over the grid ({where}; each row as its vLLM release decides):")

    def table(short: bool) -> str:
        rows = []
        for i, r in enumerate(p.rows):
            cells = [_label(r, n) for n in names]
            if not r.ok:
                rows.append(cells + ["error: " + r.error, "", "", "", "", ""])
                continue
            imp = r.impact
            best = marks.get(i, [])
            note = ",".join(_MARKS[b] for b in best) if short else ", ".join(best)
            if not imp.starts:
                note = "!" if short else "does not start"
            if imp.starts:
                figures = [f"{imp.kv_tokens:,}", _fmt_conc(r.concurrency), _fmt_conc(imp.max_concurrency)]
            else:  # vLLM would stop before it has any of these
                figures = ["-", "-", "-"]
            rows.append(cells + [f"{r.block_size:,}", *figures, f"{imp.max_model_len_fits:,}", note])
        if short:
            columns = [_SHORT.get(n, n).replace(" ", "\n", 1) for n in names] + [
                "tokens/\nblock", "KV\ntokens", f"conc@\n{p.context:,}", "conc@\nmax_len", "max len\nfits", "best"]
        else:
            columns = [_SHORT.get(n, n) for n in names] + [
                "tokens/block", "KV tokens", f"conc@{p.context:,}", "conc@max_len", "max len fits", "best for"]
        return render(columns, rows, names=tuple(range(len(names) + 5)), title=title,
                      min_prose=4 if short else 16)

    text = table(short=False)
    if "----" not in text or max(len(line) for line in text.splitlines()[1:]) > width():
        text = table(short=True)
        legend = ([f"c concurrency at {p.context:,}, x context, g granularity"] if marks else []) + (
            ["! does not start"] if any(r.ok and not r.starts for r in p.rows) else [])
        if legend:  # only the marks the table holds
            text += "\nbest: " + "; ".join(legend)
    notes = []
    for n in names:
        changed = sorted({(str(r.setting[n]), str(r.resolved.get(n))) for r in p.rows if r.ok and n in r.differs})
        if changed:
            notes.append(f"* {_SHORT.get(n, n)}: vLLM resolves "
                         + "; ".join(f"{a} to {b}" for a, b in changed))
    if any(r.ok and not r.starts for r in p.rows):
        notes.append(f"Rows marked as not starting: vLLM {releases} would stop at start-up (--json: "
                     "start_error; explain says why); they are never marked best.")
    if p.capacity_rules and any(r.ok for r in p.rows):
        notes.append("KV tokens are not one measure across releases: "
                     + "; ".join(rule.text() for rule in p.capacity_rules)
                     + ".")
    ranged = [r.impact.kv_range for r in p.rows if r.ok and r.impact.kv_range is not None]
    if ranged:
        notes.append("KV tokens and concurrency at the memory budget's point estimate; the activation peak "
                     "and the other estimated parts make it a range (--json: kv_range; explain lists each part).")
    from enginecfg.cli.tables import paragraph

    print("\n".join([text] + [paragraph(n, hanging="  ") for n in notes]))


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
                out.append(kind(part))
            except ValueError:
                raise InvalidInputError(f"invalid {flag}: {part!r} is not an integer; allowed: a "
                                        f"comma-separated list of integers", field=flag) from None
        elif kind is not str:
            try:
                out.append(kind(part))
            except ValueError as exc:
                raise InvalidInputError(f"invalid {flag}: {part!r}: {exc}", field=flag) from None
        else:
            out.append(part)
    return out


def _add_plot(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--plot", metavar="FILE", default=None,
                   help=f"draw {what} into FILE (.png or .svg; needs matplotlib: pip install 'enginecfg[plot]')")


def _check_plot(path: str | None) -> None:
    if path is not None and not path.lower().endswith((".png", ".svg")):
        raise InvalidInputError.for_value("plot", path, "a file name ending in .png or .svg", flag="--plot")


def _add_release(p: argparse.ArgumentParser, *, axis: bool) -> None:
    from enginecfg.pipeline import rulepacks

    default = rulepacks.default_release()
    known = ", ".join([default] + [r for r in rulepacks.releases() if r != default])
    p.add_argument("--vllm-version", dest="vllm_version", default=None,
                   metavar="VERSION[,VERSION]" if axis else "VERSION",
                   help=f"the vLLM release whose rules decide: {known} (default: ENGINECFG_VLLM_VERSION, else "
                        f"{default})" + ("; several: an axis, each row as its release decides" if axis else ""))


def register(sub) -> None:
    ex = sub.add_parser("explain", help="what a setting costs in KV cache, whether it starts, and why",
                        description="What a setting costs in KV cache on a GPU, whether vLLM would start with "
                                    "it, and why. The run is recorded in the audit store as `run` records "
                                    "it; a pasted `vllm serve MODEL ...` line works too.")
    ex.add_argument("path", nargs="?", default=None,
                    help="a model folder holding config.json, a config.json file, or a Hugging Face repo id "
                         "(org/name)")
    ex.add_argument("--model", dest="model_option", metavar="PATH", help=argparse.SUPPRESS)
    add_engine_flags(ex)
    add_memory_flags(ex)
    _add_release(ex, axis=False)
    ex.add_argument("--require-start", action="store_true",
                    help="exit 1 when vLLM would not start with this setting (for CI)")
    _add_plot(ex, "the concurrency against context length and the KV-cache pages one request takes")
    ex.add_argument("--json", action="store_true", help="print the figures and findings as JSON")
    ex.add_argument("--no-audit", action="store_true", help="do not record the run in the audit store")
    ex.add_argument("--db", default=None, metavar="URL",
                    help="audit database URL (default: ENGINECFG_DB, else a SQLite file in the user data "
                         "directory)")
    ex.add_argument("--actor", default=None, metavar="NAME",
                    help="who runs this, recorded with the run (default: ENGINECFG_ACTOR)")
    ex.set_defaults(func=_cmd_explain)

    pl = sub.add_parser("plan", help="KV-cache figures side by side over a grid of settings",
                        description="KV-cache figures side by side over a grid of settings: every "
                                    "comma-separated flag is an axis. Rows are labelled with what vLLM "
                                    "resolves (* where it is not what was asked).")
    pl.add_argument("path", help="a model folder holding config.json, a config.json file, or a Hugging "
                                 "Face repo id (org/name)")
    pl.add_argument("--revision", default=None, metavar="REV",
                    help="a branch, tag or commit of the Hugging Face repo (with a repo id only)")
    _add_release(pl, axis=True)
    pl.add_argument("--tp", default=None, help="tensor-parallel sizes, e.g. 1,2,4,8")
    pl.add_argument("--kv-cache-dtype", dest="kv_dtypes", default=None, help="e.g. auto,fp8")
    pl.add_argument("--block-size", dest="block_sizes", default=None, help="e.g. 16,32")
    pl.add_argument("--mamba-cache-mode", dest="mamba_modes", default=None,
                    help="e.g. none,align,all (a release since rule C7f ignores the flag)")
    pl.add_argument("--max-model-len", dest="max_model_lens", default=None,
                    help="context lengths, e.g. 8192,32768 (vLLM's suffixes: 32k, 32K)")
    pl.add_argument("--gpu", dest="gpus", default=None, metavar="PRESETS",
                    help="GPU presets, e.g. H100,H200,B200 (`enginecfg gpus` lists them); default H200")
    pl.add_argument("--enable-prefix-caching", dest="enable_prefix_caching",
                    action=argparse.BooleanOptionalAction, default=None)
    pl.add_argument("--context", type=int, default=8192,
                    help="context length of the concurrency objective (default 8192)")
    g = pl.add_argument_group("memory (what the KV-cache figures assume; vLLM's flags and meaning)")
    from enginecfg.cli.engine_flags import _bytes, _positive_float

    g.add_argument("--gpu-memory", dest="gpu_memory", type=_positive_float("--gpu-memory"), default=None,
                   metavar="GIB", help="the card's memory in GiB, instead of the preset's")
    g.add_argument("--gpu-memory-utilization", dest="gpu_memory_utilization", default=None, metavar="F[,F]",
                   help="vLLM's share of the GPU memory (default 0.9); several: an axis")
    g.add_argument("--kv-cache-memory-bytes", "--kv-cache-memory", dest="kv_cache_memory", type=_bytes,
                   default=None, metavar="BYTES", help="KV-cache bytes per GPU (vLLM ignores the utilization)")
    g.add_argument("--num-gpu-blocks-override", dest="num_gpu_blocks_override", type=int, default=None,
                   metavar="N", help="KV-cache blocks, instead of the number the memory gives")
    _add_plot(pl, "the concurrency against context length of every setting")
    pl.add_argument("--json", action="store_true")
    pl.set_defaults(func=_cmd_plan)


def _cmd_explain(ns: argparse.Namespace) -> int:
    from enginecfg.cli.report import start_gate
    from enginecfg.cli.recording import open_store
    from enginecfg.commands import explain

    if ns.model_option and ns.path and ns.path != ns.model_option:
        sys.stderr.write(f"enginecfg: error: two models given: {ns.path} and --model {ns.model_option}\n")
        return 2
    ns.path = ns.path or ns.model_option
    if not ns.path:
        sys.stderr.write("enginecfg: error: explain needs a model: a folder holding config.json, a "
                         "config.json file or a repo id (see enginecfg explain --help)\n")
        return 2
    _check_plot(ns.plot)
    store, code = open_store(ns)
    if code:
        return code
    try:
        e = explain(ns.path, memory=memory_options(ns), revision=ns.revision, vllm_version=ns.vllm_version,
                    **engine_args(ns))
    finally:
        if store is not None:
            store.detach()
    recorded = None
    if store is not None and store.last_run_id == e.run_id and not store.write_failed:
        recorded = f"recorded as run {e.run_id} in {store.display_url}"
        sys.stderr.write(f"enginecfg: {recorded}\n")
    elif store is not None and store.write_failed:
        sys.stderr.write(f"enginecfg: audit record NOT written: {store.record_error}\n")
    if ns.json:
        sys.stdout.write(json.dumps(e.to_dict(), indent=2, default=str) + "\n")
    else:
        print_explanation(e, recorded=recorded)
    if ns.plot:
        from enginecfg.cli.plot import plot_explanation

        plot_explanation(e, ns.plot)
        sys.stderr.write(f"enginecfg: plot written to {ns.plot}\n")
    refusal = start_gate(e.impact, e.vllm_version) if ns.require_start else None
    if refusal is not None:
        sys.stderr.write(refusal + "\n")
        return 1
    return 0


def _cmd_plan(ns: argparse.Namespace) -> int:
    from enginecfg.commands import plan
    from enginecfg.pipeline.engine_args import human_readable_int_or_auto

    _check_plot(ns.plot)
    if ns.gpus is not None and ns.gpus.strip().lower() in ("help", "list"):
        from enginecfg.cli.engine_flags import print_gpus

        print_gpus()
        return 0
    grid = {"gpu": _split(ns.gpus, "--gpu"),
            "tensor_parallel_size": _split(ns.tp, "--tp", int),
            "kv_cache_dtype": _split(ns.kv_dtypes, "--kv-cache-dtype"),
            "block_size": _split(ns.block_sizes, "--block-size", int),
            "mamba_cache_mode": _split(ns.mamba_modes, "--mamba-cache-mode"),
            "max_model_len": _split(ns.max_model_lens, "--max-model-len", human_readable_int_or_auto),
            "gpu_memory_utilization": _split(ns.gpu_memory_utilization, "--gpu-memory-utilization", float)}
    if len(grid["gpu_memory_utilization"]) == 1:
        grid.pop("gpu_memory_utilization")  # one value: the memory, not an axis
    grid = {k: v for k, v in grid.items() if v != [None]}
    base = {k: getattr(ns, k) for k in ("enable_prefix_caching",) if getattr(ns, k) is not None}
    memory = {k: v for k, v in {"gpu_memory_gib": ns.gpu_memory, "kv_cache_memory": ns.kv_cache_memory,
                                "num_gpu_blocks_override": ns.num_gpu_blocks_override}.items() if v is not None}
    if ns.gpu_memory_utilization is not None and "gpu_memory_utilization" not in grid:
        memory["gpu_memory_utilization"] = _split(ns.gpu_memory_utilization, "--gpu-memory-utilization", float)[0]
    releases = _split(ns.vllm_version, "--vllm-version")
    release = None
    if len(releases) > 1:
        grid = {"vllm_version": releases, **grid}
    else:
        release = releases[0]
    p = plan(ns.path, grid, memory=memory, context=ns.context, revision=ns.revision, vllm_version=release, **base)
    if ns.json:
        sys.stdout.write(json.dumps(p.to_dict(), indent=2, default=str) + "\n")
    else:
        print_plan(p)
    if p.exit_code:
        sys.stderr.write(f"enginecfg: no setting of the grid has figures ({len(p.rows)} refused)\n")
        return p.exit_code
    if ns.plot:
        from enginecfg.cli.plot import plot_plan

        plot_plan(p, ns.plot)
        sys.stderr.write(f"enginecfg: plot written to {ns.plot}\n")
    return 0
