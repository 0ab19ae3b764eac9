"""Compare enginecfg with the answers of a vLLM release that was run (``tests/data/vllm-X.Y.Z/``).

Each release run between 0.19.0 and 0.34.0 answered the 340 public cases and the README's example
models (``public-*.json.gz``, ``examples-*.json.gz``; ``tests/data/releases/README.md``).
:func:`compare` asks enginecfg the same question through its public API (a
:class:`~enginecfg.Pipeline` for the release, on the GPU the oracle emulated, GPU validation off)
and lists every field where the two answers differ, as :class:`Difference` values: nothing is
asserted here, so a caller can count what differs (``python tests/release_oracle_support.py``)
or require that nothing does (``tests/test_release_oracles.py``).

What is compared, per case:

- a refusal: vLLM's exception type and the first sentence of its message;
- config time: the cache config, the model facts, the attention backend and FlashAttention
  version, chunked prefill, the token budget, the tensor parallel size, the pooler, and the
  lines vLLM's config module logs, in order;
- the start-up step: the backend of each kind of layer with its FlashAttention version and
  layer count, the distinct attention backends in layer order, the block size, Mamba block size
  and Mamba page padding after it, its log lines, and a model class that cannot be built or
  an engine that stops after building (vLLM's exception);
- the KV planning: the groups (layers, block size, page bytes), the bytes a request at
  max_model_len takes, and at each budget (2, 17, 64 and 500 GiB of KV cache) the blocks, the
  "GPU KV cache size" the release logs, the concurrency at max_model_len and at 1,024 / 8,192 /
  32,768 tokens, the largest max_model_len that fits, and the not-enough-memory text.

:func:`spoken_release` is the one place that maps a release run to the release enginecfg
answers for: the release itself once enginecfg speaks it, else the nearest one it speaks.
"""

from __future__ import annotations

import fnmatch
import gzip
import json
import re
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

from support import CONFIGS, DATA, EXAMPLES, REPO
from enginecfg import EngineCfgError, InvalidInputError, Pipeline

RELEASES = DATA / "releases"

#: the releases whose unmodified vLLM answered (``tests/data/vllm-X.Y.Z/``)
RUN_RELEASES = ("0.20.0", "0.24.0", "0.28.0", "0.32.0")

#: the answers' KV-cache budgets (GiB), as the oracle gave them in bytes
_CONTEXTS = (1024, 8192, 32768)

_CACHE = ("block_size", "user_specified_block_size", "cache_dtype", "enable_prefix_caching", "mamba_cache_mode",
          "mamba_block_size", "mamba_page_size_padded", "mamba_ssm_cache_dtype", "mamba_cache_dtype")
_MODEL = ("architecture", "dtype", "max_model_len", "is_hybrid", "is_attention_free", "use_mla", "head_size",
          "num_kv_heads", "total_num_kv_heads", "mamba_chunk_size", "runner_type", "convert_type", "quantization",
          "sliding_window", "model_type")
#: vLLM's config module, whose lines the config-time stages write as vLLM does
_CONFIG_LOGGER = "vllm.model_executor.models.config"
_CONFIG_STAGES = ("pooling", "gemma4-backend", "ssm-dtype", "mamba-cache-mode", "hybrid-alignment")


class Difference(NamedTuple):
    """One field where enginecfg's answer is not the release's."""

    release: str
    case: str  # "public:<name>" or "examples:<name>"
    field: str
    got: Any
    want: Any


def _version(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in release.split("."))


