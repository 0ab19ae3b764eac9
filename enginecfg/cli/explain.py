"""``enginecfg explain`` and ``enginecfg plan``: what the resolved settings cost.

vLLM prints "GPU KV cache size: N tokens" and "Maximum concurrency for L tokens per request"
only after it has loaded the weights.  ``explain`` gives those figures — and the reasons
behind them — for one setting, before anything is loaded, from the ``impact`` fact of a
run; ``plan`` gives them side by side over a grid of settings (tensor-parallel sizes, KV
dtypes, block sizes, Mamba cache modes), reading the config once, and marks the best setting
per objective.  Findings name the change (stage, field, reason) or the engine argument that
caused them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from typing import Any, Sequence

from enginecfg.pipeline.errors import EngineCfgError, InvalidInputError

__all__ = ["register", "findings", "explain", "plan"]

_GIB = 2**30
#: a hybrid block larger than this pins a large fixed footprint per request
LARGE_BLOCK = 1024
#: Mamba page padding above this share of the state is worth a sentence
PADDING_PCT = 5.0


# --------------------------------------------------------------------------- findings
def _change(result, field: str) -> dict[str, Any] | None:
    found = [c for c in result.changes if c.field == field]
    if not found:
        return None
    c = found[-1]
    return {"stage": c.stage, "field": c.field, "old": c.old, "new": c.new, "reason": c.reason}


def _cause(result, field: str, arg: str, flag: str) -> dict[str, Any] | None:
    """The change that set ``field``, else the engine argument that did."""
    change = _change(result, field)
    if change is not None:
        return change
    given = result.config.engine_args.get(arg)
    if given is not None:
        return {"engine_argument": flag, "value": given}
    return None


def _mib(n: int) -> str:
    """Bytes in MiB, or in KiB below one MiB."""
    if n < 2**20:
        return f"{n / 2**10:,.1f} KiB"
    return f"{n / 2**20:,.1f} MiB"


def findings(result) -> list[dict[str, Any]]:
    """Findings of one run, each with its figures and the change (or argument) behind it."""
    impact = result.to_dict().get("impact") or {}
    if "error" in impact:
        return [{"id": "no-impact", "message": f"KV-cache figures unavailable: {impact['error']}",
                 "figures": {}, "caused_by": None}]
    cfg = result.config
    mc, cc = cfg.model_config, cfg.cache_config
    out: list[dict[str, Any]] = []
    groups = impact.get("groups") or []
    attn_layers = sum(g["num_layers"] for g in groups if g["kind"] != "mamba")

    backend = _change(result, "attention_config.backend")
    if backend is not None and backend["new"] == "TRITON_ATTN":
        out.append({
            "id": "forced-triton-attn",
            "message": (f"The attention backend is forced to TRITON_ATTN for every one of the "
                        f"{attn_layers} attention layers ({backend['reason']}). Published reports "
                        f"show Gemma 4 decoding at about a tenth of the expected speed this way; "
                        f"benchmark before serving, or pass --attention-backend to choose."),
            "figures": {"backend": "TRITON_ATTN", "attention_layers": attn_layers},
            "caused_by": backend})

    block = min((g["block_size"] for g in groups if g["kind"] != "mamba"), default=None)
    if mc.is_hybrid and block is not None and block > LARGE_BLOCK:
        slots = max(g["num_layers"] for g in groups)
        pages = impact["min_request_bytes"] // groups[0]["page_size_bytes"]
        figures = {"block_size": block, "min_request_bytes": impact["min_request_bytes"],
                   "min_pages_per_request": pages, "groups": len(groups), "layer_slots": slots,
                   "page_size_bytes": groups[0]["page_size_bytes"],
                   "prefix_cache_granularity": impact.get("prefix_cache_granularity")}
        text = (f"The hybrid alignment made attention blocks of {block:,} tokens (> {LARGE_BLOCK:,}). "
                f"Every request, however short, pins at least {pages:,} pages of "
                f"{_mib(groups[0]['page_size_bytes'])} ({len(groups)} KV-cache groups x {slots} "
                f"layer slots): {_mib(impact['min_request_bytes'])}")
        if cc.enable_prefix_caching:
            text += (f"; prefix caching reuses prompts only in whole blocks of {block:,} tokens, "
                     f"so a shared prefix shorter than that is never reused")
        out.append({"id": "large-hybrid-block", "message": text + ".", "figures": figures,
                    "caused_by": _cause(result, "cache_config.block_size", "block_size", "--block-size")})

    ssm_dtypes = (result.facts.get("pages") or {}).get("mamba_state_dtypes") or []
    kind = getattr(mc.arch_info, "state_kind", None)
    if len(ssm_dtypes) >= 2 and kind in ("mamba2", "mamba1", "gated_delta_net") \
            and ssm_dtypes[-1] in ("float16", "bfloat16"):
        out.append({
            "id": "16-bit-ssm-state",
            "message": (f"The recurrent (SSM) state is kept in {ssm_dtypes[-1]}. It is updated at "
                        f"every token, so rounding errors accumulate over long sequences; "
                        f"float32 (--mamba-ssm-cache-dtype float32) is the safe choice."),
            "figures": {"ssm_state_dtype": ssm_dtypes[-1]},
            "caused_by": _cause(result, "cache_config.mamba_ssm_cache_dtype", "mamba_ssm_cache_dtype",
                                "--mamba-ssm-cache-dtype")})

    pad = (impact.get("padding") or {}).get("mamba")
    if pad and pad["percent"] > PADDING_PCT:
        out.append({
            "id": "mamba-padding",
            "message": (f"Each Mamba state page is padded by {_mib(pad['bytes'])} "
                        f"({pad['percent']:.2f}% of the {_mib(pad['state_bytes'])} state) to the "
                        f"attention page size: that share of the state memory holds nothing."),
            "figures": dict(pad),
            "caused_by": _change(result, "cache_config.mamba_page_size_padded")})
    layer_pct = (impact.get("padding") or {}).get("layer_percent") or 0.0
    if layer_pct > PADDING_PCT:
        out.append({
            "id": "layer-padding",
            "message": (f"The KV-cache groups are padded by {impact['padding']['layers']} empty layer "
                        f"slots ({layer_pct:.2f}% of the layers): memory reserved for no layer."),
            "figures": {"layers": impact["padding"]["layers"], "percent": layer_pct},
            "caused_by": None})
    mem = impact.get("memory") or {}
    if mem.get("kv_cache_memory") == 0 and mem.get("source") == "estimate":
        usable = int(mem["gpu_memory_bytes"] * mem["gpu_memory_utilization"])
        weights = mem["weights"]["bytes_per_gpu"]
        out.append({
            "id": "no-kv-memory",
            "message": (f"The weights alone, an estimated {weights / _GIB:,.1f} GiB per GPU, exceed the "
                        f"{usable / _GIB:,.1f} GiB vLLM may use ({mem['gpu_memory_bytes'] / _GIB:g} GiB x "
                        f"{mem['gpu_memory_utilization']:g}): no memory is left for the KV cache; raise "
                        f"--tensor-parallel-size or use a quantised checkpoint."),
            "figures": {"weights_per_gpu": weights, "usable_bytes": usable},
            "caused_by": _cause(result, "parallel_config.tensor_parallel_size", "tensor_parallel_size",
                                "--tensor-parallel-size")})
    elif impact.get("fits"):
        out.append({
            "id": "does-not-fit",
            "message": (f"One request of max_model_len {mc.max_model_len:,} tokens does not fit; "
                        f"the largest that fits is {impact['max_model_len_fits']:,} "
                        f"(vLLM would refuse to start: {impact['fits'].split('. ')[0]})."),
            "figures": {"max_model_len": mc.max_model_len,
                        "max_model_len_fits": impact["max_model_len_fits"]},
            "caused_by": _cause(result, "model_config.max_model_len", "max_model_len", "--max-model-len")})
    return out


# --------------------------------------------------------------------------- running
def _impact_options(ns: argparse.Namespace) -> dict[str, Any]:
    opts: dict[str, Any] = {"gpu_memory_gib": ns.gpu_memory,
                            "gpu_memory_utilization": ns.gpu_memory_utilization,
                            "kv_cache_memory": ns.kv_cache_memory}
    return opts


def _pipeline(opts: dict[str, Any]):
    from enginecfg.pipeline.run import Pipeline

    return Pipeline(gpu_validation="off", impact=opts)


def explain(path: Any, engine_args: dict[str, Any], opts: dict[str, Any]) -> dict[str, Any]:
    """The explain document of one setting: the run's impact, its findings, the run id."""
    result = _pipeline(opts).resolve(path, **engine_args)
    return {"model": str(path), "engine_args": dict(engine_args), "run_id": result.run_id,
            "impact": result.to_dict()["impact"], "findings": findings(result),
            "changes": [{"stage": c.stage, "field": c.field, "old": c.old, "new": c.new}
                        for c in result.changes]}


