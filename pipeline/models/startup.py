"""The engine start as values: what each kind of layer asks for, what it gets, the block size
the engine starts with, and why an engine would not start.

vLLM decides some things only when the engine starts, after the model class is built: every
attention layer asks the attention selector for a backend (its head size, the model and KV
dtypes, the block size the user gave, ...), the platform then fits the KV-cache block size
to the chosen backends (``update_block_size_for_backend``), the model runner declares each
layer's KV-cache spec at that size, and the engine core plans the KV cache and writes the
smallest group block size back.  A release's rules for that step live in its own module
(vLLM 0.19.0: :mod:`.engine_start`; 0.34.0: :mod:`.v034`); what they decide is written here,
in the same values for every release, so that the run document, the audit record and the
capacity figures read one shape:

- :class:`LayerKind`: one kind of layer as the model class builds it (its class, attention
  type, head size, window, KV dtype or Mamba type) and how many layers are of that kind;
- :class:`LayerBackend`: a kind with the backend it got and why (the priority list, every
  refusal with its reasons, the kernel block sizes, the preferred block size);
- :class:`Decision`: one start-up decision (a field, its value before and after, the reason
  as vLLM logs it and the rule with its numbers);
- :class:`StartFailure`: why the engine would not start (vLLM's exception, where, at which
  step);
- :class:`Startup`: all of it, the ``startup`` fact of a run.

:func:`layer_kinds` finds the kinds of a resolved config from its KV-cache layer pattern
(:mod:`.kv_specs`), adding the encoder-only layers that keep no KV cache.
"""

from __future__ import annotations

from typing import Any, Mapping

import attrs

from enginecfg.pipeline.models import kv_cache as kc
from enginecfg.pipeline.models import kv_specs, mamba_state
from enginecfg.pipeline.models.architectures import ARCHITECTURES
from enginecfg.pipeline.models.engine_defaults import is_causal
from enginecfg.pipeline.hf import ContentMemo, memoised, typed

__all__ = ["LayerKind", "LayerBackend", "Decision", "StartFailure", "Startup", "StartupUnavailable",
           "layer_kinds", "layer_state_page", "state_page_failure", "SSM_BACKENDS", "LayerClasses",
           "select_layer_backends"]

#: the backend a Mamba-like layer always gets (its class fixes it; the selector is not asked)
SSM_BACKENDS = {"mamba1": "MAMBA1_ATTN", "mamba2": "MAMBA2_ATTN", "gdn_attention": "GDN_ATTN",
                "short_conv": "SHORT_CONV_ATTN", "linear_attention": "LINEAR_ATTN"}


class _Immutable:
    """Frozen all the way down: a copy is the value itself."""

    __slots__ = ()

    def __copy__(self):
        return self

    def __deepcopy__(self, memo: dict) -> Any:
        return self


@attrs.frozen
class LayerKind(_Immutable):
    """One kind of layer, as the model class builds it.

    ``kind`` is ``attention`` (full or sliding-window attention, decoder or encoder-only),
    ``mla`` or ``mamba`` (any recurrent-state layer: Mamba, gated delta net, short
    convolution, linear attention).  ``first_layer`` is the name of the first layer of the
    kind (vLLM's module name); ``layers`` how many there are.  ``state_kind`` names the
    Mamba state calculator of a ``mamba`` kind (``mamba1``, ``gated_delta_net``, ...).
    """

    kind: str
    layers: int
    first_layer: str
    attn_type: str | None = None
    head_size: int | None = None
    sliding_window: int | None = None
    kv_cache_dtype: str | None = None
    mamba_type: str | None = None
    state_kind: str | None = None
    #: the index of the kind's first layer among all layers (the order vLLM builds them in)
    position: int = 0

    @property
    def is_attention(self) -> bool:
        return self.kind in ("attention", "mla")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "layers": self.layers, "first_layer": self.first_layer}
        if self.kind == "mamba":
            out.update(mamba_type=self.mamba_type, state_kind=self.state_kind)
        else:
            out.update(attn_type=self.attn_type, head_size=self.head_size,
                       sliding_window=self.sliding_window, kv_cache_dtype=self.kv_cache_dtype)
        return out