@cache
def timeline() -> dict[str, list[str]]:
    """``{release: [rule ids it brings]}`` for 0.19.1 … 0.34.0, read from the release room's
    ``TIMELINE.md`` by ``tools/make_release_rules.py`` (not from the ``rules.json`` it writes)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_release_rules", REPO / "tools" / "make_release_rules.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    parsed = tool.parse((REPO / "pipeline" / "releases" / "TIMELINE.md").read_text())
    return {r["release"]: [rule["id"] for rule in r["rules"]] for r in parsed if r["release"] != tool.BASE}


def spoken() -> tuple[str, ...]:
    """The releases enginecfg answers for."""
    from enginecfg.pipeline import rulepacks

    return tuple(sorted(rulepacks.releases(), key=_version))


def spoken_release(release: str) -> str:
    """The release enginecfg is asked for when comparing with *release*'s answers: *release*
    itself once enginecfg speaks it; until then the spoken release with the fewest dated rules
    between the two (:func:`timeline`), the older on a tie."""
    have = spoken()
    if release in have:
        return release
    order = ["0.19.0", *timeline()]
    at = order.index(release)

    def rules_between(other: str) -> int:
        lo, hi = sorted((at, order.index(other)))
        return sum(len(timeline()[r]) for r in order[lo + 1:hi + 1])

    return min(have, key=lambda other: (rules_between(other), _version(other)))


def _tag(release: str) -> str:
    major, minor = release.split(".")[:2]
    return f"{int(major)}{int(minor):02d}"


@cache
def answers(release: str) -> dict[str, dict]:
    """``{"public": answers, "examples": answers}`` of *release* (what exists of them)."""
    out = {}
    for kind in ("public", "examples"):
        for path in (DATA / f"vllm-{release}" / f"{kind}-{_tag(release)}.json.gz",
                     DATA / f"vllm-{release}" / f"{kind}-{_tag(release)}.json"):  # 0.34.0's, uncompressed
            if path.exists():
                with (gzip.open(path, "rt") if path.suffix == ".gz" else open(path)) as f:
                    out[kind] = json.load(f)
                break
    return out


def cases(release: str) -> list[tuple[str, dict]]:
    """``(case id, answer)`` of every case *release* answered."""
    return [(f"{kind}:{r['name']}", r) for kind, doc in answers(release).items() for r in doc["results"]]


def _folder(r: dict) -> str:
    name = Path(r["config_dir"]).name
    for root in (CONFIGS, EXAMPLES):
        if (root / name).exists():
            return str(root / name)
    raise FileNotFoundError(r["config_dir"])


def _gpu(release: str, case_id: str) -> str:
    return answers(release)[case_id.split(":")[0]]["platform"]["device_name"]


def _first_sentence(text: str) -> str:
    return " ".join(text.split()).split(". ")[0]


def _label(lb: dict) -> str:
    if lb["kind"] == "mamba":
        return lb["layer_class"]
    if lb["kind"] == "mla":
        return f"MLAAttention head_size={lb['head_size']}"
    window = f" sliding_window={lb['sliding_window']}" if lb["sliding_window"] else ""
    return f"{lb['layer_class']} attn_type={lb['attn_type']} head_size={lb['head_size']}{window}"


def _backend_label(lb: dict) -> str:
    if lb["backend"] == "FLASH_ATTN" and lb["fa_version"]:
        return f"FLASH_ATTN(FA{lb['fa_version']})"
    if lb["backend"] == "TRITON_FLASH_ATTN" and lb["fa_version"]:
        return f"TRITON_FLASH_ATTN(causal FA{lb['fa_version']})"
    return lb["backend"]


def _oracle_kind(label: str) -> str:
    """The oracle's layer-kind label as the 0.34.0 one writes it: releases before 0.34.0 print
    the attention type as the enum member (``attn_type=AttentionType.DECODER``), 0.34.0 as its
    value (``attn_type=decoder``) -- the same type, printed by another release's ``str()``."""
    return re.sub(r"attn_type=AttentionType\.(\w+)", lambda m: f"attn_type={m.group(1).lower()}", label)


def _error_text(exc: EngineCfgError) -> str:
    return f"{getattr(exc, 'vllm_type', None) or type(exc).__name__}: {' '.join(str(exc).split())}"


def _refusal(err: dict, exc: EngineCfgError | None) -> tuple[Any, Any] | None:
    """(got, want) where enginecfg's refusal is not vLLM's, else None."""
    if "calculate_kv_scales" in err["message"]:  # C6: an engine argument the release no longer has
        want = "InvalidInputError(field=calculate_kv_scales)"
        if isinstance(exc, InvalidInputError) and exc.field == "calculate_kv_scales":
            return None
        return (None if exc is None else _error_text(exc)), want
    root = err.get("root_type") or err["type"]
    message = err.get("root_message") or err["message"]
    if message.startswith("1 validation error for ModelConfig\n  Assertion failed"):  # a bare assert (C2)
        sentence = "1 validation error for ModelConfig: Assertion failed"
        ok = exc is not None and str(exc).startswith(sentence)
    else:
        sentence = _first_sentence(message)
        ok = exc is not None and sentence in " ".join(str(exc).split())
    if ok and exc.vllm_type == root:
        return None
    return (None if exc is None else _error_text(exc)), f"{root}: {sentence}"


