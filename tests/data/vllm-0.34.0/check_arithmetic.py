#!/usr/bin/env python3
"""Recompute vLLM 0.34.0's start-up block size and KV planning from an oracle result file.

RULES.md (beside this file) states the rules as formulas; this script applies them to the
oracle's inputs and compares every figure with what the real vLLM 0.34.0 reported. It reads
only the JSON (no vLLM, no torch), so it runs anywhere:

    python tests/data/vllm-0.34.0/check_arithmetic.py                       # public-034.json
    python tests/data/vllm-0.34.0/check_arithmetic.py RESULTS.json [-v] [--only SUBSTR]

Inputs taken from a result: the model facts of `final` (max_model_len, scheduler limits, cache
mode), the per-layer KV specs the model runner built (`kv.layer_specs`: kind, heads, head size,
dtype, window, Mamba shapes), the layer classes and backends of `post_load`, the page facts of
`page_sizes` and the budgets. Everything else (pages, the aligned block size, the padding, the
groups, bytes per block, blocks, concurrency, tokens, the length estimate and the
not-enough-memory text) is recomputed and compared. Exit status 1 when anything differs.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import sys

GIB = 1 << 30
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "uint8": 1, "int8": 1,
               "float8_e4m3fn": 1, "float8_e5m2": 1}
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_RESULTS = os.path.join(HERE, "public-034.json")

#: Mamba layer classes whose spec reserves one extra "prefill checkpoint" block per request
#: in align mode (rule K6). MambaMixer2 always declares it; the Qwen GDN layer only when its
#: prefill runs on FlashInfer (capability 9.0, or 10.x with head_k_dim 128 and CUDA 13).
CHECKPOINT_BLOCK_ALWAYS = {"MambaMixer2"}
CHECKPOINT_BLOCK_FLASHINFER_GDN = {"QwenGatedDeltaNetAttention"}


def open_json(path: str):
    """Read a results file, gzipped (`.json.gz`, as committed) or not."""
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        path += ".gz"
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def fmt_gib(n: int) -> str:
    """vLLM's format_gib: the value rounded to 2 decimals, printed the Python way."""
    return f"{round(n / GIB, 2)}"


# ---------------------------------------------------------------------------------------
# pages (rules P1-P3)
# ---------------------------------------------------------------------------------------
def attention_page(spec: dict, block: int | None = None) -> int:
    """P1: block x kv_heads x (head_size + head_size_v) x bytes(dtype)."""
    b = spec["block_size"] if block is None else block
    if spec["type"] == "MLAAttentionSpec":          # one latent vector a token, no V
        if spec.get("cache_dtype_str") == "fp8_ds_mla":
            return b * 656
        return b * spec["num_kv_heads"] * spec["head_size"] * DTYPE_BYTES[spec["dtype"]]
    hs_v = spec.get("head_size_v")
    hs_v = spec["head_size"] if hs_v is None else hs_v
    return b * spec["num_kv_heads"] * (spec["head_size"] + hs_v) * DTYPE_BYTES[spec["dtype"]]


def mamba_page(shapes, dtypes, alignment: int = 1) -> int:
    """P2: sum of prod(shape) x bytes(dtype), each rounded up to the state alignment."""
    total = 0
    for shape, dt in zip(shapes, dtypes):
        n = math.prod(shape) * DTYPE_BYTES[dt]
        total += cdiv(n, alignment) * alignment
    return total


def spec_page(spec: dict) -> int:
    if spec["type"] == "MambaSpec":
        real = mamba_page(spec["shapes"], spec["dtypes"])
    else:
        real = attention_page(spec)
    padded = spec.get("page_size_padded")
    return padded if padded is not None else real