@attrs.frozen
class LayerBackend(_Immutable):
    """A kind of layer with the backend the engine start gives it.

    ``layer_class`` is the layer's class in the release (``Attention``, ``MLAAttention``,
    ``MambaMixer2``, ...).  For attention kinds: ``forced`` (the backend was named, by the
    user or by a config hook, and validated alone), ``priority`` (the list tried, in order;
    empty when forced), ``refused`` (each backend that said no, with its reasons, in
    priority order), ``fa_version`` (FlashAttention's version where the backend runs it),
    ``kernel_block_sizes`` with ``kernel_block_multiple_of`` (a fixed size, or any multiple
    of it) and ``preferred_block_size``.  ``error`` is vLLM's refusal when no
    backend serves the kind (the model class then cannot be built).
    """

    layer: LayerKind
    layer_class: str
    backend: str | None
    forced: bool = False
    priority: tuple[str, ...] = ()
    refused: tuple[tuple[str, tuple[str, ...]], ...] = ()
    fa_version: int | None = None
    kernel_block_sizes: tuple[int, ...] = ()
    kernel_block_multiple_of: tuple[bool, ...] = ()
    preferred_block_size: int | None = None
    error: str | None = None

    @property
    def refused_map(self) -> dict[str, list[str]]:
        return {name: list(reasons) for name, reasons in self.refused}

    def to_dict(self) -> dict[str, Any]:
        out = {"layer_class": self.layer_class, **self.layer.to_dict(), "backend": self.backend}
        if self.layer.kind != "mamba":
            out.update(forced=self.forced, priority=list(self.priority), refused=self.refused_map,
                       fa_version=self.fa_version, kernel_block_sizes=list(self.kernel_block_sizes),
                       kernel_block_multiple_of=list(self.kernel_block_multiple_of),
                       preferred_block_size=self.preferred_block_size, error=self.error)
        return out


@attrs.frozen
class Decision(_Immutable):
    """One start-up decision: ``field`` (``block_size``, ``mamba_block_size``,
    ``mamba_page_size_padded``, ``engine_block_size``) goes from ``old`` (its config-time
    value) to ``new``; ``reason`` is vLLM's log line where it logs one; ``explanation``
    the rule and its numbers; ``rule`` the rule's id where the release's notes name one."""

    field: str
    old: Any
    new: Any
    reason: str
    explanation: str
    rule: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "old": self.old, "new": self.new, "reason": self.reason,
                "explanation": self.explanation, "rule": self.rule}


@attrs.frozen
class StartFailure(_Immutable):
    """Why the engine would not start, known before anything loads.

    ``step``: ``build`` (the model class cannot be built: ``load_model`` raises) or
    ``start`` (it builds, then the start-up step, the KV-cache planning or the block-size
    check raises).  ``vllm_type`` and ``message`` are vLLM's exception, ``where`` the place
    in vLLM that raises it, ``reason`` the cause in words, ``rule`` the rule's id where
    the release's notes name one."""

    step: str
    vllm_type: str
    message: str
    where: str
    reason: str
    rule: str | None = None

    @property
    def text(self) -> str:
        """The failure as a start verdict gives it: vLLM's exception as it prints it, or its type
        and the cause in words where its text is not known (a bare assertion)."""
        return f"{self.vllm_type}: {self.message}" if self.message else f"{self.vllm_type} ({self.reason})"

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "vllm_type": self.vllm_type, "message": self.message,
                "where": self.where, "reason": self.reason, "rule": self.rule}


