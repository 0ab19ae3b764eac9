#!/usr/bin/env python3
"""Write RESULTS.md: what changed between the vLLM releases whose answers are kept here, field by
field, on the 340 public cases (34 fixture configs x 10 argument sets).

    python tests/data/releases/summarize_releases.py          # rewrite RESULTS.md
    python tests/data/releases/summarize_releases.py --check  # exit 1 if it is stale

Releases compared, in order: 0.19.0 (the fixtures: config time only), every
``tests/data/vllm-X.Y.0/public-0YY.json.gz`` made by ``make_release_results.py``, and 0.34.0
(``tests/data/vllm-0.34.0/public-034.json``). For each pair of neighbours and each field, the
number of cases whose answer differs and a few of them; TIMELINE.md says which dated rule
explains each. Needs no vLLM.
"""
from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent
BUDGET_GIB = 64
EXAMPLES_PER_FIELD = 4


def answers_name(release: str) -> str:
    """`public-020.json.gz` for 0.20.0, as `public-034.json` is 0.34.0's."""
    major, minor = release.split(".")[:2]
    return f"public-{major}{int(minor):02d}.json.gz"


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def _status(res: dict) -> str:
    err = res.get("error")
    if not err:
        return "resolved"
    return f"error {err.get('root_type') or err.get('type')}"


def _kv_row(res: dict) -> dict:
    for row in ((res.get("kv") or {}).get("budgets") or []):
        if row.get("budget_gib") == BUDGET_GIB:
            return row
    return {}


def _kinds(by_kind):
    """Layer kinds as 0.34.0's oracle spells them (older releases print the enum member)."""
    if not by_kind:
        return by_kind
    return {re.sub(r"attn_type=AttentionType\.(\w+)", lambda m: f"attn_type={m[1].lower()}", k): v
            for k, v in by_kind.items()}


def facts_of_oracle(res: dict) -> dict:
    """The compared fields of one answer of the 0.34.0 oracle format."""
    final = res.get("final") or {}
    cache = final.get("cache_config") or {}
    attn = final.get("attention_config") or {}
    sched = final.get("scheduler_config") or {}
    model = final.get("model_config") or {}
    post = res.get("post_load") or {}
    after = post.get("after") or {}
    kv = res.get("kv") or {}
    row = _kv_row(res)
    tokens = row.get("kv_tokens_logged", row.get("kv_tokens"))
    conc = row.get("max_concurrency")
    out = {
        "status": _status(res),
        "architecture": model.get("architecture"),
        "is_hybrid": model.get("is_hybrid"),
        "config block_size": cache.get("block_size"),
        "enable_prefix_caching": cache.get("enable_prefix_caching"),
        "mamba_cache_mode": cache.get("mamba_cache_mode"),
        "config mamba_block_size": cache.get("mamba_block_size"),
        "gpu_memory_utilization": cache.get("gpu_memory_utilization"),
        "mamba_ssm_cache_dtype": cache.get("mamba_ssm_cache_dtype"),
        "attention backend": attn.get("backend"),
        "flash_attn_version": attn.get("flash_attn_version"),
        "max_num_batched_tokens": sched.get("max_num_batched_tokens"),
        "model-config messages": [m["message"] for m in res.get("logs") or []
                                  if m.get("logger") == "vllm.model_executor.models.config"],
    }
    if res.get("final") is not None and "post_load" in res:
        out.update({
            "class built": post.get("real_class_built"),
            "start-up block_size": after.get("block_size"),
            "start-up mamba_block_size": after.get("mamba_block_size"),
            "mamba_page_size_padded": after.get("mamba_page_size_padded"),
            "backends by layer kind": _kinds(post.get("attention_backends_by_layer_kind")),
            "start-up messages": [m["message"] for m in post.get("logs") or []],
            "KV groups": len(kv.get("groups") or []) if kv else None,
            f"KV blocks at {BUDGET_GIB} GiB": row.get("num_blocks"),
            f"logged KV tokens at {BUDGET_GIB} GiB": tokens,
            f"concurrency at {BUDGET_GIB} GiB": None if conc is None else round(conc, 4),
        })
    return out