# ---------------------------------------------------------------------------------------
# per-request blocks of one layer spec (rules K4-K7)
# ---------------------------------------------------------------------------------------
def blocks_per_request(spec: dict, facts: dict, max_model_len: int) -> int:
    t = spec["type"]
    if t in ("FullAttentionSpec", "MLAAttentionSpec"):
        return cdiv(max_model_len, spec["block_size"])
    if t == "SlidingWindowSpec":
        held = min(spec["sliding_window"] - 1 + facts["in_flight_tokens"], max_model_len)
        return cdiv(held, spec["block_size"]) + 1
    if t == "MambaSpec":
        spec_blocks = spec.get("num_speculative_blocks") or 0
        if facts["mamba_cache_mode"] == "align":
            return 2 + spec_blocks + spec.get("_checkpoint_blocks", 0)
        return 1 + spec_blocks
    raise ValueError(f"no rule for {t}")


# ---------------------------------------------------------------------------------------
# groups (rules G1-G5)
# ---------------------------------------------------------------------------------------
def spec_key(spec: dict) -> tuple:
    keys = ("type", "block_size", "num_kv_heads", "head_size", "head_size_v", "dtype",
            "sliding_window", "kv_quant_mode", "page_size_padded")
    mk = ("shapes", "dtypes", "mamba_cache_mode", "num_speculative_blocks", "_checkpoint_blocks")
    return tuple(json.dumps(spec.get(k), sort_keys=True) for k in keys + mk)


def same_type(specs: list[dict]) -> bool:
    """G2: one block size and one 'kind' (full attention of any shape, one sliding window,
    or Mamba specs with equal pages and extra blocks)."""
    if len({s["block_size"] for s in specs}) > 1:
        return False
    first = specs[0]
    if first["type"] in ("FullAttentionSpec", "MLAAttentionSpec"):
        return all(s["type"] == first["type"] for s in specs)
    if first["type"] == "SlidingWindowSpec":
        return all(s["type"] == "SlidingWindowSpec"
                   and s["sliding_window"] == first["sliding_window"] for s in specs)
    if first["type"] == "MambaSpec":
        return all(s["type"] == "MambaSpec" and spec_page(s) == spec_page(first)
                   and (s.get("num_speculative_blocks") or 0)
                   == (first.get("num_speculative_blocks") or 0)
                   and s.get("_checkpoint_blocks", 0) == first.get("_checkpoint_blocks", 0)
                   for s in specs)
    return False