def _resolve(release: str, case_id: str, r: dict, **impact: Any):
    pipe = Pipeline(vllm_version=spoken_release(release), gpu=_gpu(release, case_id), gpu_validation="off",
                    **({"impact": impact} if impact else {}))
    return pipe.resolve(_folder(r), **r["args"])


def compare(release: str, case_id: str, r: dict) -> list[Difference]:
    """Every field where enginecfg's answer to case *r* is not *release*'s (see the module doc)."""
    out: list[Difference] = []

    def differ(field: str, got: Any, want: Any) -> None:
        if got != want:
            out.append(Difference(release, case_id, field, got, want))

    # -- a refusal at config time
    try:
        result = _resolve(release, case_id, r)
    except EngineCfgError as exc:
        if r["error"] is None:
            differ("refusal", _error_text(exc), None)
        elif (pair := _refusal(r["error"], exc)) is not None:
            differ("refusal", *pair)
        return out
    if r["error"] is not None:
        differ("refusal", None, _refusal(r["error"], None)[1])
        return out
    doc = result.to_dict()
    final = r["final"]
    # -- config time
    for field in _CACHE:
        differ(f"cache_config.{field}", doc["config"]["cache_config"].get(field), final["cache_config"].get(field))
    for field in _MODEL:
        differ(f"model_config.{field}", doc["config"]["model_config"].get(field), final["model_config"].get(field))
    for field in ("backend", "flash_attn_version"):
        differ(f"attention_config.{field}", doc["config"]["attention_config"][field],
               final["attention_config"][field])
    sc = final["scheduler_config"]
    differ("scheduler_config.enable_chunked_prefill", doc["config"]["scheduler_config"]["enable_chunked_prefill"],
           sc["enable_chunked_prefill"])
    differ("parallel_config.tensor_parallel_size", doc["config"]["parallel_config"]["tensor_parallel_size"],
           final["parallel_config"]["tensor_parallel_size"])
    if final["pooler_config"] is not None:
        for field in ("seq_pooling_type", "tok_pooling_type"):
            differ(f"pooler_config.{field}", (doc["config"]["pooler_config"] or {}).get(field),
                   final["pooler_config"][field])
    st = doc["startup"] or {}
    at_start = {m["message"] for m in st.get("messages") or ()}
    differ("config log lines",
           [(m["level"], m["message"]) for m in doc["messages"]
            if m["stage"] in _CONFIG_STAGES and m["message"] not in at_start],
           [(m["level"], m["message"]) for m in r["logs"] if m["logger"] == _CONFIG_LOGGER])
    cache_lines = [m["message"] for m in r["logs"] if m["logger"] == "vllm.config.cache"]
    differ("cache log lines",
           [m["message"] for m in doc["messages"] if m["message"].startswith("Using ") and "kv cache" in m["message"]],
           cache_lines)
    # -- the start-up step
    pl = r.get("post_load")
    if pl is None:
        return out
    if not pl["real_class_built"]:
        f, want = st.get("failure"), pl["build_error"]
        differ("start-up: build failure", f and (f["step"], f["vllm_type"], f["message"]),
               ("build", want["type"], want["message"]))
        return out
    if pl.get("error"):
        f, want = st.get("failure"), pl["error"]
        differ("start-up: failure", f and (f["vllm_type"], f["message"]), (want["type"], want["message"]))
        return out
    # the engine core's block-size check after the KV planning (``validate_block_size``): the
    # oracle ran it beside the planning and kept its refusal with the KV answers
    check = (r.get("kv") or {}).get("validate_block_size")
    refused = (check["type"], check["message"]) if isinstance(check, dict) else None
    if st.get("failure") or refused:
        f = st.get("failure")
        differ("start-up: failure", f and (f["vllm_type"], f["message"]), refused)
        return out
    differ("start-up: backends by layer kind",
           {_label(lb): {_backend_label(lb): lb["layers"]} for lb in st["backends"]},
           {_oracle_kind(kind): backends for kind, backends in pl["attention_backends_by_layer_kind"].items()})
    differ("start-up: attention backends", list(result.startup.attention_backends), pl["non_ssm_backends"])
    for field in ("block_size", "mamba_block_size", "mamba_page_size_padded"):
        differ(f"start-up: {field}", st[field], pl["after"][field])
    differ("start-up log lines",
           [m["message"] for m in st["messages"] if m["message"].startswith(("Setting", "Padding"))],
           [m["message"] for m in pl["logs"]])
    # -- KV planning
    kv = r.get("kv")
    if kv is None:
        return out
    for want in kv["budgets"]:
        b = f"kv@{want['budget_gib']}GiB"
        imp = _resolve(release, case_id, r, kv_cache_memory=want["available_memory"], contexts=_CONTEXTS).impact
        if want is kv["budgets"][0]:
            differ("kv: groups", sorted((g.num_layers, g.block_size, g.page_size_bytes) for g in imp.groups),
                   sorted((g["n_layers"], g["spec"]["block_size"], g["spec"]["page_size_bytes"])
                          for g in kv["groups"]))
            differ("kv: bytes per request at max_model_len", imp.request_bytes,
                   kv["bytes_one_request_at_max_model_len"])
            differ("scheduler_config.max_num_batched_tokens", imp.max_num_batched_tokens,
                   final["scheduler_config"]["max_num_batched_tokens"])
        differ(f"{b}: max_model_len that fits", imp.max_model_len_fits, want["estimate_max_model_len"])
        if want["error"] is not None:
            differ(f"{b}: not-enough-memory text", imp.fits, want["error"])
            continue
        if imp.fits is not None:
            differ(f"{b}: not-enough-memory text", imp.fits, None)
            continue
        differ(f"{b}: num_blocks", imp.num_blocks, want["num_blocks"])
        differ(f"{b}: GPU KV cache size (logged)", imp.kv_tokens, want.get("kv_tokens_logged", want.get("kv_tokens")))
        differ(f"{b}: max_concurrency", imp.max_concurrency, want["max_concurrency"])
        mml = result.config.model_config.max_model_len
        differ(f"{b}: concurrency at",
               {n: imp.concurrency_at(n) for n in _CONTEXTS},
               {int(n): (v if int(n) <= mml else None) for n, v in want["max_concurrency_at"].items()})
    return out


