"""``upgrade``: what moving a deployment from one vLLM release to another changes, before
anything loads.

:func:`upgrade` resolves one model with the same engine arguments, on the same GPU and memory
flags, under two rule packs (``Pipeline(vllm_version=...)``), and returns an :class:`Upgrade`:

- every decision side by side (:class:`FieldChange`): the config-time fields either release's
  stages set, the start-up decisions (the block size the engine runs with, the Mamba block
  size and page padding, the attention backend of each kind of layer) and the
  ``gpu_memory_utilization`` the figures assume; each field that differs is tied to the rule
  behind it and the release that brought it (the dated rules in force in exactly one of the two
  releases, :func:`enginecfg.pipeline.releases.changes.explain`), or says that the rule is not
  identified;
- the KV capacity, the concurrency and whether the engine starts, under each release, with
  the ratios (:class:`Capacity`);
- a release that refuses the setting (an :class:`~enginecfg.EngineCfgError`) is reported for
  its side (:class:`Side` ``error``) while the other side is still shown.

The rule text is data, in the release room (:mod:`enginecfg.pipeline.releases.changes`): a
situation, the dated rules that bring it, its name in the release notes and its words;
:func:`_situation` only recognises which situation a difference is.  ``to_dict()`` is ``enginecfg upgrade --json``.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

import attrs

from enginecfg.commands._memory import memory_options, split_memory
from enginecfg.pipeline import releases, rulepacks
from enginecfg.pipeline.releases import changes
from enginecfg.pipeline.document import RunResult
from enginecfg.pipeline.errors import EngineCfgError, InvalidInputError
from enginecfg.pipeline.jsonvalue import to_json
from enginecfg.pipeline.models.capacity import Impact
from enginecfg.pipeline.models.startup import Startup
from enginecfg.pipeline.run import Pipeline

__all__ = ["Rule", "rule_for", "DEFAULT_FROM", "DEFAULT_TO", "RULE_NOT_IDENTIFIED", "FieldChange", "Side", "Capacity", "Upgrade",
           "upgrade"]

RULE_NOT_IDENTIFIED = "rule not identified"


@attrs.frozen
class Rule:
    """Why a field differs between two releases: the release that changed it (``"0.28"``,
    ``"0.28-0.32"``, as the dated timeline has it), the rule's id in the release's notes
    (``tests/data/vllm-0.34.0/RULES.md``) or the timeline's ids of the later steps, and the
    change in words."""

    release: str | None
    rule: str
    words: str

    def text(self) -> str:
        when = self.release if self.release is not None else "release not named"
        return f"{when} [{self.rule}]: {self.words}"

    def to_dict(self) -> dict[str, Any]:
        return {"release": self.release, "rule": self.rule, "words": self.words}


#: the releases ``upgrade`` compares unless told otherwise: the first spoken for and the latest
DEFAULT_FROM = releases.first().name
DEFAULT_TO = releases.last().name


#: the config-time fields every upgrade shows, whether a stage set them or not
CORE_FIELDS = ("cache_config.block_size", "cache_config.enable_prefix_caching", "cache_config.mamba_cache_mode",
               "cache_config.mamba_block_size", "cache_config.mamba_ssm_cache_dtype",
               "attention_config.backend", "scheduler_config.enable_chunked_prefill")
#: the start-up decisions every upgrade shows (``startup.*``)
#: ``block_size`` is vLLM's after ``update_block_size_for_backend`` (0.19.0 declares hybrids at
#: 16 there and grows their blocks in the KV planning); ``engine_block_size`` the smallest group
#: block size the engine writes back and runs with
START_FIELDS = ("startup.engine_block_size", "startup.block_size", "startup.mamba_block_size",
                "startup.mamba_page_size_padded")


def _read_only(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


@attrs.frozen
class FieldChange:
    """One decision under both releases: ``field`` (a config path such as
    ``cache_config.block_size``, ``startup.block_size`` for the block size the engine runs
    with, ``startup.backend[...]`` for one kind of layer, ``impact.gpu_memory_utilization``),
    the stage that decided it under each release (None: no stage set it), its value under
    each (None also where that side has no answer), whether it differs, and the rule that
    changed it (None: not identified, or not changed)."""

    field: str
    stage_from: str | None
    stage_to: str | None
    value_from: Any
    value_to: Any
    changed: bool
    rule: Rule | None = None
    #: the target release's own account of the new value (its reason or explanation)
    detail: str | None = None

    @property
    def why(self) -> str | None:
        if not self.changed:
            return None
        return self.rule.text() if self.rule is not None else RULE_NOT_IDENTIFIED

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "stage_from": self.stage_from, "stage_to": self.stage_to,
                "from": to_json(self.value_from), "to": to_json(self.value_to), "changed": self.changed,
                "rule": self.rule.to_dict() if self.rule is not None else None, "why": self.why,
                "detail": self.detail}


@attrs.frozen
class Side:
    """One release's answer: its run (None when it refused the setting) or its error."""

    release: str
    result: RunResult | None
    error: EngineCfgError | None = None

    @property
    def ok(self) -> bool:
        return self.result is not None

    @property
    def startup(self) -> Startup | None:
        st = self.result.facts.get("startup") if self.result is not None else None
        return st if isinstance(st, Startup) else None

    @property
    def impact(self) -> Impact | None:
        imp = self.result.facts.get("impact") if self.result is not None else None
        return imp if isinstance(imp, Impact) else None

    @property
    def starts(self) -> bool | None:
        """Whether the engine would start: the run's start verdict, which its ``impact`` fact
        carries (None: refused, or not worked out)."""
        if self.result is None:
            return None
        return getattr(self.result.facts.get("impact"), "starts", None)

    @property
    def start_error(self) -> str | None:
        """Why the engine would not start, as vLLM words it (None: it starts, or refused)."""
        if self.result is None or self.starts is not False:
            return None
        return getattr(self.result.facts.get("impact"), "start_error", None)

    @property
    def start_unknown(self) -> str | None:
        """Why whether the engine would start was not worked out (None: it was, or refused)."""
        if self.result is None or self.starts is not None:
            return None
        return getattr(self.result.facts.get("impact"), "error", None) or "the impact stage recorded no figures"

    @property
    def exit_code(self) -> int:
        return self.error.exit_code if self.error is not None else 0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"vllm_version": self.release, "status": "resolved" if self.ok else "error"}
        if self.error is not None:
            out["error"] = {"status": self.error.status, "type": type(self.error).__name__,
                            "stage": self.error.stage, "field": getattr(self.error, "field", None),
                            "message": " ".join(str(self.error).split())}
            return out
        out["run_id"] = self.result.run_id
        out["starts"] = self.starts
        out["start_error"] = self.start_error
        st = self.startup
        out["startup"] = st.to_dict() if st is not None else None
        imp = self.impact
        out["impact"] = imp.to_dict() if imp is not None else None
        return out


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not a:
        return None
    return b / a