def _split(text: str | None, flag: str, kind=str) -> list[Any]:
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


def plan(path: Any, base_args: dict[str, Any], grid: dict[str, list[Any]], opts: dict[str, Any],
         context: int) -> dict[str, Any]:
    """Every setting of the grid (one process, the config read once), best ones marked."""
    from pathlib import Path

    from enginecfg.pipeline.config import EngineConfig

    file = Path(path)
    file = file / "config.json" if file.is_dir() else file
    try:
        raw = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"invalid path: cannot read {file}: {exc}", field="path") from None
    opts = dict(opts, contexts=(1024, 8192, 32768, context))
    pipeline = _pipeline(opts)
    names = list(grid)
    rows = []
    for values in itertools.product(*(grid[n] for n in names)):
        setting = {n: v for n, v in zip(names, values) if v is not None}
        args = dict(base_args, **setting)
        row: dict[str, Any] = {"setting": setting}
        try:
            cfg = EngineConfig.from_hf_config(raw, **args)
            result = pipeline.run(cfg)
        except EngineCfgError as exc:
            row["error"] = " ".join(str(exc).split())
            rows.append(row)
            continue
        imp = result.to_dict().get("impact") or {}
        if "error" in imp:
            row["error"] = imp["error"]
            rows.append(row)
            continue
        groups = imp["groups"]
        block = min((g["block_size"] for g in groups if g["kind"] != "mamba"),
                    default=result.config.cache_config.block_size)
        weights = (imp["memory"].get("weights") or {}).get("bytes_per_gpu")
        row.update(block_size=block, kv_tokens=imp["kv_tokens"],
                   concurrency=(imp["concurrency"] or {}).get(str(context)),
                   max_concurrency=imp["max_concurrency"], max_model_len=imp["max_model_len"],
                   max_model_len_fits=imp["max_model_len_fits"],
                   kv_cache_memory=imp["memory"]["kv_cache_memory"], weights_per_gpu=weights,
                   granularity=block, findings=[f["id"] for f in findings(result)])
        rows.append(row)
    ok = [r for r in rows if "error" not in r]
    best: dict[str, int | None] = {"concurrency": None, "context": None, "granularity": None}
    if ok:
        def idx(r):
            return rows.index(r)
        with_conc = [r for r in ok if r["concurrency"] is not None]
        if with_conc:
            best["concurrency"] = idx(max(with_conc, key=lambda r: (r["concurrency"], r["kv_tokens"])))
        best["context"] = idx(max(ok, key=lambda r: (r["max_model_len_fits"], r["kv_tokens"])))
        best["granularity"] = idx(min(ok, key=lambda r: (r["granularity"], -r["kv_tokens"])))
    return {"model": str(path), "engine_args": base_args, "grid": grid, "context": context,
            "memory": {k: v for k, v in opts.items() if k != "contexts"}, "rows": rows, "best": best}


