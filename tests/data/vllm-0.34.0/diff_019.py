#!/usr/bin/env python3
"""Every difference between vLLM 0.19.0 and 0.34.0 on the same (config, engine arguments) pair,
each tied to the RULES.md rule that explains it.

    python tests/data/vllm-0.34.0/diff_019.py [-o DIFF-019.md]

0.19.0: ../vllm-0.19.0/cases.json (`expected`, config time: 0.19 aligned hybrid block sizes at
config time). 0.34.0: public-034.json plus results/extra-h200.json here
(the fixtures' other argument sets), both on the emulated H200. The 0.34 block size, Mamba block
size and padding are taken after `update_block_size_for_backend` when the model class was built
(where 0.34 decides them), else at config time, as compare-019.md does. Fields 0.34.0 no longer
has (`calculate_kv_scales`, `supports_mamba_prefix_caching`) are not compared. A difference with
no rule below is reported as UNEXPLAINED and makes the exit status 1.
"""

from __future__ import annotations

import argparse
import gzip
import collections
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SEED_LOGGER = "vllm.model_executor.models.config"

MODEL_FIELDS = ("architecture", "dtype", "max_model_len", "is_hybrid", "is_attention_free",
                "use_mla", "head_size", "num_kv_heads", "total_num_kv_heads", "mamba_chunk_size")
CACHE_FIELDS = ("block_size", "user_specified_block_size", "cache_dtype", "enable_prefix_caching",
                "mamba_cache_mode", "mamba_block_size", "mamba_page_size_padded",
                "mamba_ssm_cache_dtype", "mamba_cache_dtype")
STARTUP_FIELDS = ("block_size", "mamba_block_size", "mamba_page_size_padded")


def open_json(path: str):
    """Read a results file, gzipped (`.json.gz`, as committed) or not."""
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        path += ".gz"
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f)


def load_034(public_only: bool = False) -> dict[str, dict]:
    out = {}
    paths = [os.path.join(HERE, "public-034.json")]
    if not public_only:
        paths.append(os.path.join(HERE, "results", "extra-h200.json"))
    for path in paths:
        if os.path.exists(path) or os.path.exists(path + ".gz"):
            for c in open_json(path)["results"]:
                out[c["name"]] = c
    return out


def view_034(c: dict) -> dict:
    """The 0.34 answer in the 0.19 fixture's shape."""
    if c["error"]:
        e = c["error"]
        return {"status": "error", "error_type": e.get("root_type") or e["type"],
                "error_message": e.get("root_message") or e["message"]}
    f = c["final"]
    pl = c.get("post_load") or {}
    cache = {k: f["cache_config"].get(k) for k in CACHE_FIELDS}
    built = bool(pl.get("real_class_built"))
    if built and pl.get("after"):
        for k in STARTUP_FIELDS:
            cache[k] = pl["after"][k]
    msgs = [(r["level"], r["message"]) for r in c["logs"] if r["logger"] == SEED_LOGGER]
    msgs += [(r["level"], r["message"]) for r in pl.get("logs", [])
             if r.get("logger") == "vllm.platforms.interface"]
    return {"status": "resolved", "built": built,
            "build_error": (pl.get("build_error") or {}).get("message"),
            "model": {k: f["model_config"].get(k) for k in MODEL_FIELDS},
            "cache": cache, "backend": f["attention_config"]["backend"],
            "chunked": f["scheduler_config"]["enable_chunked_prefill"],
            "pooler": f.get("pooler_config"), "messages": msgs}


def view_019(case: dict) -> dict:
    e = case["expected"]
    if e["status"] == "error":
        return {"status": "error", "error_type": e["error"]["type"],
                "error_message": e["error"]["message"]}
    cfg = e["config"]
    return {"status": "resolved",
            "model": {k: cfg["model_config"].get(k) for k in MODEL_FIELDS},
            "cache": {k: cfg["cache_config"].get(k) for k in CACHE_FIELDS},
            "backend": cfg["attention_config"]["backend"],
            "chunked": cfg["scheduler_config"]["enable_chunked_prefill"],
            "pooler": cfg.get("pooler_config"),
            "messages": [(m["level"], m["message"]) for m in e["messages"]]}


