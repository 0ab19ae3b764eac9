"""What vLLM does with an architecture name it does not register.

vLLM resolves ``config.json``'s ``architectures`` against its model registry.  A name it
registers (or reaches by swapping its task suffix, ``...ForSequenceClassification`` for
``...ForCausalLM``) is its own class.  When none of the names is registered and
``--model-impl`` is ``auto``, it tries its Transformers backend with the first name: the
transformers class of that name, or the class the config's ``auto_map`` names (custom code),
if the backend can run it (the class says so, ``is_backend_compatible()``; vLLM 0.34.0 also
takes a class whose module uses the attention interface).  The model then resolves to the
backend's class (``TransformersForCausalLM``, with ``MultiModal`` for a nested config and
``MoE`` with experts, or the embedding / classification class a pooling name defaults to).
Otherwise vLLM refuses the architecture: in words of its own for a name it dropped or moved to a
plugin, else with the list of what it supports (``registry.py``: ``_raise_for_unsupported``).

A :class:`Registry` holds one release's names (generated from its source by
``tools/dump_vllm_registry.py``: :mod:`.vllm_registry_019` whole, ``v034.vllm_registry_034`` as
what 0.34.0 changed on it, put together by :meth:`Registry.changed`) and
:func:`Registry.resolve` answers for a config; :data:`REGISTRY` is vLLM 0.19.0's.  Which
transformers classes the backend runs comes from transformers itself
(:mod:`.transformers_classes`, ``tools/dump_transformers_classes.py``).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, Sequence

import attrs

from enginecfg.pipeline.errors import ConfigRejectedError
from enginecfg.pipeline.hf import typed
from enginecfg.pipeline.models import vllm_registry_019
from enginecfg.pipeline.models.architectures import ARCH_SUFFIXES, SUFFIX_DEFAULTS

__all__ = ["Registry", "Fallback", "REGISTRY", "backend_class"]


@attrs.frozen
class Fallback:
    """An architecture vLLM does not register, run on its Transformers backend: the name the
    config gives, the backend class it resolves to, and what the backend runs (``transformers``:
    transformers' class of that name; ``auto_map``: the config's own code)."""

    architecture: str
    backend_class: str
    runs: str
    release: str

    def note(self) -> str:
        head = f"{self.architecture} is not in vLLM {self.release}'s model registry: vLLM runs "
        if self.runs == "transformers":
            return (head + f"transformers' {self.architecture} class on its Transformers backend "
                           f"({self.backend_class}), as a plain attention model")
        return (head + f"the class the config's auto_map names (its own code, loaded with --trust-remote-code) "
                       f"on its Transformers backend ({self.backend_class}), as a plain attention model, if that "
                       f"class says the backend can run it (enginecfg never runs the code to ask)")


def backend_class(architecture: str, hf: Any, text: Any) -> str:
    """The Transformers backend class vLLM resolves *architecture* to (``--runner auto``):
    ``Transformers``, ``MultiModal`` for a nested config, ``MoE`` with experts, then the class of
    the task the name's suffix defaults to (embedding, classification) or ``ForCausalLM``."""
    name = "Transformers" + ("MultiModal" if text is not hf else "")
    experts = [typed.attr(text, key, typed.ANY) for key in ("num_experts", "num_local_experts", "n_routed_experts",
                                                            "moe_num_experts")]
    if any(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in experts):
        name += "MoE"
    task = next(((runner, convert) for suffix, runner, convert in SUFFIX_DEFAULTS if architecture.endswith(suffix)),
                None)
    if task == ("pooling", "embed"):
        return name + "EmbeddingModel"
    if task == ("pooling", "classify"):
        return name + "ForSequenceClassification"
    return name + "ForCausalLM"