def facts_of_fixture(case: dict) -> dict:
    """The same fields from a 0.19.0 fixture case (config time only)."""
    exp = case["expected"]
    cfg = exp.get("config") or {}
    cache = cfg.get("cache_config") or {}
    model = cfg.get("model_config") or {}
    status = "resolved" if exp.get("status") == "resolved" else \
        f"error {(exp.get('error') or {}).get('type')}"
    return {
        "status": status,
        "architecture": model.get("architecture"),
        "is_hybrid": model.get("is_hybrid"),
        "config block_size": cache.get("block_size"),
        "enable_prefix_caching": cache.get("enable_prefix_caching"),
        "mamba_cache_mode": cache.get("mamba_cache_mode"),
        "config mamba_block_size": cache.get("mamba_block_size"),
        "mamba_ssm_cache_dtype": cache.get("mamba_ssm_cache_dtype"),
        "attention backend": (cfg.get("attention_config") or {}).get("backend"),
        "model-config messages": [m["message"] for m in exp.get("messages") or []],
    }


def load_releases() -> dict[str, dict[str, dict]]:
    releases: dict[str, dict[str, dict]] = {}
    fixtures = json.loads((DATA / "vllm-0.19.0" / "cases.json").read_text())["cases"]
    releases["0.19.0"] = {c["name"]: facts_of_fixture(c) for c in fixtures}
    for folder in sorted(DATA.glob("vllm-*")):
        version = folder.name[len("vllm-"):]
        if version in ("0.19.0", "0.34.0"):
            continue
        path = folder / answers_name(version)
        if path.exists():
            with gzip.open(path, "rt") as f:
                answers = json.load(f)
            releases[version] = {r["name"]: facts_of_oracle(r) for r in answers["results"]}
    answers = json.loads((DATA / "vllm-0.34.0" / "public-034.json").read_text())
    releases["0.34.0"] = {r["name"]: facts_of_oracle(r) for r in answers["results"]}
    return dict(sorted(releases.items(), key=lambda kv: _version_key(kv[0])))


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    text = re.sub(r"\s+", " ", text)
    return text if len(text) <= 90 else text[:87] + "..."


def render(releases: dict[str, dict[str, dict]]) -> str:
    lines = ["# What changed between the releases run here (generated)", "",
             "Written by `summarize_releases.py` from the answers kept under `tests/data/`: the "
             "public cases two neighbouring releases both answered, compared field by field. "
             "0.19.0 is the fixtures (config time only: its start-up and KV fields are not "
             "compared). TIMELINE.md dates the rule behind each difference.", "",
             "Releases: " + ", ".join(f"{v} ({len(r)} cases)" for v, r in releases.items()), ""]
    versions = list(releases)
    for a, b in zip(versions, versions[1:]):
        names = sorted(set(releases[a]) & set(releases[b]))
        lines += [f"## {a} → {b}", "", f"{len(names)} cases answered by both.", "",
                  "| field | cases that differ | for example |", "|---|---|---|"]
        fields = [f for f in releases[b][names[0]] if f in releases[a][names[0]]]
        for field in fields:
            diffs = [n for n in names if releases[a][n].get(field) != releases[b][n].get(field)]
            if not diffs:
                continue
            shown = "; ".join(
                f"{n}: {_short(releases[a][n].get(field))} → {_short(releases[b][n].get(field))}"
                for n in diffs[:EXAMPLES_PER_FIELD])
            lines.append(f"| {field} | {len(diffs)} | {shown.replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    text = render(load_releases())
    target = HERE / "RESULTS.md"
    if "--check" in argv:
        return 0 if target.exists() and target.read_text() == text else 1
    target.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