def explain(field: str, old, new, a: dict, b: dict, args: dict) -> str:
    """The rule behind one difference (RULES.md ids), or UNEXPLAINED."""
    if b.get("status") == "resolved" and a.get("status") == "resolved" and \
            a["model"].get("architecture") != b["model"].get("architecture") and \
            field not in ("messages", "built"):
        return "C1 architecture left the registry: Transformers backend (not hybrid)"
    hybrid = (b.get("model") or {}).get("is_hybrid")
    attention_free = (b.get("model") or {}).get("is_attention_free")
    mode = (b.get("cache") or {}).get("mamba_cache_mode")
    if field == "status" and b["status"] == "resolved" and a["status"] == "error" and \
            args.get("enable_chunked_prefill") is False:
        if str(b["model"].get("architecture")).startswith("Transformers"):
            return "C1 architecture left the registry: Transformers backend (no Mamba hook)"
        if not b["model"].get("is_hybrid"):
            return "C1 is_hybrid: 'full_attention' layer types now count as attention (no Mamba hook)"
    if field == "status":
        return "C6 calculate_kv_scales removed" if "calculate_kv_scales" in args else (
            "C9.1 prefix caching on by default needs chunked prefill"
            if args.get("enable_chunked_prefill") is False else
            "C9.5 prefix caching now on by default: --mamba-block-size no longer refused"
            if "mamba_block_size" in args else "UNEXPLAINED")
    if field in ("error_message", "error_type") and "calculate_kv_scales" in args:
        return "C6 calculate_kv_scales removed: EngineArgs refuses it before the config is read"
    if field in ("error_message", "error_type") and a["status"] != b["status"]:
        return explain("status", a["status"], b["status"], a, b, args)
    if field in ("error_message", "error_type") and "is not divisible by" in str(
            a.get("error_message")) and "must be divisible by tensor parallel size" in str(
            b.get("error_message")):
        return ("C8 + C9.3 the state-shape divisibility check left config time; "
                "the TP head check now raises first")
    if field == "error_message":
        if old == "pool_type None not supported":
            return "C2 bare assertion before the pooling map"
        if "Chunked prefill is required" in str(old):
            return "C7/C9.1 assertion text changed"
        return "UNEXPLAINED"
    if field == "error_type":
        return "C2 bare assertion before the pooling map" if new == "AssertionError" else "UNEXPLAINED"
    if field == "model.architecture" and new in ("TransformersForCausalLM",
                                                 "TransformersMoEForCausalLM"):
        return "C1 architecture left the registry: Transformers backend"
    if field.startswith("model.") and a["model"].get("architecture") != b["model"].get("architecture"):
        return "C1 architecture left the registry: Transformers backend"
    if field == "model.mamba_chunk_size":
        return "C1 not compared in 0.34 (no 'all' mode reads it)" if new is None else "UNEXPLAINED"
    if field == "cache.enable_prefix_caching":
        return "C3.2 prefix caching on by default for hybrids" if (hybrid and new) else (
            "C1 Transformers backend is a decoder: prefix caching on" if new else "UNEXPLAINED")
    if field == "cache.mamba_cache_mode":
        if old == "all":
            return "C7 'all' is gone: align iff prefix caching"
        if new == "align" and old == "none":
            return "C3.2 + C7 prefix caching on by default → align"
        if new == "none" and not (hybrid or attention_free):
            return "C7 --mamba-cache-mode ignored for non-Mamba models"
        if new == "none" and old == "align":
            return "C7 mode follows prefix caching only"
        return "UNEXPLAINED"
    if field == "cache.block_size":
        if not b.get("built") and b["status"] == "resolved" and new == 64:
            return "C3.3 default 64 (model class not built: F)" if not hybrid else "C8 no alignment at config time (model class not built: F)"
        if not hybrid:
            return "C3.3 default block size 64"
        return "S2–S4 alignment after load: unit max(kernel, 64) [lcm checkpoint 64 in align]"
    if field == "cache.mamba_block_size":
        if mode == "align":
            return "C7/S5 align: mamba_block_size = block_size"
        if old != new and mode == "none":
            return "C7 'all' gone / none: max_model_len" if new == b["model"]["max_model_len"] else "UNEXPLAINED"
        return "C7" if new is None or not hybrid else "UNEXPLAINED"
    if field == "cache.mamba_page_size_padded":
        return "S6 padding to the 0.34 block's page" if b.get("built") else \
            "C8 no alignment at config time (model class not built)"
    if field == "cache.user_specified_block_size":
        return "UNEXPLAINED"
    if field == "backend":
        return "C4 Gemma 4: FA4 instead of forcing TRITON_ATTN" if old == "TRITON_ATTN" and new is None else "UNEXPLAINED"
    if field == "messages":
        return "C10 messages (see the diff)"
    if field == "built":
        return "F build failure in 0.34"
    return "UNEXPLAINED"