# --------------------------------------------------------------------------- printing
def _fmt_conc(x: float | None) -> str:
    return "-" if x is None else f"{x:,.2f}x"


_SHORT = {"tensor_parallel_size": "tp", "kv_cache_dtype": "kv dtype", "block_size": "block size",
          "mamba_cache_mode": "mamba mode"}


def _print_explain(doc: dict[str, Any]) -> None:
    from enginecfg.cli.tables import paragraph, render

    imp = doc["impact"] or {}
    out = [f"{doc['model']}  (run {doc['run_id'][:12]})"]
    if "error" in imp:
        out.append(paragraph(f"KV-cache figures unavailable: {imp['error']}"))
        print("\n".join(out))
        return
    mem = imp["memory"]
    gpu = mem["gpu_memory_bytes"] / _GIB
    if mem["source"] == "estimate":
        w = mem["weights"]
        out.append(paragraph(
            f"Memory: {gpu:g} GiB GPU x {mem['gpu_memory_utilization']:g} utilization - weights "
            f"{w['bytes_per_gpu'] / _GIB:.2f} GiB per GPU (estimated) = "
            f"{mem['kv_cache_memory'] / _GIB:.2f} GiB for the KV cache."))
        out.append(paragraph("Weights basis: " + "; ".join(w["basis"]) + ".", indent="  ", hanging="  "))
    else:
        out.append(f"Memory: {mem['kv_cache_memory'] / _GIB:.2f} GiB for the KV cache (--kv-cache-memory).")
    if not imp["groups"]:
        out.append(imp.get("note", "No KV cache."))
    else:
        rows = []
        for i, g in enumerate(imp["groups"]):
            kind = g["kind"] + (f" ({g['sliding_window']})" if g.get("sliding_window") else "")
            per_tok = f"{g['bytes_per_token']:,}" if g["bytes_per_token"] is not None else \
                f"state {_mib(g['bytes_per_request'])} per request"
            rows.append([i, kind, g["num_layers"], f"{g['block_size']:,}", _mib(g["page_size_bytes"]), per_tok])
        out.append(render(["#", "kind", "layers", "tokens/block", "page size", "bytes/token of context"],
                          rows, names=(0, 1), title="KV-cache groups (one block table each):"))
        pad = imp["padding"] or {}
        if pad.get("mamba"):
            m = pad["mamba"]
            out.append(f"Mamba padding: {m['bytes']:,} bytes per page ({m['percent']:.2f}% of the state).")
        if pad.get("layers"):
            out.append(f"Layer padding: {pad['layers']} empty slots ({pad['layer_percent']:.2f}%).")
        rnd = imp["block_rounding"]
        out.append(f"Block rounding: {rnd['bytes']:,} bytes unused ({rnd['percent']:.2f}%).")
        out.append(paragraph(f"KV cache: {imp['num_blocks']:,} blocks = {imp['kv_tokens']:,} tokens "
                             f"(vLLM: \"GPU KV cache size: {imp['kv_tokens']:,} tokens\")."))
        conc = [[f"{int(n):,}", _fmt_conc(x)] for n, x in (imp["concurrency"] or {}).items()]
        conc.append([f"{imp['max_model_len']:,} (max_model_len)", _fmt_conc(imp["max_concurrency"])])
        out.append(render(["context", "requests"], conc, names=(0, 1), title="Concurrent requests:"))
        out.append(f"Largest max_model_len that fits: {imp['max_model_len_fits']:,}.")
    if doc["findings"]:
        out.append("Findings:")
        for f in doc["findings"]:
            cause = f["caused_by"]
            if cause and "stage" in cause:
                why = (f" [stage {cause['stage']}: {cause['field']} {json.dumps(cause['old'])} -> "
                       f"{json.dumps(cause['new'])}]")
            elif cause:
                why = f" [engine argument {cause['engine_argument']} {cause['value']}]"
            else:
                why = ""
            out.append(paragraph(f"- {f['id']}: {f['message']}{why}", hanging="  "))
    else:
        out.append("No findings.")
    print("\n".join(out))


