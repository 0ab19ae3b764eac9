"""Human-readable output of a run: what changed, by which stage and why, then the config.

Each change is shown with vLLM's reason and, where the stage gave one, its explanation:
the rule and the numbers it used (the same text the audit store keeps, so ``why`` gives it
back).  Then GPU validation (passed, skipped and why), the equivalent ``vllm serve`` flags
(and the given ones it leaves out because the run's release does not take them),
the resolved config and where the run was recorded.  Values are spelt as JSON, as in every
other command.  Names (stages, fields) are never broken; prose wraps to the terminal.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from enginecfg.cli.tables import paragraph, render, width

__all__ = ["print_run", "value", "command_lines", "validation_line", "source_line", "impact_lines",
           "start_lines", "error_text", "start_gate"]


def value(v: Any) -> str:
    """A value as JSON spells it: ``null``, ``true``, ``"auto"``, ``16``."""
    return json.dumps(v, default=str)


def error_text(exc, args: dict[str, Any] | None = None) -> str:
    """A refusal's message on one line, followed by the flag given that it is about
    (``(--tensor-parallel-size 3)``) where the message does not name it already."""
    from enginecfg.pipeline.engine_args import given_flag

    text = " ".join(str(exc).split())
    flag = given_flag(getattr(exc, "field", None), args or {})
    if flag is not None and flag.split()[0] not in text:
        text += f" ({flag})"
    return text


def start_gate(imp, release: str, model: str | None = None) -> str | None:
    """Why ``--require-start`` refuses a run whose ``impact`` fact is *imp* (None: it passes):
    vLLM *release* would not start, or whether it would could not be worked out; only a start
    worked out passes."""
    starts = getattr(imp, "starts", None)
    if starts is True:
        return None
    who = f"{model}: " if model else ""
    if starts is False:
        return (f"enginecfg: does not start (--require-start): {who}vLLM {release} would stop at start-up "
                f"with {imp.start_error}")
    why = getattr(imp, "error", None) or "the impact stage recorded no figures"
    return (f"enginecfg: start not worked out (--require-start): {who}whether vLLM {release} would start "
            f"could not be decided: {why}")


def command_lines(tokens: list[str]) -> str:
    """A shell command wrapped with ``\\`` continuations, never between a flag and its value."""
    units: list[list[str]] = []
    for tok in tokens:
        if units and not tok.startswith("-") and units[-1][0].startswith("--") and len(units[-1]) == 1:
            units[-1].append(tok)
        else:
            units.append([tok])
    units = [" ".join(shlex.quote(t) for t in u) for u in units]
    limit = width() - 2
    lines, cur = [], "  " + units[0]
    for u in units[1:]:
        if len(cur) + 1 + len(u) > limit:
            lines.append(cur)
            cur = "      " + u
        else:
            cur += " " + u
    lines.append(cur)
    return " \\\n".join(lines)


def validation_line(doc: dict[str, Any]) -> str:
    v = doc.get("validation")
    if not v:
        return "GPU validation: not run (the gpu-validation stage was left out)"
    n = len(v.get("checks") or [])
    if v.get("status") == "passed":
        return f"GPU validation: passed, {n} kernel check(s) on {v.get('device')} (mode {v.get('mode')})"
    if v.get("status") == "failed":
        return f"GPU validation: FAILED (mode {v.get('mode')}); see the checks in the run document"
    return f"GPU validation: skipped (mode {v.get('mode')}): {v.get('reason')}"


def source_line(source: dict[str, Any] | None) -> str:
    """Where the model's files came from, and which were read (``(header)``: header bytes only)."""
    if not source:
        return ""
    if source["kind"] == "hub":
        where = f"Hugging Face repo {source['repo_id']} at commit {source['commit']}"
        if source.get("offline"):
            where += " (from the local cache)"
    else:
        where = f"{source['kind']} {source.get('path', source['model'])}"
    files = ", ".join(f["name"] + ("" if f["how"] == "file" else " (header)") for f in source["files"])
    return f"source: {where}; read: {files}"