@attrs.frozen
class Registry:
    """One vLLM release's model registry: its names in its order, the names it dropped (with the
    last release that had them) and those a plugin serves; ``attention_interface``: whether its
    Transformers backend also runs a class whose module uses the attention interface."""

    release: str
    supported: tuple[str, ...] = attrs.field(converter=tuple)
    previously: Mapping[str, str] = attrs.field(converter=lambda m: MappingProxyType(dict(m)))
    oot: Mapping[str, str] = attrs.field(converter=lambda m: MappingProxyType(dict(m)))
    attention_interface: bool = False
    #: what the release's own config classes set when config.json leaves a field out, where
    #: that differs from the previous release: ``{model_type: {field: default}}`` (the text
    #: config's fields; read where the model config is built, before any length is derived)
    class_defaults: Mapping[str, Mapping[str, Any]] = attrs.field(
        factory=dict, converter=lambda m: MappingProxyType({k: MappingProxyType(dict(v)) for k, v in m.items()}))

    @property
    def memo_key(self) -> tuple:
        """What tells two registries apart where a load is memoised: the release whose table it
        is, and what it adds to that table (two releases' rules may read one table with
        different config-class defaults)."""
        return (self.release, self.attention_interface,
                tuple((t, tuple(sorted(d.items()))) for t, d in sorted(self.class_defaults.items())))

    def changed(self, change: Any, **kw: Any) -> Registry:
        """The registry of a later release: this one with *change* applied (a module
        ``tools/dump_vllm_registry.py --on`` generated: ``VLLM_VERSION``, ``ON``, which must be
        this release, ``SUPPORTED_RUNS`` and the entries the other two tables set and drop);
        *kw*: the later release's own ``attention_interface`` and ``class_defaults``."""
        if change.ON != self.release:
            raise ValueError(f"the change is on vLLM {change.ON}'s registry, not {self.release}'s")
        supported: list[str] = []
        for kind, *names in change.SUPPORTED_RUNS:
            if kind == "keep":
                first, last = self.supported.index(names[0]), self.supported.index(names[1])
                supported += self.supported[first:last + 1]
            else:
                supported += names

        def table(old: Mapping[str, str], sets: Mapping[str, str], drops: Sequence[str]) -> dict[str, str]:
            merged = {k: v for k, v in old.items() if k not in drops}
            merged.update(sets)
            return merged
        return Registry(change.VLLM_VERSION, supported,
                        table(self.previously, change.PREVIOUSLY_SUPPORTED_SET, change.PREVIOUSLY_SUPPORTED_DROPPED),
                        table(self.oot, change.OOT_SUPPORTED_SET, change.OOT_SUPPORTED_DROPPED), **kw)

    def fill_class_defaults(self, text: Any) -> tuple[str, ...]:
        """Give *text* (the text config's view) the release's class defaults for the fields its
        config.json leaves out; returns the names filled in."""
        model_type = typed.attr(text, "model_type", typed.ANY)
        defaults = self.class_defaults.get(model_type, {}) if isinstance(model_type, str) else {}
        filled = tuple(name for name in defaults if not typed.has(text, name))
        for name in filled:
            setattr(text, name, defaults[name])
        return filled

    def registers(self, name: str) -> bool:
        """Is *name* vLLM's own class, as it is or with its task suffix swapped (``_normalize_arch``)?"""
        names = self._names
        if name in names:
            return True
        suffix = next((s for s in ARCH_SUFFIXES if name.endswith(s)), None)
        return suffix is not None and any(name.replace(suffix, repl) in names for repl in ARCH_SUFFIXES)

    @property
    def _names(self) -> frozenset[str]:
        return frozenset(self.supported)

    def _runs(self, name: str) -> bool:
        from enginecfg.pipeline.models.transformers_classes import MODEL_CLASSES

        compatible, interface = MODEL_CLASSES.get(name, (False, False))
        return compatible or (self.attention_interface and interface)

    def resolve(self, architectures: Sequence[str], hf: Any, text: Any) -> Fallback | None:
        """None when vLLM registers one of *architectures*; else the Transformers backend
        fallback it takes, or :class:`ConfigRejectedError` with its refusal."""
        names = list(architectures)
        if any(self.registers(n) for n in names):
            return None
        first = names[0]
        auto_map = typed.attr(hf, "auto_map", typed.ANY)
        if isinstance(auto_map, Mapping) and any(str(k).startswith("AutoModel") for k in auto_map):
            return Fallback(first, backend_class(first, hf, text), "auto_map", self.release)
        if self._runs(first):
            return Fallback(first, backend_class(first, hf, text), "transformers", self.release)
        raise self.refusal(names)

    def refusal(self, names: list[str]) -> ConfigRejectedError:
        """vLLM's refusal of *names* (``_raise_for_unsupported``); its list of every supported
        name is given as its count and the closest names."""
        for name in names:
            if name in self.previously:
                return self._error(f"Model architecture {name} was supported in vLLM until v{self.previously[name]}, "
                                   f"and is not supported anymore. Please use an older version of vLLM if you want "
                                   f"to use this model architecture.")
            if name in self.oot:
                return self._error(f"Model architecture {name} is not supported in-tree anymore. Please install the "
                                   f"plugin at {self.oot[name]} if you want to use this model architecture.")
        from enginecfg.pipeline.suggest import closest

        near = closest(names[0], list(self.supported))
        shown = f"; the closest: {', '.join(near)}" if near else ""
        return self._error(f"Model architectures {names!r} are not supported for now. Supported architectures: "
                           f"dict_keys([...]) (the {len(self.supported)} names vLLM {self.release} registers{shown})")

    def _error(self, message: str) -> ConfigRejectedError:
        return ConfigRejectedError(message, field="hf_config.architectures", stage="loading",
                                   vllm_type="ValueError")


#: vLLM 0.19.0's registry (its Transformers backend runs the classes that say they can)
REGISTRY = Registry(vllm_registry_019.VLLM_VERSION, vllm_registry_019.SUPPORTED,
                    vllm_registry_019.PREVIOUSLY_SUPPORTED, vllm_registry_019.OOT_SUPPORTED)