def _print_plan(doc: dict[str, Any]) -> None:
    from enginecfg.cli.tables import render

    names = list(doc["grid"])
    marks: dict[int, list[str]] = {}
    for objective, i in doc["best"].items():
        if i is not None:
            marks.setdefault(i, []).append(objective)
    rows = []
    for i, r in enumerate(doc["rows"]):
        cells = [str(r["setting"].get(n, "default")) for n in names]
        if "error" in r:
            rows.append(cells + ["error: " + r["error"], "", "", "", "", ""])
            continue
        rows.append(cells + [f"{r['block_size']:,}", f"{r['kv_tokens']:,}", _fmt_conc(r["concurrency"]),
                             _fmt_conc(r["max_concurrency"]), f"{r['max_model_len_fits']:,}",
                             ", ".join(marks.get(i, []))])
    title = (f"{doc['model']}: KV cache over the grid ({doc['memory']['gpu_memory_gib']:g} GiB GPU, "
             f"utilization {doc['memory']['gpu_memory_utilization']:g}):")
    columns = [_SHORT.get(n, n) for n in names] + [
        "tokens/block", "KV tokens", f"conc@{doc['context']:,}", "conc@max_len", "max len fits", "best for"]
    print(render(columns, rows, names=tuple(range(len(names) + 5)), title=title))