@attrs.frozen
class Startup(_Immutable):
    """What the engine start decides for a resolved config on one GPU (the ``startup`` fact).

    The config-time fields of the run stay as vLLM resolved them at config time; these are
    the decisions that follow when the engine starts:

    * ``backends``: every kind of layer with its backend, in layer order;
    * ``block_size``: the KV-cache block size after the platform fitted it to the backends
      (the size each attention layer declares its KV cache with); ``mamba_block_size`` and
      ``mamba_page_size_padded`` the Mamba ones the engine starts with;
    * ``engine_block_size``: the smallest block size of the KV-cache groups, which the
      engine writes back into the cache config after planning (None: no KV cache);
    * ``decisions``: each start-up decision with its reason and explanation, in order;
    * ``messages``: ``(level, text)`` of what vLLM logs while it does this, in order;
    * ``failure``: why the engine would not start (None: it starts);
    * ``disable_hybrid_kv_cache_manager``: the flag the KV grouping followed.
    """

    release: str
    gpu: str
    capability: str
    backends: tuple[LayerBackend, ...] = attrs.field(converter=tuple)
    block_size: int
    mamba_block_size: int | None
    mamba_page_size_padded: int | None
    engine_block_size: int | None = None
    decisions: tuple[Decision, ...] = attrs.field(default=(), converter=tuple)
    messages: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=tuple)
    failure: StartFailure | None = None
    disable_hybrid_kv_cache_manager: bool = False

    @property
    def starts(self) -> bool:
        return self.failure is None

    @property
    def attention_backends(self) -> tuple[str, ...]:
        """The distinct backends of the attention layers, in layer order."""
        seen: list[str] = []
        for lb in self.backends:
            if lb.layer.is_attention and lb.backend is not None and lb.backend not in seen:
                seen.append(lb.backend)
        return tuple(seen)

    def to_dict(self) -> dict[str, Any]:
        return {
            "release": self.release, "gpu": self.gpu, "capability": self.capability,
            "starts": self.starts,
            "backends": [b.to_dict() for b in self.backends],
            "block_size": self.block_size, "mamba_block_size": self.mamba_block_size,
            "mamba_page_size_padded": self.mamba_page_size_padded,
            "engine_block_size": self.engine_block_size,
            "decisions": [d.to_dict() for d in self.decisions],
            "messages": [{"level": lvl, "message": msg} for lvl, msg in self.messages],
            "failure": self.failure.to_dict() if self.failure is not None else None,
            "disable_hybrid_kv_cache_manager": self.disable_hybrid_kv_cache_manager,
        }


@attrs.frozen
class StartupUnavailable(_Immutable):
    """The start-up step could not be worked out (a layer pattern enginecfg does not know):
    why, and the field when one is to blame.  ``failure``: where what stopped the working out
    is a refusal of vLLM's own (a dimension the tensor-parallel size does not divide), why
    the engine would not start; its decisions are then unknown, but not its verdict."""

    error: str
    field: str | None = None
    failure: StartFailure | None = None

    @property
    def starts(self) -> bool | None:
        """False when vLLM would not start (``failure``), None when that is not known."""
        return False if self.failure is not None else None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": self.error, "field": self.field}
        if self.failure is not None:
            out.update(starts=False, failure=self.failure.to_dict())
        return out


def _attention_kind(spec: Any, attn_type: str, kv_cache_dtype: str) -> tuple:
    window = spec.sliding_window if isinstance(spec, (kc.SlidingWindowSpec, kc.FullAttentionSpec)) else None
    if isinstance(spec, kc.MLAAttentionSpec):
        return ("mla", attn_type, spec.head_size, None, kv_cache_dtype)
    return ("attention", attn_type, spec.head_size, window, kv_cache_dtype)