@attrs.frozen
class Capacity:
    """The KV figures under both releases (None where a side has none) and ``to/from``
    ratios: KV tokens (vLLM's "GPU KV cache size"), blocks, concurrency at max_model_len and
    at each context length, and whether each starts with its error."""

    kv_tokens: tuple[int | None, int | None]
    num_blocks: tuple[int | None, int | None]
    max_concurrency: tuple[float | None, float | None]
    concurrency: Mapping[int, tuple[float | None, float | None]] = attrs.field(converter=_read_only)
    starts: tuple[bool | None, bool | None] = (None, None)
    start_error: tuple[str | None, str | None] = (None, None)
    max_model_len: tuple[int | None, int | None] = (None, None)

    @property
    def kv_tokens_ratio(self) -> float | None:
        return _ratio(*self.kv_tokens)

    @property
    def num_blocks_ratio(self) -> float | None:
        return _ratio(*self.num_blocks)

    @property
    def max_concurrency_ratio(self) -> float | None:
        return _ratio(*self.max_concurrency)

    def concurrency_ratio(self, context: int) -> float | None:
        return _ratio(*self.concurrency.get(context, (None, None)))

    def to_dict(self) -> dict[str, Any]:
        return {"kv_tokens": list(self.kv_tokens), "kv_tokens_ratio": self.kv_tokens_ratio,
                "num_blocks": list(self.num_blocks), "num_blocks_ratio": self.num_blocks_ratio,
                "max_concurrency": list(self.max_concurrency), "max_concurrency_ratio": self.max_concurrency_ratio,
                "concurrency": {str(n): {"from": v[0], "to": v[1], "ratio": self.concurrency_ratio(n)}
                                for n, v in self.concurrency.items()},
                "max_model_len": list(self.max_model_len),
                "starts": list(self.starts), "start_error": list(self.start_error)}