def print_run(result, *, where: str, memory: dict[str, Any] | None = None, extra: list[str] | None = None) -> None:
    """The human report of a run; *memory* (the memory flags given) and *extra* (the other
    ``vllm serve`` options of a pasted command line) go into the equivalent serve command."""
    doc = result.to_dict()
    out = [f"run {result.run_id}: resolved {result.config.model}"]
    if doc.get("vllm_version"):
        gpu = doc.get("gpu") or {}
        out.append(f"as vLLM {doc['vllm_version']} decides it, on the {gpu.get('name')} (compute capability "
                   f"{gpu.get('capability')})")
        note = doc.get("vllm_release") or {}
        if note and not note.get("exact"):
            unwired = note.get("unwired") or []
            out.append(paragraph(
                f"vLLM {doc['vllm_version']} is composed from dated rules, and {len(unwired)} rule(s) in which it "
                f"differs from {note.get('reference')} are not wired yet ({', '.join(unwired[:8])}"
                f"{', ...' if len(unwired) > 8 else ''}): where they apply, its answer may differ from vLLM's "
                f"(enginecfg releases lists them)."))
    fallback = result.config.model_config.arch_fallback
    if fallback is not None:
        out.append(paragraph(f"Architecture: {fallback.note()}."))
    line = source_line(doc.get("source"))
    if line:
        out.append(paragraph(line, indent="", hanging="  "))
    if result.changes:
        out.append(render(["#", "stage", "field", "from", "to"],
                          [[c.seq, c.stage, c.field, value(c.old), value(c.new)] for c in result.changes],
                          names=(0, 1, 2), title="What changed, by which stage:"))
        out.append("Why:")
        for c in result.changes:
            out.append(paragraph(f"#{c.seq} {c.field}: {c.reason}", indent="  ", hanging="      "))
            if c.explanation:
                out.append(paragraph(c.explanation, indent="      "))
    else:
        out.append("No stage changed anything.")
    reasons = {c.reason for c in result.changes}
    others = [m for m in result.messages if m.message not in reasons]
    if others:
        out.append("Messages:")
        out += [paragraph(f"{m.level} {m.stage}: {m.message}", indent="  ", hanging="      ") for m in others]
    out.append(validation_line(doc))
    from enginecfg.commands.serve import not_taken, serve_command

    out.append("Equivalent vllm serve command (pins the resolved values):")
    out.append(command_lines(serve_command(result, memory=memory, extra=extra or ())))
    dropped = list(dict.fromkeys(not_taken(result, extra or ())))
    if dropped:
        out.append(paragraph(f"Left out of it: {', '.join(dropped)}, given on the command line: vllm serve "
                             f"{result.vllm_version} does not take {'it' if len(dropped) == 1 else 'them'}.",
                             indent="  ", hanging="    "))
    rows = [[f"{sec}.{k}", value(v)] for sec, fields in doc["config"].items() if fields
            for k, v in fields.items()]
    out.append(render(["field", "value"], rows, names=(0,), title="Resolved config:"))
    out += [paragraph(line) for line in startup_lines(result)]
    out += [paragraph(line) for line in impact_lines(result)]
    out.append(f"fingerprint {result.fingerprint}")
    out.append(where)
    print("\n".join(line for line in out if line != ""))


def startup_lines(result) -> list[str]:
    """What the engine start decides (the ``startup`` fact): its block sizes and, when vLLM
    would not start, why."""
    st = result.facts.get("startup")
    if st is not None and not hasattr(st, "block_size"):
        if st.failure is not None:
            return [f"Engine start: vLLM would not start: {st.failure.text}."]
        return [f"Engine start not worked out: {st.error}"]
    if st is None:
        return []
    backends = ", ".join(st.attention_backends) or "no attention layer"
    line = (f"Engine start on the {st.gpu} (vLLM {st.release}): attention on {backends}; block size "
            f"{st.block_size:,}" + (f", {st.engine_block_size:,} after KV-cache planning"
                                    if st.engine_block_size not in (None, st.block_size) else "") + ".")
    if st.failure is not None:
        f = st.failure
        line += (f" vLLM would not start: {f.vllm_type}" + (f": {f.message}" if f.message else "")
                 + f" ({f.reason}).")
    return [line]


def _release(name: str | None):
    from enginecfg.pipeline import releases

    return releases.get(name) if releases.known(name) else releases.last()


def impact_lines(result) -> list[str]:
    """The run's KV-cache headline (``enginecfg explain`` has the rest): the figures vLLM
    would log at start-up, in its own words, or the error it would stop with instead."""
    from enginecfg.pipeline.models.capacity import Impact, ImpactUnavailable

    imp = result.facts.get("impact")
    if isinstance(imp, ImpactUnavailable):
        return [f"KV-cache figures unavailable: {imp.error}"] + start_lines(imp, result.vllm_version)
    if not isinstance(imp, Impact):
        return []
    out = start_lines(imp, result.vllm_version)
    if not imp.groups:
        return out + ["No layer keeps a KV cache."]
    if not imp.starts:
        return out
    mem = imp.memory
    if mem.source == "estimate":
        basis = "what vLLM's worker leaves after the weights, the profiling run and the memory outside torch"
        if mem.is_range:
            basis += (f"; range {mem.kv_cache_memory_low / 2**30:.2f}-{mem.kv_cache_memory_high / 2**30:.2f} GiB, "
                      f"the parts being estimates")
    else:
        basis = "--kv-cache-memory-bytes"
    size = f"GPU KV cache size: {imp.kv_tokens:,} tokens"
    concurrency = f"Maximum concurrency for {imp.max_model_len:,} tokens per request: {imp.max_concurrency:.2f}x"
    # K6c: one line from 0.28.0 on, two before
    logged = f"\"{size}, {concurrency}\"" if _release(result.vllm_version).has("K6c") \
        else f"\"{size}\" and \"{concurrency}\""
    line = (f"KV cache ({mem.gpu}, {mem.kv_cache_memory / 2**30:.2f} GiB per GPU, {basis}): vLLM would "
            f"log {logged}")
    r = imp.kv_range
    if r is not None:
        line += f" ({r.kv_tokens[0]:,}-{r.kv_tokens[1]:,} tokens over the memory's range)"
    return [line + " (enginecfg explain for the details)."]


def start_lines(imp, release: str | None = None) -> list[str]:
    """Whether vLLM *release* (None: the first release spoken for) would start with these figures (an ``Impact``, or an
    ``ImpactUnavailable`` that may still carry a verdict): nothing when it would, else its
    error, as it prints it, and the largest max_model_len that fits; or that it is not known."""
    if imp.starts:
        return []
    if release is None:
        from enginecfg.pipeline import releases

        release = releases.first().name
    if imp.starts is None:
        return [f"Whether vLLM {release} would start: not worked out."]
    out = [f"Does not start: vLLM {release} would stop at start-up with {imp.start_error}"]
    if getattr(imp, "groups", None) and imp.fits is not None:
        out.append(f"Largest max_model_len that fits: {imp.max_model_len_fits:,}"
                   + (" (none: not one token fits)." if imp.max_model_len_fits == 0 else "."))
    return out