def layer_kinds(cfg: Any) -> list[LayerKind]:
    """The kinds of layer the model class of *cfg* builds, in the order it builds them.

    From the KV-cache layer pattern (:func:`.kv_specs.layer_specs`): full and sliding-window
    attention, MLA and Mamba-like layers.  A model whose attention is bidirectional (an
    encoder-only pooling model) keeps no KV cache, so the pattern lists nothing; its
    ``num_hidden_layers`` encoder-only attention layers are a kind all the same (they ask
    the selector for a backend).
    """
    return list(_layer_kinds(cfg))


#: the kinds of layer of every config seen before in this process (pure in the config)
KINDS = ContentMemo(maxsize=256)


@memoised(KINDS)
def _layer_kinds(cfg: Any) -> tuple[LayerKind, ...]:
    mc, cc = cfg.model_config, cfg.cache_config
    kinds: dict[tuple, list] = {}
    specs = kv_specs.layer_specs(cfg)
    info = mc.arch_info
    for position, (name, spec) in enumerate(specs.items()):
        if isinstance(spec, kc.MambaSpec):
            key = ("mamba", spec.mamba_type, info.state_kind if info is not None else None)
        else:
            key = _attention_kind(spec, "decoder", cc.cache_dtype)
        entry = kinds.get(key)
        if entry is None:
            kinds[key] = [name, 1, position]
        else:
            entry[1] += 1
    out = []
    for key, (first, n, position) in kinds.items():
        if key[0] == "mamba":
            out.append(LayerKind("mamba", n, first, mamba_type=key[1], state_kind=key[2], position=position))
        else:
            kind, attn_type, head, window, kv_dtype = key
            out.append(LayerKind(kind, n, first, attn_type=attn_type, head_size=head, sliding_window=window,
                                 kv_cache_dtype=kv_dtype, position=position))
    if not out and not mc.is_attention_free and not is_causal(mc.hf_config):
        row = ARCHITECTURES.get(mc.architecture or "")
        if row is None or row.kv_layout is None:
            n = typed.attr(mc.hf_text_config, "num_hidden_layers", typed.INT) or 0
            if n > 0:
                out.append(LayerKind("attention", n, "model.layers.0.self_attn.attn", attn_type="encoder_only",
                                     head_size=mc.head_size, kv_cache_dtype=cc.cache_dtype))
    return tuple(out)


def layer_state_page(cfg: Any) -> int | None:
    """The bytes of one Mamba state page as the model's real mixer layers keep it, where that
    differs from the config-level shapes the alignment sized the pages with (None: it does not).

    Zamba2's mixer takes its head dimension from the intermediate size over the Mamba heads,
    while the config-level shape reads ``mamba_headdim``; a config whose two disagree builds
    layers with a larger (or smaller) state than the padded page was made for.
    """
    mc, cc = cfg.model_config, cfg.cache_config
    info = mc.arch_info
    if info is None or info.state_recipe != "zamba2":
        return None
    text = mc.hf_text_config
    read = {name: typed.attr(text, name, typed.INT) for name in
            ("mamba_expand", "hidden_size", "mamba_ngroups", "n_mamba_heads", "mamba_headdim",
             "mamba_d_state", "mamba_d_conv")}
    if any(v is None for v in read.values()) or not read["n_mamba_heads"]:
        return None
    width = read["mamba_expand"] * read["hidden_size"]
    head_dim = width // read["n_mamba_heads"]
    if head_dim == read["mamba_headdim"]:
        return None
    tp = cfg.parallel_config.tensor_parallel_size
    shapes = mamba_state.mamba2_state_shape(tp, width, read["mamba_ngroups"], read["n_mamba_heads"], head_dim,
                                            read["mamba_d_state"], read["mamba_d_conv"])
    dtypes = mamba_state.state_dtypes(info, mc.dtype, cc.mamba_cache_dtype, cc.mamba_ssm_cache_dtype)
    return mamba_state.page_size(shapes, dtypes)