@attrs.frozen
class Upgrade:
    """The two resolutions side by side (see the module doc).  ``to_dict()`` is
    ``enginecfg upgrade --json``."""

    model: str
    engine_args: Mapping[str, Any] = attrs.field(converter=_read_only)
    memory: Mapping[str, Any] = attrs.field(converter=_read_only)
    gpu: str
    from_side: Side
    to_side: Side
    fields: tuple[FieldChange, ...] = attrs.field(converter=tuple)
    capacity: Capacity

    @property
    def from_version(self) -> str:
        return self.from_side.release

    @property
    def to_version(self) -> str:
        return self.to_side.release

    @property
    def changed(self) -> tuple[FieldChange, ...]:
        return tuple(f for f in self.fields if f.changed)

    def field(self, name: str) -> FieldChange | None:
        return next((f for f in self.fields if f.field == name), None)

    @property
    def capacity_rules(self) -> tuple[Rule, ...]:
        """The rules that change what the KV figures mean between the two releases (the
        logged KV size, how concurrency counts the groups); empty where none is known."""
        found = (rule_for(k, self.from_side.release, self.to_side.release)
                 for k in ("kv_tokens.meaning", "concurrency.groups"))
        return tuple(r for r in found if r is not None)

    @property
    def exit_code(self) -> int:
        """0 when both releases resolve the setting; else the highest exit status of the
        refusals (1 rejected, 2 bad input), as ``run`` maps them."""
        return max(self.from_side.exit_code, self.to_side.exit_code)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "engine_args": dict(self.engine_args), "memory": dict(self.memory),
                "gpu": self.gpu, "from": self.from_side.to_dict(), "to": self.to_side.to_dict(),
                "fields": [f.to_dict() for f in self.fields],
                "changed": [f.field for f in self.changed],
                "capacity": self.capacity.to_dict(),
                "capacity_rules": [r.to_dict() for r in self.capacity_rules]}


# --------------------------------------------------------------------------- reading a side
def _config(side: Side) -> dict[str, Any] | None:
    return side.result.to_dict()["config"] if side.result is not None else None


def _at(doc: Mapping[str, Any] | None, path: str) -> Any:
    node: Any = doc
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def _stage_of(side: Side, field: str) -> str | None:
    if side.result is None:
        return None
    stages = [c.stage for c in side.result.changes if c.field == field]
    return stages[-1] if stages else None


def _built(side: Side) -> bool:
    st = side.startup
    return st is not None and (st.failure is None or st.failure.step != "build")


def _start_value(side: Side, field: str) -> Any:
    st = side.startup
    if st is None or not _built(side):
        return None
    return getattr(st, field.split(".", 1)[1])


def _kind_key(lb) -> str:
    k = lb.layer
    if k.kind == "mamba":
        return f"mamba {k.mamba_type}"
    window = f" window {k.sliding_window}" if k.sliding_window else ""
    return f"{k.kind} {k.attn_type} head {k.head_size}{window} kv {k.kv_cache_dtype}"