# -- what differs on purpose ---------------------------------------------------------------

class Known(NamedTuple):
    """A difference that is an oracle artefact or deliberate: the releases it concerns
    (glob), the cases (glob over the case id), the field (glob), and why."""

    releases: str
    cases: str
    field: str
    reason: str


def known(d: Difference, table: tuple[Known, ...]) -> Known | None:
    """The entry of *table* that explains *d*, or None."""
    for k in table:
        if (fnmatch.fnmatchcase(d.release, k.releases) and fnmatch.fnmatchcase(d.case, k.cases)
                and fnmatch.fnmatchcase(d.field, k.field)):
            return k
    return None


def _main() -> None:
    """A development report: what differs, per release and field.

        python tests/release_oracle_support.py [RELEASE ...] [--json FILE]

    ``--json`` also writes every difference, as a list of objects, to FILE."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("releases", nargs="*", default=list(RUN_RELEASES))
    parser.add_argument("--json", dest="json_out")
    opts = parser.parse_args()
    everything = []
    for release in opts.releases:
        if not answers(release):
            print(f"{release}: no answers")
            continue
        diffs = [d for cid, r in cases(release) for d in compare(release, cid, r)]
        everything += diffs
        by_field = Counter(re.sub(r"@\d+GiB", "", d.field) for d in diffs)
        n_cases = len({d.case for d in diffs})
        print(f"== {release} (enginecfg {spoken_release(release)}): {len(diffs)} differences "
              f"in {n_cases} of {len(cases(release))} cases")
        for field, n in by_field.most_common():
            print(f"   {n:5d}  {field}")
    if opts.json_out:
        with open(opts.json_out, "w") as f:
            json.dump([d._asdict() for d in everything], f, default=str, indent=0)


if __name__ == "__main__":
    _main()