def short(text: str, limit: int = 140) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def compare(a: dict, b: dict, args: dict) -> list[tuple[str, object, object, str]]:
    out = []
    if a["status"] != b["status"]:
        out.append(("status", a["status"], b["status"]))
        if a["status"] == "error":
            out.append(("error_message", a["error_message"], None))
        else:
            out.append(("error_message", None, b["error_message"]))
    elif a["status"] == "error":
        if a["error_message"].split(". ")[0] not in b["error_message"]:
            out.append(("error_message", a["error_message"], b["error_message"]))
        if a["error_type"] != b["error_type"] and not (
                a["error_type"] == "ValueError" and b["error_type"] in ("ValidationError",)):
            out.append(("error_type", a["error_type"], b["error_type"]))
    else:
        for k in MODEL_FIELDS:
            if k == "mamba_chunk_size":
                continue
            if a["model"].get(k) != b["model"].get(k):
                out.append((f"model.{k}", a["model"].get(k), b["model"].get(k)))
        for k in CACHE_FIELDS:
            if a["cache"].get(k) != b["cache"].get(k):
                out.append((f"cache.{k}", a["cache"].get(k), b["cache"].get(k)))
        if a["backend"] != b["backend"]:
            out.append(("backend", a["backend"], b["backend"]))
        if a["messages"] != b["messages"]:
            out.append(("messages", a["messages"], b["messages"]))
        if not b["built"]:
            out.append(("built", True, b["build_error"]))
    return [(f, o, n, explain(f, o, n, a, b, args)) for f, o, n in out]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", default=os.path.join(HERE, "DIFF-019.md"))
    ap.add_argument("--public-only", action="store_true",
                    help="only public-034.json (the pairs compare-019.md counts)")
    ns = ap.parse_args(argv)
    with open(os.path.join(HERE, "..", "vllm-0.19.0", "cases.json")) as f:
        fixtures = json.load(f)["cases"]
    new = load_034(ns.public_only)
    pairs = [(c, new[c["name"]]) for c in fixtures if c["name"] in new]
    counts: collections.Counter = collections.Counter()
    legend: dict[str, str] = {}

    def key(why: str) -> str:
        return legend.setdefault(why, f"R{len(legend) + 1}")
    field_pairs: collections.Counter = collections.Counter()
    lines = []
    unexplained = 0
    for c, n in pairs:
        a, b = view_019(c), view_034(n)
        diffs = compare(a, b, c["engine_args"])
        seen = set()
        for field, old, new_v, why in diffs:
            counts[(field, why)] += 1
            if field not in seen:
                field_pairs[field] += 1
                seen.add(field)
            unexplained += why == "UNEXPLAINED"
        if diffs:
            lines.append(f"- **{c['name']}** `{json.dumps(c['engine_args'])}`")
            for field, old, new_v, why in diffs:
                if field == "messages":
                    gone = [m for m in old if m not in new_v]
                    added = [m for m in new_v if m not in old]
                    lines.append(f"  - messages ({key(why)}):"
                                 + (" same records, other order" if not gone and not added else ""))
                    lines += [f"    - 0.19 only: {lvl} {short(msg)}" for lvl, msg in gone]
                    lines += [f"    - 0.34 only: {lvl} {short(msg)}" for lvl, msg in added]
                else:
                    lines.append(f"  - {field}: {short(json.dumps(old))} → {short(json.dumps(new_v))}"
                                 f" ({key(why)})")
    both = sum(1 for c, n in pairs if view_019(c)["status"] == "resolved"
               and view_034(n)["status"] == "resolved")
    head = [
        "# vLLM 0.19.0 → 0.34.0, pair by pair",
        "",
        "Generated by `diff_019.py` (see its docstring for the sources and what is compared); "
        "rule ids refer to RULES.md.",
        "",
        f"Pairs: **{len(pairs)}** (fixture cases with a 0.34 answer); resolved by both: **{both}**.",
        "",
        "| field | pairs differing |",
        "|---|---|",
    ] + [f"| {f} | {v} |" for f, v in sorted(field_pairs.items())] + [
        "",
        "| field | rule | count |",
        "|---|---|---|",
    ] + [f"| {f} | {legend.get(w, '')} {w} | {v} |" for (f, w), v in sorted(counts.items())] + [
        "", "## Pairs", "", "(R… is the rule of the table above.)", ""]
    with open(ns.output, "w") as f:
        f.write("\n".join(head + lines) + "\n")
    print(f"{len(pairs)} pairs, {both} resolved by both, {unexplained} unexplained "
          f"differences -> {os.path.relpath(ns.output)}")
    for (fld, why), v in sorted(counts.items()):
        print(f"  {v:4d}  {fld}: {why}")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