def _backend_text(lb) -> str | None:
    if lb.backend is None:
        return None
    fa = f" (FA{lb.fa_version})" if lb.fa_version else ""
    return f"{lb.backend}{fa} x{lb.layer.layers}"


def _backends(side: Side) -> dict[str, str | None]:
    st = side.startup
    if st is None or not _built(side):
        return {}
    return {_kind_key(lb): _backend_text(lb) for lb in st.backends}


def _decision_detail(side: Side, field: str) -> str | None:
    st = side.startup
    if st is None:
        return None
    name = "block_size" if field == "startup.engine_block_size" else field.split(".", 1)[1]
    found = [d for d in st.decisions if d.field == name and d.rule is not None]
    return found[-1].explanation if found else None


# --------------------------------------------------------------------------- the rules
def _ordered(a: Side, b: Side) -> tuple[Side, Side]:
    """The two sides in release order (an upgrade or a downgrade reads the same rules)."""
    key = lambda s: releases.version_key(s.release)  # noqa: E731
    return (a, b) if key(a) <= key(b) else (b, a)


def _situation(field: str, old: Side, new: Side) -> str | None:
    """Which row of :data:`UPGRADE_RULES` explains that *field* differs between *old* (the
    earlier release) and *new*; None when none is recognised."""
    co, cn = _config(old), _config(new)
    if field.startswith("error"):
        args = new.result.config.engine_args if new.result is not None else (
            old.result.config.engine_args if old.result is not None else {})
        err = new.error or old.error
        text = str(err) if err is not None else ""
        if "calculate_kv_scales" in text:
            return "error.calculate_kv_scales"
        if old.error is not None and new.error is None and args.get("mamba_block_size") is not None:
            return "error.mamba_block_size"
        if "hunked prefill is required" in text:
            return "error.chunked_prefill"
        return None
    if co is None or cn is None:
        return None
    arch_old, arch_new = _at(co, "model_config.architecture"), _at(cn, "model_config.architecture")
    if arch_old != arch_new and str(arch_new).startswith("Transformers"):
        return "architecture.transformers_backend"
    hybrid = bool(_at(cn, "model_config.is_hybrid"))
    if field == "impact.gpu_memory_utilization":
        return "gpu_memory_utilization.default"
    r_old, r_new = _release_of(old), _release_of(new)
    left_all = _at(co, "cache_config.mamba_cache_mode") == "all" and _at(cn, "cache_config.mamba_cache_mode") != "all"
    if left_all and hybrid and _built(new) and field in (
            "startup.block_size", "startup.engine_block_size", "startup.mamba_block_size",
            "startup.mamba_page_size_padded"):
        return "block_size.all_mode"
    if left_all and field == "startup.starts" and _built(new) and _built(old):
        return "start.all_mode"
    if field == "cache_config.block_size":
        if hybrid and r_old is not None and not r_old.decides_at_engine_start:
            return "block_size.no_config_alignment"
        defaults = (r_old.default_block_size, r_new.default_block_size) if r_old and r_new else None
        return "block_size.default" if (_at(co, field), _at(cn, field)) == defaults else None
    if field in ("startup.block_size", "startup.engine_block_size"):
        if not _built(new):
            return "block_size.not_built"
        if hybrid:
            return "block_size.start_alignment"
        return "block_size.default" if r_new is not None and \
            _start_value(new, "startup.block_size") == r_new.default_block_size else None
    if field == "cache_config.enable_prefix_caching":
        return "enable_prefix_caching.hybrid" if hybrid and _at(cn, field) else None
    if field == "cache_config.mamba_cache_mode":
        was, now = _at(co, field), _at(cn, field)
        if was == "all":
            return "mamba_cache_mode.all_gone"
        if was == "none" and now == "align":
            return "mamba_cache_mode.prefix_default"
        if now == "none" and not hybrid and not _at(cn, "model_config.is_attention_free"):
            return "mamba_cache_mode.ignored"
        return None
    if field in ("cache_config.mamba_block_size", "startup.mamba_block_size"):
        if _at(cn, "cache_config.mamba_cache_mode") != "align":
            return None
        if _at(co, "cache_config.mamba_cache_mode") == "align" and field.startswith("cache_config"):
            # one attention block in both: it moved with the block size
            return _situation("cache_config.block_size", old, new)
        return "mamba_block_size.align"
    if field == "cache_config.mamba_page_size_padded":
        return "block_size.no_config_alignment" if hybrid else None
    if field == "startup.mamba_page_size_padded":
        return "mamba_page_size_padded.start_alignment" if hybrid else None
    if field == "cache_config.mamba_ssm_cache_dtype":
        return "mamba_ssm_cache_dtype.nemotron_h" if arch_new == "NemotronHForCausalLM" else None
    if field in ("attention_config.backend", "attention_config.flash_attn_version") or field.startswith(
            "startup.backend["):
        gemma = any(c.stage == "gemma4-backend" for s in (old, new) for c in s.result.changes) or any(
            m.stage == "gemma4-backend" for s in (old, new) for m in s.result.messages)
        if gemma:
            return "backend.gemma4"
        return None
    if field == "startup.starts":
        return "start.not_built" if not _built(new) or not _built(old) else None
    if field == "impact.kv_tokens":
        return "kv_tokens.meaning"
    if field.startswith("impact.concurrency") or field == "impact.max_concurrency":
        return "concurrency.groups"
    return None