# --------------------------------------------------------------------------- commands
def _memory_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("memory budget")
    g.add_argument("--gpu-memory", type=float, default=141.0, metavar="GIB",
                   help="GPU memory in GiB (default 141, an H200)")
    g.add_argument("--gpu-memory-utilization", type=float, default=0.9,
                   help="vLLM's fraction of GPU memory to use (default 0.9)")
    g.add_argument("--kv-cache-memory", "--kv-cache-memory-bytes", dest="kv_cache_memory", type=int,
                   default=None, metavar="BYTES",
                   help="KV-cache bytes per GPU (vLLM's --kv-cache-memory-bytes): skips the weights "
                        "estimate")


def register(sub) -> None:
    from enginecfg.cli.app import _add_engine_flags

    ex = sub.add_parser("explain", help="what a setting costs in KV cache, and why")
    ex.add_argument("path", help="a model folder holding config.json, or a config.json file")
    _add_engine_flags(ex)
    _memory_flags(ex)
    ex.add_argument("--json", action="store_true", help="print the figures and findings as JSON")
    ex.set_defaults(func=_cmd_explain)

    pl = sub.add_parser("plan", help="KV-cache figures side by side over a grid of settings")
    pl.add_argument("path")
    pl.add_argument("--tp", default="1", help="tensor-parallel sizes, e.g. 1,2,4,8")
    pl.add_argument("--kv-cache-dtype", dest="kv_dtypes", default=None, help="e.g. auto,fp8")
    pl.add_argument("--block-size", dest="block_sizes", default=None, help="e.g. 16,32")
    pl.add_argument("--mamba-cache-mode", dest="mamba_modes", default=None, help="e.g. none,align,all")
    pl.add_argument("--enable-prefix-caching", dest="enable_prefix_caching",
                    action=argparse.BooleanOptionalAction, default=None)
    pl.add_argument("--max-model-len", dest="max_model_len", type=int, default=None)
    pl.add_argument("--context", type=int, default=8192,
                    help="context length of the concurrency objective (default 8192)")
    _memory_flags(pl)
    pl.add_argument("--json", action="store_true")
    pl.set_defaults(func=_cmd_plan)


def _cmd_explain(ns: argparse.Namespace) -> int:
    from enginecfg.cli.app import _engine_args

    doc = explain(ns.path, _engine_args(ns), _impact_options(ns))
    if ns.json:
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    else:
        _print_explain(doc)
    return 0


def _cmd_plan(ns: argparse.Namespace) -> int:
    grid = {"tensor_parallel_size": _split(ns.tp, "--tp", int),
            "kv_cache_dtype": _split(ns.kv_dtypes, "--kv-cache-dtype"),
            "block_size": _split(ns.block_sizes, "--block-size", int),
            "mamba_cache_mode": _split(ns.mamba_modes, "--mamba-cache-mode")}
    grid = {k: v for k, v in grid.items() if v != [None]}
    base = {k: getattr(ns, k) for k in ("enable_prefix_caching", "max_model_len")
            if getattr(ns, k) is not None}
    if ns.context < 1:
        raise InvalidInputError.for_value("context", ns.context, "a positive token count", flag="--context")
    doc = plan(ns.path, base, grid, _impact_options(ns), ns.context)
    if ns.json:
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    else:
        _print_plan(doc)
    return 0
