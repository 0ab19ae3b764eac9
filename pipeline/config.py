"""The engine configuration: attrs sections named and defaulted as vLLM 0.19.0's, and their state.

Only the fields the verification steps and the derived model facts read or write are here.
Every assignment is validated at the boundary (the error names the field, what was given
and what is allowed) and refused once the pipeline has frozen the config.  Changes made
during a run are found and attributed by the pipeline (see :mod:`enginecfg.pipeline.run`),
which compares the config's :meth:`~BaseEngineConfig.state` after each stage with the one
before.  How a config is made from a model's files is :mod:`enginecfg.pipeline.loading`'s.
"""

from __future__ import annotations

import math
import operator
from types import MappingProxyType
from typing import Any, Callable, Hashable, Iterable

import attrs

from enginecfg.pipeline.errors import FrozenConfigError, InvalidInputError
from enginecfg.pipeline.hf import HFConfigView, Unkeyable, content_key, same_content, typed
from enginecfg.pipeline.jsonvalue import to_json
from enginecfg.pipeline.models.engine_defaults import DEFAULT_BLOCK_SIZE

__all__ = [
    "ATTENTION_BACKENDS",
    "CACHE_DTYPES",
    "MAMBA_DTYPES",
    "MAMBA_CACHE_MODES",
    "RESOLVED_DTYPES",
    "POOLING_TYPES",
    "ModelConfig",
    "CacheConfig",
    "AttentionConfig",
    "ParallelConfig",
    "SchedulerConfig",
    "PoolerConfig",
    "CompilationConfig",
    "BaseEngineConfig",
    "ConfigState",
    "LATEST",
    "SECTIONS",
    "MODEL_DOC_FIELDS",
    "tracked_fields",
]

#: vLLM 0.19.0's AttentionBackendEnum member names
ATTENTION_BACKENDS = (
    "FLASH_ATTN", "FLASH_ATTN_DIFFKV", "TRITON_ATTN", "ROCM_ATTN",
    "ROCM_AITER_MLA", "ROCM_AITER_TRITON_MLA", "ROCM_AITER_FA", "ROCM_AITER_MLA_SPARSE",
    "XPU_MLA_SPARSE", "TORCH_SDPA", "FLASHINFER", "FLASHINFER_MLA", "FLASHINFER_MLA_SPARSE",
    "TRITON_MLA", "CUTLASS_MLA", "FLASHMLA", "FLASHMLA_SPARSE", "FLASH_ATTN_MLA",
    "NO_ATTENTION", "FLEX_ATTENTION", "TREE_ATTN", "ROCM_AITER_UNIFIED_ATTN", "CPU_ATTN", "CUSTOM",
)
#: CacheConfig.cache_dtype literal
CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla")
#: MambaDType literal (what a caller may pass; a stage may assign other table keys)
MAMBA_DTYPES = ("auto", "float32", "float16")
MAMBA_CACHE_MODES = ("all", "align", "none")
#: the dtypes a resolved model config holds (``--dtype``'s choices are engine_args.DTYPE_CHOICES)
RESOLVED_DTYPES = ("float32", "float16", "bfloat16")
POOLING_TYPES = ("MEAN", "CLS", "LAST", "ALL", "STEP")
_MAMBA_ASSIGNABLE = MAMBA_DTYPES + ("bfloat16", "half", "float", "fp8", "fp8_e4m3", "fp8_e5m2",
                                    "int8", "fp8_inc", "fp8_ds_mla")


# -- validators ------------------------------------------------------------------------------

def _path(inst: Any, attribute: attrs.Attribute) -> str:
    return f"{type(inst)._section}.{attribute.name}"