def rule_for(situation: str, a: str, b: str) -> Rule | None:
    """The rule behind *situation* between releases *a* and *b* (either order; None: none of
    its dated rules moved between them, or a release is not spoken for)."""
    if not (releases.known(a) and releases.known(b)):
        return None
    found = changes.explain(situation, releases.get(a), releases.get(b))
    return None if found is None else Rule(found.release, found.rule, found.words)


def _release_of(side: Side) -> releases.Release | None:
    return releases.get(side.release) if releases.known(side.release) else None


def _rule(field: str, a: Side, b: Side) -> Rule | None:
    old, new = _ordered(a, b)
    situation = _situation(field, old, new)
    return rule_for(situation, old.release, new.release) if situation is not None else None


# --------------------------------------------------------------------------- comparing
def _compare(a: Side, b: Side) -> tuple[FieldChange, ...]:
    out: list[FieldChange] = []

    def add(field: str, va: Any, vb: Any, stage_a: str | None = None, stage_b: str | None = None,
            detail: str | None = None) -> None:
        changed = to_json(va) != to_json(vb)
        out.append(FieldChange(field, stage_a, stage_b, va, vb, changed,
                               _rule(field, a, b) if changed else None, detail if changed else None))

    if not a.ok or not b.ok:
        if a.ok != b.ok or type(a.error) is not type(b.error) or str(a.error) != str(b.error):
            add("error", None if a.error is None else " ".join(str(a.error).split()),
                None if b.error is None else " ".join(str(b.error).split()))
        if not a.ok and not b.ok:
            return tuple(out)
    ca, cb = _config(a), _config(b)
    names = list(CORE_FIELDS)
    for side in (a, b):
        for c in side.result.changes if side.result is not None else ():
            if c.field not in names:
                names.append(c.field)
    if not a.ok or not b.ok:  # one side refused: the other's decisions, with nothing to compare
        for name in [*names, *START_FIELDS]:
            value = _start_value(a if a.ok else b, name) if name.startswith("startup.") else \
                _at(ca if a.ok else cb, name)
            out.append(FieldChange(name, _stage_of(a, name), _stage_of(b, name),
                                   value if a.ok else None, value if b.ok else None, False))
        return tuple(out)
    for name in names:
        if _at(ca, name) is None and _at(cb, name) is None and name not in CORE_FIELDS:
            continue
        reason = [c for c in b.result.changes if c.field == name]
        add(name, _at(ca, name), _at(cb, name), _stage_of(a, name), _stage_of(b, name),
            reason[-1].explanation or reason[-1].reason if reason else None)
    for name in START_FIELDS:
        add(name, _start_value(a, name), _start_value(b, name), "engine-start" if a.startup else None,
            "engine-start" if b.startup else None, _decision_detail(b, name))
    ba, bb = _backends(a), _backends(b)
    for kind in dict.fromkeys(list(ba) + list(bb)):
        add(f"startup.backend[{kind}]", ba.get(kind), bb.get(kind), "engine-start", "engine-start")
    ia, ib = a.impact, b.impact
    add("impact.gpu_memory_utilization", ia.memory.gpu_memory_utilization if ia else None,
        ib.memory.gpu_memory_utilization if ib else None, "impact", "impact")
    add("startup.starts", a.starts, b.starts, "engine-start", "engine-start",
        b.start_error)
    return tuple(out)