def make_groups(kinds: list[dict], block_outermost: bool = False) -> list[dict]:
    """kinds: [{**spec, 'n': layers}] in layer order of first appearance.
    Returns [{'spec': spec, 'n': layers, 'pages': [page per layer], 'uniform_type': bool}]."""
    if block_outermost:
        raise NotImplementedError("packed groups (block-outermost layouts) are not modelled here")
    if len(kinds) == 1:                                  # G1: every layer the same spec
        k = kinds[0]
        return [{"spec": k, "n": k["n"], "pages": [spec_page(k)] * k["n"], "uniform_type": False}]
    if same_type(kinds):                                 # G2: one group, pages summed per layer
        pages = [spec_page(k) for k in kinds for _ in range(k["n"])]
        return [{"spec": kinds[0], "n": len(pages), "pages": pages, "uniform_type": True,
                 "members": kinds}]
    # G3: unify pages to the largest one
    top = max(spec_page(k) for k in kinds)
    unified = []
    for k in kinds:
        k = dict(k)
        p = spec_page(k)
        if p != top:
            if k["type"] == "MambaSpec":
                k["page_size_padded"] = top
            elif top % p == 0:
                k["block_size"] = k["block_size"] * (top // p)
            else:
                k["page_size_padded"] = top
        unified.append(k)
    # G4: layers with equal specs share a bucket (FullAttention specs that merge also do)
    buckets: list[dict] = []
    for k in unified:
        for b in buckets:
            if spec_key(b) == spec_key(k):
                b["n"] += k["n"]
                break
        else:
            buckets.append(dict(k))
    counts = [b["n"] for b in buckets]
    size = min(counts)
    if max(counts) < size * 1.5:
        size = max(counts)
    groups = []
    for b in buckets:
        n_groups = cdiv(b["n"], size)
        for i in range(n_groups):
            n = len(range(i, b["n"], n_groups))
            groups.append({"spec": b, "n": n, "pages": [spec_page(b)] * n, "uniform_type": False})
    return groups


def group_blocks_per_request(g: dict, facts: dict, max_model_len: int) -> int:
    if g.get("uniform_type"):
        return max(blocks_per_request(m, facts, max_model_len) for m in g["members"])
    return blocks_per_request(g["spec"], facts, max_model_len)


# ---------------------------------------------------------------------------------------
# the start-up block size (rules S1-S6)
# ---------------------------------------------------------------------------------------
def fa_version(model_head: int, capability: tuple, forced: int | None) -> int:
    """B3: the FlashAttention version FLASH_ATTN runs for the model-level head size."""
    major = capability[0]
    v = 3 if major == 9 else (4 if major == 10 else 2)
    if forced is not None:
        v = forced
    if major >= 10 and v == 3:
        v = 4
    if v == 3 and major == 9 and model_head > 256:
        v = 4
    return v


def kernel_min_block(name: str, model_head: int, kv_fp8: bool, capability: tuple,
                     forced_fa: int | None) -> int:
    """B2: smallest kernel block of one attention backend class, asked without a layer spec
    (so with the model-level head size), as update_block_size_for_backend asks it."""
    if name in ("FLASH_ATTN", "TRITON_FLASH_ATTN"):
        v = fa_version(model_head, capability, forced_fa)
        if capability[0] == 9 and kv_fp8 and model_head == 512 and v == 4:
            return 64
        if capability[0] in (10, 11) and model_head == 256 and v == 4:
            return 128
        return 16
    if name in ("TRITON_ATTN", "FLASHINFER"):
        return 16
    if name in MLA_KERNEL_MIN:
        return MLA_KERNEL_MIN[name]
    raise ValueError(f"no kernel table entry for {name}")


#: smallest kernel block of the MLA backends (table B2)
MLA_KERNEL_MIN = {"FLASHMLA": 64, "FLASH_ATTN_MLA": 16, "FLASHINFER_MLA": 32,
                  "TRITON_MLA": 16, "CUTLASS_MLA": 128}
ATTENTION_BACKENDS = ("FLASH_ATTN", "TRITON_ATTN", "TRITON_FLASH_ATTN", "FLASHINFER",
                      *MLA_KERNEL_MIN)


def startup_block_size(case: dict, capability: tuple = (9, 0)) -> dict:
    """S1-S6: update_block_size_for_backend, from the backends the layers chose."""
    fin = case["final"]
    cc, mc, ac = fin["cache_config"], fin["model_config"], fin["attention_config"]
    pl = case["post_load"]
    before = pl["before"]
    block = before["block_size"]
    kv_fp8 = cc["cache_dtype"].startswith("fp8")
    model_head = mc["head_size"]
    forced = ac.get("flash_attn_version")
    # distinct non-SSM backend classes, in layer order (the oracle lists kinds in order)
    names = []
    for kind, counts in pl["attention_backends_by_layer_kind"].items():
        for label in counts:
            n = label.split("(")[0]
            if n in ATTENTION_BACKENDS and n not in names:
                names.append(n)
    mbs, padded = before["mamba_block_size"], before["mamba_page_size_padded"]
    logs: list[str] = []
    if not names:                                               # S0: no attention layer
        return {"block_size": block, "mamba_block_size": mbs,
                "mamba_page_size_padded": padded, "logs": logs}
    mins = {n: kernel_min_block(n, model_head, kv_fp8, capability, forced) for n in names}
    if not cc["user_specified_block_size"]:                      # S1
        if len(names) == 1:
            preferred = max(64, mins[names[0]]) if mins[names[0]] > 64 else (
                64 if 64 % mins[names[0]] == 0 else mins[names[0]])
        else:
            preferred = 64 if all(64 % m == 0 for m in mins.values()) else math.lcm(*mins.values())
        if preferred != 64:
            logs.append(f"Setting kv cache block size to {preferred} for "
                        f"{'/'.join(names)} backend(s).")
        block = preferred
    if mc["is_hybrid"]:                                          # S2-S6
        ps = case["page_sizes"]
        attn1 = ps["attn_page_size_1_token_generic"]
        mp = ps["mamba_page_size"]
        if mp:
            align = max(mins[names[0]], block)
            backend_align = math.lcm(*mins.values())
            if mc["use_mla"]:
                align = max(align, 128)
            mode = cc["mamba_cache_mode"]
            if mode == "align":
                align = math.lcm(align, checkpoint_alignment(case, capability) or 1)
            attn_block = align * cdiv(mp, align * attn1)
            attn_block = backend_align * cdiv(attn_block, backend_align)
            if block < attn_block:
                block = attn_block
                logs.append(f"Setting attention block size to {attn_block} tokens to ensure "
                            "that attention page size is >= mamba page size.")
            if mode == "align":
                mbs = block
            page = block * attn1
            assert page >= mp
            if page != mp and padded != page:
                padded = page
                pct = 100 * (page - mp) / mp
                logs.append(f"Padding mamba page size by {pct:.2f}% to ensure that mamba page "
                            "size and attention page size are exactly equal.")
    skip = cc.get("kv_cache_dtype_skip_layers") or []
    if skip:                                                     # S7: mixed KV dtypes
        kvh, head = mc["num_kv_heads"], model_head
        primary = kvh * 2 * head * (1 if kv_fp8 else DTYPE_BYTES[mc["dtype"]])
        wide = kvh * 2 * head * DTYPE_BYTES[mc["dtype"]]
        if wide > primary:
            smallest = mins[names[0]]
            unit = max(smallest, block)
            required = max(wide * smallest, padded or 0)
            primary_block = unit * cdiv(required, unit * primary)
            if block < primary_block:
                block = primary_block
                logs.append(f"Setting attention block size to {primary_block} tokens so the "
                            "quantized primary KV page covers the higher-precision padded-spec page.")
            if padded is not None:
                padded = block * primary
    return {"block_size": block, "mamba_block_size": mbs, "mamba_page_size_padded": padded,
            "logs": logs}


def checkpoint_alignment(case: dict, capability: tuple) -> int | None:
    """S4: lcm of the Mamba layers' prefill checkpoint alignments, None when one has none."""
    kinds = [k for k in case["post_load"]["attention_backends_by_layer_kind"]
             if not k.startswith("Attention")]
    align = 1
    for k in kinds:
        if k == "QwenGatedDeltaNetAttention" and gdn_prefill_on_flashinfer(case, capability):
            align = math.lcm(align, 64)
        else:
            return None
    return align


def gdn_prefill_on_flashinfer(case: dict, capability: tuple) -> bool:
    if capability == (9, 0):
        return True
    if capability[0] in (10, 12):
        return case.get("_head_k_dim", 128) == 128
    return False


# ---------------------------------------------------------------------------------------
# KV planning (rules K1-K10)
# ---------------------------------------------------------------------------------------
def hint(cc: dict) -> str:
    if cc.get("enable_extensible_kv_cache"):
        util = cc.get("gpu_memory_utilization")
        util = 1.0 if util is None else util
        if util < 1.0:
            return ("The KV cache gets what is left after the model and its activations within "
                    f"`gpu_memory_utilization`={util}; increase it (with the extensible KV cache "
                    "it defaults to 1.0) or decrease `max_model_len` or `max_num_seqs`.")
        return ("The extensible KV cache already takes all device memory left after the model "
                "and its activations; decrease `max_model_len` or `max_num_seqs`, or the model "
                "needs a device with more memory.")
    return ("Try increasing `gpu_memory_utilization` when initializing the engine (this flag "
            "also controls CPU memory reservation on the CPU backend, despite its name).")


def plan(case: dict, capability: tuple = (9, 0)) -> dict:
    fin = case["final"]
    cc, sc, mc = fin["cache_config"], fin["scheduler_config"], fin["model_config"]
    kv = case["kv"]
    pp = fin["parallel_config"]["pipeline_parallel_size"]
    facts = {
        "in_flight_tokens": (pp + 1 if sc["async_scheduling"] else pp) * sc["max_num_batched_tokens"],
        "mamba_cache_mode": cc["mamba_cache_mode"],
    }
    layer_classes = set(case["post_load"]["attention_backends_by_layer_kind"])
    ckpt = 0
    if cc["mamba_cache_mode"] == "align":
        if layer_classes & CHECKPOINT_BLOCK_ALWAYS:
            ckpt = 1
        if (layer_classes & CHECKPOINT_BLOCK_FLASHINFER_GDN
                and checkpoint_alignment(case, capability) is not None):
            ckpt = 1
    kinds = []
    for s in kv["layer_specs"]:
        s = dict(s)
        if s["type"] == "MambaSpec":
            s["_checkpoint_blocks"] = ckpt
        s["n"] = s.pop("n_layers")
        kinds.append(s)
    if sc.get("disable_hybrid_kv_cache_manager"):                    # G-1: no hybrid manager
        full_blocks = {k["block_size"] for k in kinds if k["type"] == "FullAttentionSpec"}
        if full_blocks and any(k["type"] == "SlidingWindowSpec" for k in kinds):
            fb = next(iter(full_blocks)) if len(full_blocks) == 1 else None
            for k in kinds:
                if k["type"] == "SlidingWindowSpec":
                    k["type"] = "FullAttentionSpec"
                    k["block_size"] = fb or k["block_size"]
                    k["sliding_window"] = None
    # the oracle lists kinds in an arbitrary order; grouping only needs the counts
    groups = make_groups(kinds)
    out = {"groups": [(g["n"], "UniformTypeKVCacheSpecs" if g.get("uniform_type")
                       else g["spec"]["type"], g["spec"]["block_size"], sum(g["pages"])
                       if g.get("uniform_type") else spec_page(g["spec"])) for g in groups]}
    bpb = max(sum(g["pages"]) for g in groups)                     # K2
    out["bytes_per_block"] = bpb
    mml = mc["max_model_len"]

    def per_request(n_tokens: int) -> int:
        return sum(group_blocks_per_request(g, facts, n_tokens) for g in groups)

    out["bytes_one_request_at_max_model_len"] = bpb * per_request(mml)
    rows = []
    for b in kv["budgets"]:
        budget = b["available_memory"]
        usable = budget - bpb                                        # K3: the null block
        row = {"budget_gib": b["budget_gib"]}
        needed = bpb * per_request(mml)

        def fits(n: int) -> bool:
            return bpb * per_request(n) <= usable
        est = 0
        if fits(1):
            lo, hi, est = 1, mml, 1
            while lo <= hi:
                mid = (lo + hi) // 2
                if fits(mid):
                    est, lo = mid, mid + 1
                else:
                    hi = mid - 1
        row["estimate_max_model_len"] = est
        if usable <= 0:
            row["error"] = ("No available memory for the cache blocks. " + hint(cc) +
                            " See https://docs.vllm.ai/en/latest/configuration/conserving_memory/"
                            " for more details.")
        elif needed > usable:
            est_msg = ("Based on the available memory, the estimated maximum model length is "
                       f"{est}. ") if est > 0 else ""
            row["error"] = (
                f"To serve at least one request with the model's max seq len ({mml}), "
                f"({fmt_gib(needed)} GiB KV cache is needed, which is larger than the available "
                f"KV cache memory ({fmt_gib(usable)} GiB). {est_msg}{hint(cc)} Decreasing "
                "`max_model_len` also reduces what is needed. See "
                "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
        else:
            row["error"] = None
            nb = budget // bpb                                       # K8
            conc = nb / per_request(mml)                             # K9
            row.update({
                "num_blocks": nb,
                "engine_block_size": min(g["spec"]["block_size"] for g in groups),
                "max_concurrency": conc,
                "kv_tokens": int(conc * mml),                        # K10
                "kv_tokens_019_formula": nb // len(groups) * min(g["spec"]["block_size"]
                                                                 for g in groups),
                "max_concurrency_at": {str(n): nb / per_request(n) for n in (1024, 8192, 32768)},
            })
        rows.append(row)
    out["budgets"] = rows
    return out


# ---------------------------------------------------------------------------------------
def compare(case: dict, capability: tuple, verbose: bool) -> list[str]:
    diffs = []
    pl = case.get("post_load") or {}
    if not pl.get("real_class_built") or pl.get("error"):
        return diffs
    got = startup_block_size(case, capability)
    after = pl["after"]
    for k in ("block_size", "mamba_block_size", "mamba_page_size_padded"):
        if got[k] != after[k]:
            diffs.append(f"startup {k}: rule {got[k]} vllm {after[k]}")
    want_logs = [r["message"] for r in pl["logs"] if r["logger"] == "vllm.platforms.interface"]
    if got["logs"] != want_logs:
        diffs.append(f"startup logs: rule {got['logs']} vllm {want_logs}")
    kv = case.get("kv") or {}
    if not kv.get("budgets"):
        return diffs
    for s in kv["layer_specs"]:
        if spec_page(s) != s["page_size_bytes"]:
            diffs.append(f"page of {s['type']}: rule {spec_page(s)} vllm {s['page_size_bytes']}")
    p = plan(case, capability)
    want_groups = sorted((g["n_layers"], g["spec"]["type"], g["spec"]["block_size"],
                          g["spec"]["page_size_bytes"]) for g in kv["groups"])
    if sorted(p["groups"]) != want_groups:
        diffs.append(f"groups: rule {sorted(p['groups'])} vllm {want_groups}")
    for k in ("bytes_per_block", "bytes_one_request_at_max_model_len"):
        if p[k] != kv[k]:
            diffs.append(f"{k}: rule {p[k]} vllm {kv[k]}")
    for mine, theirs in zip(p["budgets"], kv["budgets"]):
        for k, v in mine.items():
            w = theirs.get(k)
            if isinstance(v, float) or isinstance(v, dict):
                ok = (json.dumps(v, sort_keys=True) == json.dumps(w, sort_keys=True)
                      or (isinstance(v, float) and w is not None and abs(v - w) <= 1e-9 * abs(w)))
            else:
                ok = v == w
            if not ok:
                diffs.append(f"{theirs['budget_gib']} GiB {k}: rule {v!r} vllm {w!r}")
    return diffs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="?", default=DEFAULT_RESULTS)
    ap.add_argument("--only")
    ap.add_argument("-v", "--verbose", action="store_true")
    ns = ap.parse_args(argv)
    data = open_json(ns.results)
    cap = tuple(data["platform"]["device_capability"])
    n_checked = n_bad = 0
    for case in data["results"]:
        if ns.only and ns.only not in case["name"]:
            continue
        if not (case.get("post_load") or {}).get("real_class_built"):
            continue
        n_checked += 1
        diffs = compare(case, cap, ns.verbose)
        if diffs:
            n_bad += 1
            print(f"{case['name']}:")
            for d in diffs:
                print(f"   {d}")
        elif ns.verbose:
            print(f"{case['name']}: ok")
    print(f"{n_checked} cases with a built model class checked on capability "
          f"{cap[0]}.{cap[1]}: {n_checked - n_bad} match every figure, {n_bad} differ")
    return 1 if n_bad else 0


if __name__ == "__main__":
    sys.exit(main())