def _check(pred: Callable[[Any], bool], allowed: str) -> Callable[[Any, attrs.Attribute, Any], None]:
    def validate(inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        if not pred(value):
            raise InvalidInputError.for_value(_path(inst, attribute), value, allowed)
    return validate


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def positive_int(optional: bool = False):
    allowed = "a positive integer" + (" or None" if optional else "")
    return _check(lambda v: (optional and v is None) or (_is_int(v) and v > 0), allowed)


def integer(optional: bool = False):
    """Any integer: a value vLLM accepts while it builds its config, whatever its sign (a
    nonpositive block size, a max_model_len of 0); enginecfg refuses such an engine argument
    itself, after vLLM's checks (:mod:`enginecfg.pipeline.arg_order`)."""
    allowed = "an integer" + (" or None" if optional else "")
    return _check(lambda v: (optional and v is None) or _is_int(v), allowed)


def non_negative_int(optional: bool = False):
    allowed = "an integer >= 0" + (" or None" if optional else "")
    return _check(lambda v: (optional and v is None) or (_is_int(v) and v >= 0), allowed)


def one_of(choices: Iterable[Any], optional: bool = False):
    choices = tuple(choices)
    allowed = ", ".join(map(repr, choices)) + (" or None" if optional else "")
    return _check(lambda v: (optional and v is None) or (isinstance(v, str) and v in choices), allowed)


def boolean(optional: bool = False):
    allowed = "true or false" + (" or None (unset)" if optional else "")
    return _check(lambda v: (optional and v is None) or isinstance(v, bool), allowed)


def text(optional: bool = False):
    return _check(lambda v: (optional and v is None) or isinstance(v, str), "a string")


# -- the frozen switch and change hook ---------------------------------------------------------

def _on_setattr(inst: Any, attribute: attrs.Attribute, value: Any) -> Any:
    engine = getattr(inst, "_engine", None)
    if engine is not None and engine._frozen:
        field = _path(inst, attribute)
        raise FrozenConfigError(f"the config is frozen: cannot set {field} to {value!r}", field=field)
    validator = attribute.metadata.get("on_assign", attribute.validator)
    if validator is not None:
        validator(inst, attribute, value)
    count = inst._writes + 1
    object.__setattr__(inst, "_writes", count)
    inst._assigned[attribute.name] = count
    if engine is not None:
        object.__setattr__(engine, "_moves", engine._moves + 1)
    return value


def section(name: str):
    """Class decorator: an attrs section whose assignments are validated and freezable."""
    def wrap(cls):
        cls._section = name
        cls = attrs.define(slots=True, kw_only=True, on_setattr=_on_setattr)(cls)
        return cls
    return wrap


def _engine_slot():
    return attrs.field(default=None, init=False, repr=False, eq=False, on_setattr=attrs.setters.NO_OP)


def _writes_slot():
    """How many assignments the section has taken: the pipeline re-reads a section's fields
    after a stage only when this moved (see :meth:`BaseEngineConfig.state`)."""
    return attrs.field(default=0, init=False, repr=False, eq=False, on_setattr=attrs.setters.NO_OP)


def _assigned_slot():
    """Each field's last assignment, by its number in ``_writes``: a state taken after some
    assignments reads again only the fields assigned since the state before."""
    return attrs.field(factory=dict, init=False, repr=False, eq=False, on_setattr=attrs.setters.NO_OP)


@section("model_config")
class ModelConfig:
    """Model facts derived from the HF config as vLLM 0.19.0's ``ModelConfig`` derives them."""

    model: str = attrs.field(validator=text())
    architecture: str | None = attrs.field(default=None, validator=text(optional=True))
    architectures: list[str] = attrs.field(factory=list)
    model_type: str | None = attrs.field(default=None)
    hf_config: HFConfigView | None = attrs.field(default=None, repr=False, eq=False)
    hf_text_config: HFConfigView | None = attrs.field(default=None, repr=False, eq=False)
    runner_type: str = attrs.field(default="generate", validator=one_of(("generate", "pooling", "draft")))
    convert_type: str = attrs.field(default="none")
    dtype: str = attrs.field(default="bfloat16", validator=one_of(RESOLVED_DTYPES))
    #: the caller's value may be 0 or below (refused after vLLM's checks); a stage sets a positive one
    max_model_len: int = attrs.field(default=2048, validator=integer(),
                                     metadata={"on_assign": positive_int()})
    head_size: int = attrs.field(default=0, validator=non_negative_int())
    total_num_kv_heads: int = attrs.field(default=0, validator=non_negative_int())
    num_kv_heads: int = attrs.field(default=1, validator=positive_int())
    num_attention_heads: int | None = attrs.field(default=None)
    use_mla: bool = attrs.field(default=False, validator=boolean())
    is_hybrid: bool = attrs.field(default=False, validator=boolean())
    is_attention_free: bool = attrs.field(default=False, validator=boolean())
    supports_mamba_prefix_caching: bool = attrs.field(default=False, validator=boolean())
    mamba_chunk_size: int = attrs.field(default=2048, validator=positive_int())
    quantization: str | None = attrs.field(default=None)
    #: the text config's sliding window as vLLM keeps it (None when absent, 0 or disabled)
    sliding_window: int | None = attrs.field(default=None)
    disable_sliding_window: bool = attrs.field(default=False, validator=boolean())
    #: the resolved class's facts (:class:`enginecfg.pipeline.models.architectures.ArchInfo`)
    arch_info: Any = attrs.field(default=None, repr=False, eq=False)
    #: where vLLM registers none of the architectures: the Transformers backend it runs the model
    #: on instead (:class:`enginecfg.pipeline.models.vllm_registry.Fallback`; None: its own class)
    arch_fallback: Any = attrs.field(default=None, repr=False, eq=False)
    _engine: Any = _engine_slot()
    _writes: int = _writes_slot()
    _assigned: dict = _assigned_slot()


@section("cache_config")
class CacheConfig:
    """KV-cache and Mamba-state settings (vLLM's ``CacheConfig``)."""

    #: the caller's value may be 0 or below (refused after vLLM's checks); a stage sets a positive one
    block_size: int = attrs.field(default=DEFAULT_BLOCK_SIZE, validator=integer(),
                                  metadata={"on_assign": positive_int()})
    user_specified_block_size: bool = attrs.field(default=False, validator=boolean())
    cache_dtype: str = attrs.field(default="auto", validator=one_of(CACHE_DTYPES))
    calculate_kv_scales: bool = attrs.field(default=False, validator=boolean())
    enable_prefix_caching: bool | None = attrs.field(default=None, validator=boolean(optional=True))
    mamba_cache_mode: str = attrs.field(default="none", validator=one_of(MAMBA_CACHE_MODES))
    #: vLLM copies the block size here, whatever its sign (prefix caching of a Mamba model)
    mamba_block_size: int | None = attrs.field(default=None, validator=integer(optional=True))
    mamba_page_size_padded: int | None = attrs.field(default=None, validator=positive_int(optional=True))
    mamba_ssm_cache_dtype: str = attrs.field(default="auto", validator=one_of(_MAMBA_ASSIGNABLE))
    #: a later release's parser may allow more (0.34.0: bfloat16): the loader checks the choices
    mamba_cache_dtype: str = attrs.field(default="auto", validator=one_of(MAMBA_DTYPES + ("bfloat16",)))
    _engine: Any = _engine_slot()
    _writes: int = _writes_slot()
    _assigned: dict = _assigned_slot()


@section("attention_config")
class AttentionConfig:
    """``backend`` None means vLLM chooses later; otherwise an AttentionBackendEnum name."""

    backend: str | None = attrs.field(default=None, validator=one_of(ATTENTION_BACKENDS, optional=True))
    #: the FlashAttention version the config forces (vLLM 0.34.0's Gemma 4 rule sets 4; None: by GPU)
    flash_attn_version: int | None = attrs.field(
        default=None, validator=_check(lambda v: v is None or (_is_int(v) and v in (2, 3, 4)), "2, 3, 4 or None"))
    _engine: Any = _engine_slot()
    _writes: int = _writes_slot()
    _assigned: dict = _assigned_slot()


@section("parallel_config")
class ParallelConfig:
    tensor_parallel_size: int = attrs.field(default=1, validator=positive_int())
    pipeline_parallel_size: int = attrs.field(default=1, validator=positive_int())
    _engine: Any = _engine_slot()
    _writes: int = _writes_slot()
    _assigned: dict = _assigned_slot()


@section("scheduler_config")
class SchedulerConfig:
    enable_chunked_prefill: bool | None = attrs.field(default=None, validator=boolean(optional=True))
    max_num_batched_tokens: int | None = attrs.field(default=None, validator=positive_int(optional=True))
    #: None (unset): vLLM's default, :func:`enginecfg.pipeline.models.engine_defaults.max_num_seqs`
    max_num_seqs: int | None = attrs.field(default=None, validator=positive_int(optional=True))
    #: ``--disable-hybrid-kv-cache-manager`` as vLLM sets it while building its config: as
    #: given, else off unless something needs the manager off (None until that is decided).
    #: With it on, the engine start turns sliding-window layers into full attention, and a
    #: Mamba hybrid cannot start
    disable_hybrid_kv_cache_manager: bool | None = attrs.field(default=None, validator=boolean(optional=True))
    _engine: Any = _engine_slot()
    _writes: int = _writes_slot()
    _assigned: dict = _assigned_slot()


@section("pooler_config")
class PoolerConfig:
    seq_pooling_type: str | None = attrs.field(default=None, validator=one_of(POOLING_TYPES, optional=True))
    tok_pooling_type: str | None = attrs.field(default=None, validator=one_of(POOLING_TYPES, optional=True))
    #: a sentence-transformers Normalize module follows the pooling (None: the checkpoint says nothing)
    use_activation: bool | None = attrs.field(default=None, validator=boolean(optional=True))
    _engine: Any = _engine_slot()
    _writes: int = _writes_slot()
    _assigned: dict = _assigned_slot()


@section("compilation_config")
class CompilationConfig:
    cudagraph_mode: str | None = attrs.field(default=None, validator=text(optional=True))
    _engine: Any = _engine_slot()
    _writes: int = _writes_slot()
    _assigned: dict = _assigned_slot()


#: section attribute name -> class, in the run document's order
SECTIONS = {
    "model_config": ModelConfig,
    "cache_config": CacheConfig,
    "attention_config": AttentionConfig,
    "scheduler_config": SchedulerConfig,
    "parallel_config": ParallelConfig,
    "pooler_config": PoolerConfig,
    "compilation_config": CompilationConfig,
}

#: :meth:`BaseEngineConfig.state`'s default: since the state taken last
LATEST = object()

#: ModelConfig fields that the run document reports (the rest are internal bookkeeping)
MODEL_DOC_FIELDS = (
    "architecture", "dtype", "max_model_len", "is_hybrid", "is_attention_free", "use_mla",
    "head_size", "num_kv_heads", "total_num_kv_heads", "supports_mamba_prefix_caching",
    "mamba_chunk_size", "model_type", "runner_type", "quantization", "convert_type", "sliding_window",
    "disable_sliding_window",
)


def _json_value(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


@attrs.define(slots=True, kw_only=True)
class BaseEngineConfig:
    """Everything one engine start needs decided, in vLLM's section layout: what the engine
    runs stages on, tracks changes of and freezes.

    :class:`enginecfg.EngineConfig` is this with its constructors from a model's files
    (``from_pretrained``, ``from_hf_config``: :mod:`enginecfg.pipeline.loading`); hand one to
    ``Pipeline().run(cfg)``, which verifies and corrects it and then freezes it.
    """

    model_config: ModelConfig
    cache_config: CacheConfig = attrs.field(factory=CacheConfig)
    attention_config: AttentionConfig = attrs.field(factory=AttentionConfig)
    parallel_config: ParallelConfig = attrs.field(factory=ParallelConfig)
    scheduler_config: SchedulerConfig = attrs.field(factory=SchedulerConfig)
    pooler_config: PoolerConfig | None = None
    compilation_config: CompilationConfig = attrs.field(factory=CompilationConfig)
    engine_args: dict[str, Any] = attrs.field(factory=dict)
    load_messages: list[tuple[str, str]] = attrs.field(factory=list, repr=False)
    #: where the model's files came from and the sha256 of each one read
    #: (:meth:`enginecfg.pipeline.hf.sources.ModelSource.provenance`); None for an in-memory config
    source: dict[str, Any] | None = attrs.field(default=None, repr=False)
    #: engine-argument errors found at load time, kept for the moment vLLM reports them:
    #: ``(phase, error)`` in its order (:mod:`enginecfg.pipeline.arg_order`)
    pending_errors: list[tuple[str, Any]] = attrs.field(factory=list, repr=False)
    _frozen: bool = attrs.field(default=False, init=False, repr=False)
    #: assignments to the config itself (a section replaced); see :meth:`_write_stamp`
    _replaced: int = attrs.field(default=0, init=False, repr=False, eq=False)
    #: the state taken last (:meth:`state` reads again only what can have changed since)
    _latest: "ConfigState | None" = attrs.field(default=None, init=False, repr=False, eq=False)
    #: moves with every part of the write stamp (a field of a section assigned, a section
    #: replaced): one number for "nothing was assigned since", the common case after a stage
    _moves: int = attrs.field(default=0, init=False, repr=False, eq=False)
    #: a section of this config also belongs to another one (assigned to both): its
    #: assignments move the other's count, so only the write stamp tells them here
    _shared: bool = attrs.field(default=False, init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        for sec in self.sections():
            self._attach(sec)

    def _attach(self, sec: Any) -> None:
        """Make *sec* one of this config's sections (its assignments move this config's count)."""
        other = getattr(sec, "_engine", None)
        if other is not None and other is not self:
            object.__setattr__(self, "_shared", True)
            object.__setattr__(other, "_shared", True)
        object.__setattr__(sec, "_engine", self)

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_frozen", False):
            raise FrozenConfigError(f"the config is frozen: cannot replace {name}", field=name)
        object.__setattr__(self, name, value)
        if name in SECTIONS:  # the rest (engine_args, load_messages, source) is in no state
            object.__setattr__(self, "_replaced", getattr(self, "_replaced", 0) + 1)
            object.__setattr__(self, "_moves", getattr(self, "_moves", 0) + 1)
            if value is not None:
                self._attach(value)

    # -- access ----------------------------------------------------------------------------
    def sections(self) -> list[Any]:
        return [getattr(self, n) for n in SECTIONS if getattr(self, n) is not None]

    @property
    def frozen(self) -> bool:
        return self._frozen

    def freeze(self) -> None:
        """After this, every assignment (sections, hf_config) raises FrozenConfigError."""
        mc = self.model_config
        for view in (mc.hf_config, mc.hf_text_config):
            if view is not None and not view.is_frozen:  # the text config is mostly a sub-view
                view.freeze()
        for sec in self.sections():
            names, getter = _all_fields(type(sec))
            values = getter(sec)
            for i in _positions(_is_list, tuple(map(type, values))):
                object.__setattr__(sec, names[i], tuple(values[i]))
        object.__setattr__(self, "engine_args", MappingProxyType(dict(self.engine_args)))
        object.__setattr__(self, "_frozen", True)

    @property
    def model(self) -> str:
        return self.model_config.model

    def _write_stamp(self) -> tuple[int, ...]:
        """Moves with every assignment: a section replaced, or any field of one assigned."""
        # the sections spelt out in SECTIONS' order (a test checks it): cheaper than looking
        # each one up by name; a section left None has no count
        return (self._replaced, *[getattr(sec, "_writes", -1) for sec in (
            self.model_config, self.cache_config, self.attention_config, self.scheduler_config,
            self.parallel_config, self.pooler_config, self.compilation_config)])

    def _section_objects(self) -> tuple[Any, ...]:
        """The section objects, in SECTIONS' order (None where a section is not set)."""
        return (self.model_config, self.cache_config, self.attention_config, self.scheduler_config,
                self.parallel_config, self.pooler_config, self.compilation_config)

    def unchanged_since(self, since: "ConfigState", *, full: bool = False,
                        stamp: tuple[int, ...] | None = None) -> bool:
        """Whether a state taken now would hold exactly what *since* (a state of this config)
        holds: the same keys with the same content, types all the way down.  False where it
        cannot tell; nothing is copied.

        What is read: the write stamp (every assignment through a section or the config
        moves it), the list and dict values (edited in place without an assignment) and the
        writes into ``hf_config``.  ``full``: also every other field, compared value by value
        (a change made past the assignment hook, ``object.__setattr__``, moves no stamp), and
        each section must still be the very object it was.  *stamp*: the write stamp, when
        the caller has just taken it."""
        if since.config is not self or (stamp or self._write_stamp()) != since.stamp:
            return False
        for sec, field, key, _ in since.containers:
            if not same_content(getattr(sec, field), since[key]):
                return False
        if full:
            if any(a is not b for a, b in zip(self._section_objects(), since.sections)):
                return False
            getter, olds_of = _every_tracked(tuple(type(sec) for sec in since.sections))
            try:
                olds = olds_of(since)
            except KeyError:
                return False
            values = getter(self)
            # equal with the same types at the top (a list or dict among them was one when the
            # state was taken, and is compared whole above); else field by field
            if not (values == olds and list(map(type, values)) == list(map(type, olds))) \
                    and not self._same_fields(values, olds):
                return False
        hf = self.model_config.hf_config
        if hf is None:
            return not since.hf_keys
        probe = since.hf_probe
        if probe is not None and probe[0] is hf and hf.probe_holds(probe[1]):
            return True
        found = hf.overlay_probe(since)
        if found is None or found[2] != len(since.hf_keys):
            return False
        since.hf_probe = (hf, found)  # checked again from it while nothing is put in an overlay
        return True

    @staticmethod
    def _same_fields(values: tuple[Any, ...], olds: tuple[Any, ...]) -> bool:
        """Every value equals the state's, types all the way down for lists and dicts."""
        for value, old in zip(values, olds):
            if value.__class__ in (list, dict):
                if not same_content(value, old):
                    return False
            elif not (value.__class__ is old.__class__ and value == old):
                return False
        return True

    def adopt_state(self, other: "ConfigState") -> None:
        """Start from *other*, the state of a config this one is a field-for-field copy of
        (:func:`~enginecfg.pipeline.loadmemo.clone_config`), as if it had been taken of this
        one: the next :meth:`state` reads against it, and hands it back where nothing moved
        (its memo key with it).  Nothing is adopted from a config assigned to since *other*
        was taken of it, or one whose sections are not of the same classes."""
        source = other.config
        if source._write_stamp() != other.stamp:
            return
        sections = self._section_objects()
        if any((a is None) != (b is None) or (a is not None and a.__class__ is not b.__class__)
               for a, b in zip(sections, other.sections)):
            return
        by_name = dict(zip(SECTIONS, sections))
        out = ConfigState(other)
        out.config, out.stamp, out.sections, out.moves = self, self._write_stamp(), sections, self._moves
        out.containers = [(by_name[name], field, key, name) for _, field, key, name in other.containers]
        out.hf_keys, out.reread = list(other.hf_keys), None
        try:
            out._key = other._key
        except AttributeError:
            pass
        object.__setattr__(self, "_latest", out)  # not an assignment: no write is counted

    def keep_state(self, since: "ConfigState", *, full: bool = False, stamp: tuple[int, ...] | None = None) -> bool:
        """:meth:`unchanged_since`; where it holds, *since* becomes the latest state taken
        (what :meth:`state` reads against next)."""
        if not self.unchanged_since(since, full=full, stamp=stamp):
            return False
        object.__setattr__(self, "_latest", since)  # not an assignment: no write is counted
        return True

    def state(self, since: "ConfigState | None | object" = LATEST) -> "ConfigState":
        """Flat ``{dotted field: value}`` of every tracked field (sections and hf writes).

        The result is always the same as a full read.  How it is taken: with *since*, an
        earlier state of this config (by default the one taken last; None: read everything),
        a section that took no assignment after it was taken is not read again, but for its
        list and dict values (edited in place); the writes into ``hf_config`` are always
        read again.  The pipeline takes one after every stage and compares only what was
        read again (:attr:`ConfigState.reread`); :meth:`ConfigState.content_key` keys the
        memoised figures of vLLM's knowledge.
        """
        if since is LATEST:
            since = self._latest
        if since is not None and since.config is self and since.moves == self._moves and not self._shared \
                and self.keep_state(since, stamp=since.stamp):
            # nothing was assigned since (the write stamp is the same without reading it) and a
            # full read would give *since* again, field for field: it is handed back itself
            # (its memo key with it), read-only as every state is
            return since
        stamp = self._write_stamp()
        if since is not None and since.config is self and stamp == since.stamp and self.keep_state(since, stamp=stamp):
            return since
        short = since is not None and since.config is self and since.stamp[0] == stamp[0]
        partial: dict[str, set[str]] = {}
        if short:
            out = ConfigState(since)
            for key in since.hf_keys:
                del out[key]
            if stamp == since.stamp:
                moved = ()
                out.containers = since.containers  # read only, never appended to below
            else:
                moved = tuple([name for name, now, then in zip(SECTIONS, stamp[1:], since.stamp[1:]) if now != then])
                # a section still the object it was: only the fields assigned since are read
                # again (the others took no assignment; their lists and dicts are read below)
                for i, name in enumerate(SECTIONS):
                    if name in moved and (sec := getattr(self, name)) is not None and sec is since.sections[i]:
                        count = since.stamp[i + 1]
                        partial[name] = {f for f, n in sec._assigned.items() if n > count}
                out.containers = [c for c in since.containers if c[3] not in moved
                                  or (c[3] in partial and c[1] not in partial[c[3]])]
            out.reread = [key for _, _, key, _ in out.containers]
            for sec, field, key, _ in out.containers:
                out[key] = to_json(getattr(sec, field))
        else:
            out = ConfigState()
            moved = SECTIONS
            out.containers, out.reread = [], None
        out.config, out.stamp, out.moves = self, stamp, self._moves
        out.sections = self._section_objects()
        for name in moved:
            sec = getattr(self, name)
            if sec is None:
                out[name] = None
                if short:
                    out.reread.append(name)
                continue
            assigned = partial.get(name)
            fields = tracked_fields(type(sec)) if assigned is None else _tracked_among(type(sec), assigned)
            for field, key in fields:
                value = getattr(sec, field)
                if value.__class__ in (list, dict):
                    out.containers.append((sec, field, key, name))
                    value = to_json(value)
                out[key] = value
                if short:
                    out.reread.append(key)
        hf = self.model_config.hf_config
        out.hf_keys = []
        if hf is not None:
            for path, value in hf.overlay_state().items():
                out["hf_config." + path] = value
                out.hf_keys.append("hf_config." + path)
        if short:
            out._inherit_key(since)
        object.__setattr__(self, "_latest", out)  # not an assignment: no write is counted
        return out

    def section_dict(self, name: str) -> dict[str, Any] | None:
        sec = getattr(self, name)
        if sec is None:
            return None
        if name == "model_config":
            return {f: _json_value(getattr(sec, f)) for f in MODEL_DOC_FIELDS}
        return {a.name: _json_value(getattr(sec, a.name)) for a in attrs.fields(type(sec))
                if not a.name.startswith("_")}

    def hf_config_dict(self) -> dict[str, Any]:
        """The hf_config attributes the pooling step reads or writes, where they exist."""
        hf = self.model_config.hf_config
        out: dict[str, Any] = {}
        if hf is None:
            return out
        # reported as they stand, whatever their type (the pooling stage wrote them)
        for name in ("is_causal", "patch_size"):
            if typed.has(hf, name):
                out[name] = to_json(typed.attr(hf, name, typed.ANY))
        llm = typed.attr(hf, "llm_config", typed.ANY)
        if isinstance(llm, HFConfigView):
            out["llm_config"] = ({"is_causal": typed.attr(llm, "is_causal", typed.ANY)}
                                 if typed.has(llm, "is_causal") else {})
        return out

    def to_config_dict(self) -> dict[str, Any]:
        doc = {name: self.section_dict(name) for name in
               ("model_config", "cache_config", "attention_config", "scheduler_config",
                "parallel_config", "pooler_config")}
        doc["hf_config"] = self.hf_config_dict()
        return doc


class ConfigState(dict):
    """:meth:`BaseEngineConfig.state`: the flat field dict, with what a later state needs to
    know about how it was taken (the config, its write stamp, which values are containers
    and which keys are hf_config writes) and ``reread``: the keys read again since the
    state it was taken after (None: all of them)."""

    __slots__ = ("config", "stamp", "moves", "sections", "containers", "hf_keys", "reread", "_key", "hf_probe")

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        #: the config's assignment count when the state was taken (:attr:`BaseEngineConfig._moves`)
        self.moves = None
        #: (root view, :meth:`~enginecfg.pipeline.hf.HFConfigView.overlay_probe`): the writes
        #: into the transformers config found equal to this state's, for checking again
        self.hf_probe = None

    def content_key(self) -> tuple[tuple[Any, ...], Hashable]:
        """``(anchors, key)``: a key of everything the config holds, for memoising a pure
        computation over it (:func:`enginecfg.pipeline.hf.memoised`); take it right after
        the state (the fields are this state's, the snapshots the config's own now).

        Two configs get equal keys only when every tracked field (with this run's writes
        into the transformers config) is equal with the same types, the model class's facts
        are equal, and they read the very same transformers snapshot (one per distinct
        config content, shared between runs): the snapshots are the *anchors*, held by a
        memo entry so that their identity cannot be reused.  Raises
        :class:`~enginecfg.pipeline.hf.Unkeyable` for a config that cannot be keyed (a
        field holding an object without value semantics, a text config outside the view).
        """
        mc = self.config.model_config
        hf, text = mc.hf_config, mc.hf_text_config
        if hf is None or text is None:
            raise Unkeyable("no transformers config")
        snap, _, _ = hf.anchor()
        text_snap, text_root, text_path = text.anchor()
        if text is not hf and text_root is not hf:
            raise Unkeyable("the text config is not part of the transformers config view")
        try:
            hash(mc.arch_info)  # frozen attrs: hashed and compared by its facts
        except TypeError:
            raise Unkeyable("the model class facts are not hashable") from None
        anchors = (snap, text_snap)
        return anchors, (tuple(map(id, anchors)), text_path, mc.arch_info, self._fields_key())

    def _fields_key(self) -> Hashable:
        """:func:`~enginecfg.pipeline.hf.content_key` of the flat fields (computed once)."""
        try:
            return self._key
        except AttributeError:
            # the flat fields are mostly strings, integers, booleans and None: their types
            # side by side tell 1, True and 1.0 apart; anything else gets its full content key
            values = list(self.values())
            types = tuple(map(type, values))
            for i in _positions(_not_plain, types):
                values[i] = content_key(values[i])
            self._key = (tuple(self), types, tuple(values))
            return self._key

    def _inherit_key(self, since: "ConfigState") -> None:
        """Take *since*'s key when nothing that can change without an assignment changed."""
        try:
            key = since._key
        except AttributeError:
            return
        if self.hf_keys != since.hf_keys:
            return
        try:
            if all(same_content(self[k], since[k]) for k in self.reread + self.hf_keys):
                self._key = key
        except Unkeyable:
            return


#: the types a state's key holds as they are (see :meth:`ConfigState._fields_key`)
_PLAIN = frozenset({str, int, bool, type(None)})


def _is_list(cls: type) -> bool:
    return issubclass(cls, list)


def _not_plain(cls: type) -> bool:
    return cls not in _PLAIN


#: positions by the test and the types of some values side by side (the same model gives the
#: same few sequences of types, run after run)
_POSITIONS: dict[tuple[Callable[[type], bool], tuple[type, ...]], tuple[int, ...]] = {}


def _positions(test: Callable[[type], bool], types: tuple[type, ...]) -> tuple[int, ...]:
    """The positions in *types* of the types that pass *test*: the lists a freeze turns into
    tuples (:func:`_is_list`), the values a state's key keys whole (:func:`_not_plain`)."""
    found = _POSITIONS.get((test, types))
    if found is None:
        found = tuple(i for i, cls in enumerate(types) if test(cls))
        if len(_POSITIONS) < 1024:
            _POSITIONS[(test, types)] = found
    return found


_TRACKED: dict[type, tuple[tuple[str, str], ...]] = {}
_TRACKED_AT: dict[type, dict[str, tuple[int, str, str]]] = {}


def _tracked_among(cls: type, names: set[str]) -> list[tuple[str, str]]:
    """The (attribute, dotted key) pairs of :func:`tracked_fields` whose attribute is in
    *names*, in the same order (a stage that assigned two fields of a section of 25: those
    two, without going over the others)."""
    at = _TRACKED_AT.get(cls)
    if at is None:
        at = _TRACKED_AT[cls] = {a: (i, a, key) for i, (a, key) in enumerate(tracked_fields(cls))}
    found = [at[n] for n in names if n in at]
    found.sort()
    return [(a, key) for _, a, key in found]


def _tuple_getter(make: Callable[..., Any], names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """``operator.attrgetter`` or ``itemgetter`` (*make*) of *names* that gives a tuple even of
    one name (those getters give the value itself then)."""
    if len(names) > 1:
        return make(*names)
    one = make(*names)
    return lambda obj: (one(obj),)


_EVERY: dict[tuple[type, ...], tuple[Any, Any]] = {}


def _every_tracked(classes: tuple[type, ...]) -> tuple[Any, Any]:
    """For a config whose sections (in SECTIONS' order) are of *classes* (NoneType where one is
    not set): a getter of every tracked field's value from the config (one call, dotted
    names) and a getter of the same keys' values from a state (KeyError where one is missing)."""
    found = _EVERY.get(classes)
    if found is None:
        names, keys = [], []
        for section, cls in zip(SECTIONS, classes):
            if cls is type(None):
                continue
            for field, key in tracked_fields(cls):
                names.append(f"{section}.{field}")
                keys.append(key)
        found = _EVERY[classes] = (_tuple_getter(operator.attrgetter, tuple(names)),
                                   _tuple_getter(operator.itemgetter, tuple(keys)))
    return found


_ALL: dict[type, tuple[tuple[str, ...], Any]] = {}


def _all_fields(cls: type) -> tuple[tuple[str, ...], Any]:
    """The names of every attrs field of section class *cls* and a getter of their values (one
    call, a tuple in that order)."""
    found = _ALL.get(cls)
    if found is None:
        names = tuple(a.name for a in attrs.fields(cls))
        found = _ALL[cls] = (names, _tuple_getter(operator.attrgetter, names))
    return found


def tracked_fields(cls: type) -> tuple[tuple[str, str], ...]:
    """(attribute, dotted key) of the fields of section class *cls* that the change record
    tracks (``("block_size", "cache_config.block_size")``, ...)."""
    fields = _TRACKED.get(cls)
    if fields is None:
        fields = tuple((a.name, f"{cls._section}.{a.name}") for a in attrs.fields(cls)
                       if not a.name.startswith("_") and a.name not in ("hf_config", "hf_text_config", "arch_info",
                                                                        "arch_fallback"))
        _TRACKED[cls] = fields
    return fields