def _capacity(a: Side, b: Side) -> Capacity:
    ia, ib = a.impact, b.impact

    def both(get):
        return (get(ia) if ia is not None else None, get(ib) if ib is not None else None)

    contexts = list(dict.fromkeys([*(ia.concurrency if ia else ()), *(ib.concurrency if ib else ())]))
    return Capacity(
        kv_tokens=both(lambda i: i.kv_tokens if i.starts else None),
        num_blocks=both(lambda i: i.num_blocks if i.starts else None),
        max_concurrency=both(lambda i: i.max_concurrency if i.starts else None),
        concurrency={n: both(lambda i: i.concurrency.get(n) if i.starts else None) for n in contexts},
        starts=(a.starts, b.starts), start_error=(a.start_error, b.start_error),
        max_model_len=both(lambda i: i.max_model_len))


# --------------------------------------------------------------------------- the command
def _check_release(value: Any, field: str) -> str:
    known = rulepacks.releases()
    if not isinstance(value, str) or value not in known:
        raise InvalidInputError.for_value(field, value, ", ".join(known), flag="--" + field.split("_")[0])
    return value


def _resolve(release: str, model: Any, revision: str | None, memory: dict[str, Any],
             gpu: str | None, args: dict[str, Any]) -> Side:
    try:
        pipeline = Pipeline(vllm_version=release, gpu=gpu, gpu_validation="off", impact=dict(memory))
    except EngineCfgError as exc:
        return Side(release, None, exc)
    try:
        return Side(release, pipeline.resolve(model, revision=revision, **args))
    except EngineCfgError as exc:
        return Side(release, None, exc)


def upgrade(path: Any, *, from_version: str = DEFAULT_FROM, to_version: str = DEFAULT_TO, gpu: str | None = None,
            revision: str | None = None, **engine_args_and_memory: Any) -> Upgrade:
    """Resolve *path* (a folder, a ``config.json`` or a Hugging Face repo id) under the rule
    packs of *from_version* and *to_version*, on the same GPU (*gpu*, a preset; default the
    H200) with the same engine arguments and memory flags (vLLM's names, as :func:`explain`
    takes them: ``kv_cache_dtype="fp8"``, ``gpu_memory_utilization=0.8``,
    ``kv_cache_memory_bytes=...``), and compare them.

    Raises :class:`~enginecfg.InvalidInputError` for an unknown release, the same release
    twice, or bad memory options; a release that refuses the setting is reported on its side
    (:attr:`Side.error`), not raised.
    """
    from_version = _check_release(from_version, "from_version")
    to_version = _check_release(to_version, "to_version")
    if from_version == to_version:
        raise InvalidInputError(f"invalid to_version: {to_version!r} is also the from_version; allowed: a "
                                f"release other than {from_version} (one of {', '.join(rulepacks.releases())})",
                                field="to_version")
    memory, args = split_memory(engine_args_and_memory)
    if gpu is not None:
        memory["gpu"] = gpu
    options = memory_options(memory)  # bad memory input is refused here, once, for both sides
    a = _resolve(from_version, path, revision, memory, gpu, args)
    b = _resolve(to_version, path, revision, memory, gpu, args)
    return Upgrade(str(path), args, memory, options.gpu, a, b, _compare(a, b), _capacity(a, b))