def state_page_failure(cfg: Any, padded: int | None, config_page: int) -> StartFailure | None:
    """The engine's layout step asserting that the padded Mamba page holds the real state
    (:func:`layer_state_page`); None when it does."""
    real = layer_state_page(cfg)
    if real is None or padded is None or real <= padded:
        return None
    return StartFailure(
        "start", "AssertionError", "", "v1/kv_cache_interface.py in MambaSpec.page_size_bytes",
        f"the Mamba mixer layers keep a state of {real:,} bytes (their head dimension is the "
        f"intermediate size over the Mamba heads), but the pages were padded to {padded:,} bytes "
        f"from the config-level state of {config_page:,} bytes (mamba_headdim)")


@attrs.frozen
class LayerClasses:
    """The classes a vLLM release builds its layers with: the Mamba-like ones by state
    calculator, and OLMo hybrid's gated delta net, which has a class of its own."""

    mamba: Mapping[str, str]
    olmo_hybrid: str

    def of(self, kind: LayerKind, architecture: str | None) -> str:
        """The class a layer of *kind* is built with."""
        if kind.kind == "mla":
            return "MLAAttention"
        if kind.kind == "attention":
            return "EncoderOnlyAttention" if kind.attn_type == "encoder_only" else "Attention"
        if architecture == "OlmoHybridForCausalLM":
            return self.olmo_hybrid
        return self.mamba.get(kind.state_kind or "", "MambaMixer2")


def select_layer_backends(cfg: Any, kinds: list[LayerKind], capability: tuple[int, int], *,
                          layer_class: Any, query: Any, select: Any, fa_version: Any,
                          after: Any = None, rule: str | None = None
                          ) -> tuple[list[LayerBackend], list[tuple[str, str]], StartFailure | None]:
    """The engine start's backend loop, one release's selector given: every kind of layer with
    its backend (a Mamba-like layer's is fixed by its class), the selector's warnings, and the
    first failure (a backend that refuses, or what *after* finds about the chosen one).

    The release's hooks: ``layer_class(kind, architecture)``, ``query(kind)`` (the selector's
    query), ``select(query, kind, forced, num_heads)`` (its :class:`Selection`),
    ``fa_version(selection, kind, query)`` and ``after(backend)`` (a failure or None); *rule*:
    the id a refusal's failure names."""
    mc = cfg.model_config
    forced = cfg.attention_config.backend
    heads = mc.num_attention_heads
    per_rank = heads // cfg.parallel_config.tensor_parallel_size if isinstance(heads, int) else None
    out: list[LayerBackend] = []
    messages: list[tuple[str, str]] = []
    failure: StartFailure | None = None
    for kind in kinds:
        cls = layer_class(kind, mc.architecture)
        if kind.kind == "mamba":
            out.append(LayerBackend(kind, cls, SSM_BACKENDS.get(kind.mamba_type or "", "MAMBA2_ATTN")))
            continue
        q = query(kind)
        sel = select(q, kind, forced, per_rank)
        if sel.warning is not None:
            messages.append(("WARNING", sel.warning))
        out.append(LayerBackend(kind, cls, sel.backend, forced=sel.forced, priority=sel.priority,
                                refused=sel.refused, fa_version=fa_version(sel, kind, q),
                                kernel_block_sizes=tuple(size for size, _ in sel.kernel_blocks),
                                kernel_block_multiple_of=tuple(m for _, m in sel.kernel_blocks),
                                preferred_block_size=sel.preferred_block_size, error=sel.error))
        if failure is None and sel.error is not None:
            why = (f"the named backend {forced} refuses the {cls} layers" if sel.forced else
                   f"no backend on compute capability {capability[0]}.{capability[1]} serves the "
                   f"{cls} layers")
            failure = StartFailure("build", "ValueError", sel.error,
                                   "platforms/cuda.py in CudaPlatformBase.get_attn_backend_cls", why,
                                   *((rule,) if rule is not None else ()))
        if failure is None and sel.backend is not None and after is not None:
            failure = after(sel.backend)
    return out, messages, failure
