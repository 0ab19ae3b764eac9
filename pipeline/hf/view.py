"""A read-mostly attribute view of a transformers config snapshot.

Stages read ``cfg.model_config.hf_config.<name>`` exactly as vLLM reads the transformers
object.  The view shares the cached snapshot between runs and keeps this run's writes in an
overlay, so one run's ``hf_config.is_causal = False`` never leaks into the next.  Mutable
values (lists, dicts) are copied into the overlay when first read: an in-place edit lands in
this run's overlay, where the pipeline's snapshot diff finds it.  Once frozen, writes raise
:class:`~enginecfg.pipeline.errors.FrozenConfigError` and mutable values come back read-only.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Iterator

from enginecfg.pipeline.errors import FrozenConfigError
from enginecfg.pipeline.hf.memo import same_content
from enginecfg.pipeline.hf.snapshot import is_snapshot
from enginecfg.pipeline.jsonvalue import PLAIN, to_json

__all__ = ["HFConfigView", "deep_freeze"]

_MISSING = object()


def deep_freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return MappingProxyType({k: deep_freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple([v if v.__class__ in PLAIN else deep_freeze(v) for v in value])
    return value


class HFConfigView:
    """Attribute access over one config snapshot (and its nested sub-configs)."""

    __slots__ = ("_snap", "_overlay", "_children", "_root", "_path", "_frozen", "_version")

    def __init__(self, snap: dict[str, Any], *, _root: "HFConfigView | None" = None, _path: str = ""):
        object.__setattr__(self, "_snap", snap)
        object.__setattr__(self, "_overlay", {})
        object.__setattr__(self, "_children", {})
        object.__setattr__(self, "_root", _root)
        object.__setattr__(self, "_path", _path)
        object.__setattr__(self, "_frozen", False)
        #: (a root's) moves with every value put into an overlay of its tree: a write, a
        #: value copied on read, the values frozen (see :meth:`overlay_probe`)
        object.__setattr__(self, "_version", 0)

    # -- reading ---------------------------------------------------------------------------
    @property
    def class_name(self) -> str:
        return self._snap.get("class", "PretrainedConfig")

    def _child(self, name: str, snap: dict[str, Any]) -> "HFConfigView":
        child = self._children.get(name)
        if child is None:
            root = self._root or self
            path = f"{self._path}.{name}" if self._path else name
            child = HFConfigView(snap, _root=root, _path=path)
            self._children[name] = child
        return child

    def _lookup(self, name: str) -> Any:
        overlay = self._overlay
        if name in overlay:
            return overlay[name]
        aliases = self._snap.get("aliases") or {}
        if name in aliases:
            return self._lookup(aliases[name])
        attrs = self._snap["attrs"]
        if name not in attrs:
            return _MISSING
        value = attrs[name]
        if is_snapshot(value):
            return self._child(name, value)
        if isinstance(value, (dict, list)):
            if self.is_frozen:
                return deep_freeze(value)
            value = to_json(value)
            overlay[name] = value  # copy-on-read: in-place edits stay in this run
            self._moved()
        return value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = self._lookup(name)
        if value is _MISSING:
            raises = self._snap.get("raises") or {}
            detail = f" ({raises[name]})" if name in raises else ""
            raise AttributeError(f"'{self.class_name}' object has no attribute '{name}'{detail}")
        return value

    def get(self, name: str, default: Any = None) -> Any:
        value = self._lookup(name)
        return default if value is _MISSING else value

    def has(self, name: str) -> bool:
        return self._lookup(name) is not _MISSING

    def _field_or(self, name: str, missing: Any) -> Any:
        """Field ``name``, or ``missing``: what :func:`typed.attr` reads (no exception)."""
        if name.startswith("__"):
            return missing
        value = self._lookup(name)
        return missing if value is _MISSING else value

    def get_text_config(self) -> "HFConfigView":
        target = self._snap.get("text_config", "self")
        if target == "self":
            return self
        sub = getattr(self, target, None)
        return sub if isinstance(sub, HFConfigView) else self

    def keys(self) -> Iterator[str]:
        seen = set(self._snap["attrs"]) | set(self._overlay) | set(self._snap.get("aliases") or {})
        return iter(sorted(seen))

    @property
    def is_frozen(self) -> bool:
        root = self._root or self
        return object.__getattribute__(root, "_frozen")

    # -- writing ---------------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        if self.is_frozen:
            path = f"hf_config.{self._path + '.' if self._path else ''}{name}"
            raise FrozenConfigError(f"the config is frozen: cannot set {path}", field=path)
        aliases = self._snap.get("aliases") or {}
        self._overlay[aliases.get(name, name)] = value
        self._moved()

    def _moved(self) -> None:
        root = self._root or self
        object.__setattr__(root, "_version", root._version + 1)

    def __delattr__(self, name: str) -> None:
        raise FrozenConfigError(f"hf_config attributes cannot be deleted ({name})", field=name)

    def freeze(self) -> None:
        """Refuse writes from now on, and make the values read so far read-only too."""
        root = self._root or self
        object.__setattr__(root, "_frozen", True)
        root._freeze_overlays()
        root._moved()

    def _freeze_overlays(self) -> None:
        for name, value in list(self._overlay.items()):
            if isinstance(value, (dict, list)):
                self._overlay[name] = deep_freeze(value)
        for child in self._children.values():
            child._freeze_overlays()

    def clone(self) -> "HFConfigView":
        """A new root view of the same snapshot holding copies of this view's writes (and its
        sub-views'): what a config loaded again from the same files starts with."""
        new = HFConfigView(self._snap)
        self._clone_into(new)
        return new

    def _clone_into(self, new: "HFConfigView") -> None:
        for name, value in self._overlay.items():
            if isinstance(value, HFConfigView):
                raise TypeError(f"{name} holds a view, not a value: it cannot be copied")
            new._overlay[name] = to_json(value)
        new._moved()
        for name, child in self._children.items():
            child._clone_into(new._child(name, child._snap))

    def at(self, path: str) -> "HFConfigView":
        """The sub-view at a dotted *path* below this one ("" for this view)."""
        view = self
        for part in path.split(".") if path else ():
            view = view._lookup(part)
            if not isinstance(view, HFConfigView):
                raise KeyError(path)
        return view

    def fresh(self) -> "HFConfigView":
        """A new view of the same snapshot with an empty overlay (one per run)."""
        return HFConfigView(self._snap)

    # -- the pipeline's bookkeeping -------------------------------------------------------
    def anchor(self) -> tuple[Any, "HFConfigView | None", str]:
        """What this view reads, by identity: its snapshot, its root view and its path there.

        Snapshots are shared between runs (one per distinct config content), so a memo of
        something computed from a view may key on them (:mod:`enginecfg.pipeline.hf.memo`); this
        run's writes are not in it, they are in :meth:`overlay_state` of the root.
        """
        return self._snap, self._root, self._path

    def _overlay_values(self) -> Iterator[tuple[str, Any, Any]]:
        """``(name, value, kept)`` for each value in this view's own overlay (sub-views left
        out): *kept* is the snapshot's value where the overlay's still equals it (same class,
        equal: a copy made on read and not changed since), else ``_MISSING`` (a real write)."""
        attrs = self._snap["attrs"]
        for name, value in self._overlay.items():
            if isinstance(value, HFConfigView):
                continue
            base = attrs.get(name, _MISSING)
            if base is not _MISSING and not (value.__class__ is base.__class__ and value == base):
                base = _MISSING
            yield name, value, base

    def overlay_state(self) -> dict[str, Any]:
        """``{dotted path: value}`` of everything this run changed in the view.

        Values copied on read that still equal the snapshot's are left out (comparing is far
        cheaper than copying a large ``quantization_config`` at every stage boundary).
        """
        out: dict[str, Any] = {}
        prefix = f"{self._path}." if self._path else ""
        for name, value, kept in self._overlay_values():
            if kept is _MISSING:
                out[prefix + name] = to_json(value)
        for child in self._children.values():
            out.update(child.overlay_state())
        return out

    def overlay_probe(self, state: dict[str, Any]) -> tuple[int, tuple[tuple[Any, ...], ...], int] | None:
        """Whether this root view's writes are those of *state* (a config's state: each write
        that differs from the snapshot found there with the same content), remembered for
        checking again cheaply:
        ``(version, entries, n)``, where *entries* are the values in the overlays that are not
        plain scalars (lists, dicts, anything else: what can change without a write), each
        with what it was compared with, and *n* how many writes differ from the snapshot (each
        found in *state*); None where one is not.

        While the root's version stays the same, no value was put into any overlay of the
        tree, so only those entries can have changed, in place (:meth:`probe_holds`)."""
        version = self._version
        entries: list[tuple[Any, ...]] = []
        n = self._probe_into(state, entries)
        return None if n is None else (version, tuple(entries), n)

    def _probe_into(self, state: dict[str, Any], entries: list) -> int | None:
        n = 0
        prefix = f"hf_config.{self._path}." if self._path else "hf_config."
        for name, value, kept in self._overlay_values():
            if kept is not _MISSING:
                if value.__class__ not in PLAIN:
                    entries.append((value, kept, None))
                continue
            old = state.get(prefix + name, _MISSING)
            if old is _MISSING or not same_content(value, old):
                return None
            if value.__class__ not in PLAIN:
                entries.append((value, old, prefix + name))
            n += 1
        for child in self._children.values():
            m = child._probe_into(state, entries)
            if m is None:
                return None
            n += m
        return n

    def probe_holds(self, probe: tuple[int, tuple[tuple[Any, ...], ...], int]) -> bool:
        """Whether the overlays still hold what :meth:`overlay_probe` found (False where it
        cannot tell: a value was put into an overlay since)."""
        version, entries, _ = probe
        if self._version != version:
            return False
        for value, compared, key in entries:
            if key is None:  # equal to the snapshot's value then: still?
                if not (value.__class__ is compared.__class__ and value == compared):
                    return False
            elif not same_content(value, compared):
                return False
        return True

    def base_value(self, dotted: str) -> Any:
        """The snapshot's value at a dotted path (before any write of this run), or None."""
        snap = self._snap
        parts = dotted.split(".")
        for i, part in enumerate(parts):
            part = (snap.get("aliases") or {}).get(part, part)
            value = snap["attrs"].get(part, _MISSING)
            if value is _MISSING:
                return None
            if i == len(parts) - 1:
                return None if is_snapshot(value) else value
            if not is_snapshot(value):
                return None
            snap = value
        return None

    def __repr__(self) -> str:
        return f"<HFConfigView {self.class_name} model_type={self._snap.get('model_type')!r}>"
