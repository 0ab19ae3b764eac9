"""The tamper-evident hash of a run and of each of its child rows.

``row_hash`` of a child row is sha256 over a canonical JSON of its fields; ``row_hash`` of a
run is sha256 over a canonical JSON of the run's own fields, its ``prev_hash`` and
``chain_pos``, and the ordered child hashes of every child table.  So editing any row,
deleting or adding a child row, or moving a run in the chain changes a hash that
``verify`` recomputes.

The field lists are fixed here, not read from the models, so that a later migration adding
a column does not silently change the hash of rows written before it.  They come in
numbered *layouts*: every run row records the layout it was hashed with
(``runs.hash_layout``), and its child rows are hashed with the same one, so rows written
before a hashed column existed keep verifying after it is added.  Adding a hashed column is
one migration plus one entry in :data:`LAYOUT_STEPS`.  The layout number itself needs no
hashing: the field set it names is what the hash covers, so claiming another layout changes
the body and no longer matches the stored hash.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from enginecfg.pipeline.jsonvalue import canonical_json

__all__ = [
    "RUN_FIELDS",
    "OPTIONAL_RUN_FIELDS",
    "CHILD_FIELDS",
    "CHILD_ORDER",
    "LAYOUT_STEPS",
    "Layout",
    "UnknownLayoutError",
    "current_layout",
    "layout",
    "canonical",
    "child_hash",
    "child_hashes",
    "run_hash",
    "PreparedRunHash",
    "CHAIN_FIELDS",
    "LOSS_FIELDS",
    "loss_hash",
]

RUN_FIELDS = (
    "id", "chain_pos", "prev_hash", "started_at", "finished_at", "recorded_at", "status",
    "enginecfg_version", "host", "pid", "model", "architecture", "engine_args",
    "planned_stages", "input_config", "input_fingerprint", "result", "result_fingerprint",
    "error", "failed_stage", "n_stages", "n_changes", "n_messages", "n_checks",
)

#: run fields added after the first runs were written: hashed only when set, so that the hash
#: of a run written before the field existed does not change
OPTIONAL_RUN_FIELDS = ("source",)

CHILD_FIELDS: dict[str, tuple[str, ...]] = {
    "stage_executions": ("run_id", "stage_order", "stage", "origin", "outcome", "duration_s",
                         "n_changes", "error"),
    "changes": ("run_id", "seq", "stage", "field", "old", "new", "reason", "level", "via"),
    "messages": ("run_id", "seq", "stage", "level", "message"),
    "validation_checks": ("run_id", "seq", "check", "kernel", "shapes", "dtype", "max_error",
                          "tolerance", "passed", "device", "seconds", "detail"),
}

#: The hashed fields, layout by layout: layout *n* hashes the fields of entries 1..*n*.
#: To hash a new column: add it in a migration and append ONE entry here, e.g.
#: ``{"runs": ("site",)}`` (a new child table: ``{"new_table": ("run_id", "seq", ...)}``).
#: Never edit or remove an entry: runs recorded with it would no longer verify.
LAYOUT_STEPS: list[Mapping[str, tuple[str, ...]]] = [
    # 1: the fields up to revision 0003_impact ("source" hashed only when set; the impact
    #    columns are not hashed: verify compares them with the hashed result)
    {"runs": RUN_FIELDS, **CHILD_FIELDS},
    # 2: who ran it (revision 0007_actor): the operating-system user and the explicit actor
    {"runs": ("os_user", "actor")},
    # 3: what the KV-cache figures assumed and whether vLLM would start (revision
    #    0009_impact_memory), projections of the hashed result kept in columns
    {"runs": ("gpu", "gpu_memory_bytes", "gpu_memory_utilization", "kv_cache_memory",
              "kv_cache_memory_bytes", "num_gpu_blocks_override", "starts")},
    # 4: the vLLM release whose rules decided the run (revision 0010_release); from this
    #    layout on ``gpu`` also names the start-up GPU of a run without KV-cache figures
    {"runs": ("vllm_version",)},
    # 5: every column a command shows (revision 0011_hashed_explanations): the explanation
    #    of each change (``why``, ``show``, the page), and the layout number itself
    {"runs": ("hash_layout",), "changes": ("explanation",)},
]

#: The hashed fields of an ``audit_losses`` row (revision 0012_hashed_losses): every column
#: but ``row_hash`` itself (``id``, the order the chain follows, included).  The losses form a chain
#: of their own: ``prev_hash`` is the hash of the loss recorded before (GENESIS for the
#: first), and ``chain_head.losses_head`` names the last.  Never edit: recorded losses would
#: no longer verify.
LOSS_FIELDS = ("id", "recorded_at", "store_id", "head_position", "head_hash", "runs", "from_revision",
               "to_revision", "dropped", "export_path", "export_sha256", "os_user", "actor",
               "host", "prev_hash")

#: The column each child table is ordered by within a run.
CHILD_ORDER = {"stage_executions": "stage_order", "changes": "seq", "messages": "seq",
               "validation_checks": "seq"}


def canonical(value: Any) -> bytes:
    """Deterministic JSON bytes: sorted keys, no whitespace, NaN/Infinity spelled out."""
    return _utf8(canonical_json(value, ascii_only=False))


def _utf8(text: str) -> bytes:
    """The UTF-8 bytes of a canonical text.  A lone surrogate (a JSON value's ``\\udXXX``
    escape, a file name's undecodable byte) has none: it is written as that escape, which
    the canonical JSON of no other value spells, since a backslash inside a value is
    written doubled.  (Text columns are hashed as stored, after
    :func:`enginecfg.store.models.storable_text`.)
    Every other text encodes exactly as before."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace")


def _canonical_text(value: Any) -> str:
    """:func:`canonical` before its UTF-8 encoding (for texts that are cut and joined first)."""
    return canonical_json(value, ascii_only=False)


def _sha(value: Any) -> str:
    return hashlib.sha256(canonical(value)).hexdigest()


class UnknownLayoutError(ValueError):
    """A row names a hash layout this version of enginecfg does not know."""


@attrs.frozen
class Layout:
    """The fields one layout hashes: the run's own, and each child table's."""

    number: int
    run_fields: tuple[str, ...]
    child_fields: Mapping[str, tuple[str, ...]]


def current_layout() -> int:
    """The layout new runs are hashed with: the newest one."""
    return len(LAYOUT_STEPS)


_cache: dict[tuple[int, int], Layout] = {}


def layout(number: int | None) -> Layout:
    """Layout ``number`` (None: a row from before layouts were recorded, i.e. layout 1)."""
    n = 1 if number is None else number
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= len(LAYOUT_STEPS):
        raise UnknownLayoutError(f"hash layout {number!r} is not one of 1..{len(LAYOUT_STEPS)} "
                                 "(recorded by a newer enginecfg, or altered)")
    key = (n, len(LAYOUT_STEPS))
    found = _cache.get(key)
    if found is None:
        fields: dict[str, tuple[str, ...]] = {}
        for step in LAYOUT_STEPS[:n]:
            for table, names in step.items():
                fields[table] = fields.get(table, ()) + tuple(names)
        run_fields = fields.pop("runs")
        found = _cache[key] = Layout(n, run_fields, fields)
    return found


def child_hash(table: str, row: Mapping[str, Any], layout_number: int | None = None) -> str:
    """The hash of one child row of ``table`` under a layout (default: the newest)."""
    lay = layout(current_layout() if layout_number is None else layout_number)
    return _sha({"table": table, **{f: row.get(f) for f in lay.child_fields[table]}})


#: the run fields only known once the chain head is read (inside the write lock)
CHAIN_FIELDS = ("chain_pos", "prev_hash", "recorded_at")


class PreparedRunHash:
    """:func:`run_hash` in two steps: every field but :data:`CHAIN_FIELDS` encoded ahead
    (outside the write lock), then :meth:`finish` with the chain fields.

    The canonical JSON of an object with text keys is its members, sorted by key, each
    ``key:value`` with the value's own canonical JSON: so encoding the members apart and
    joining them gives the very bytes :func:`run_hash` hashes (a test checks it), and the
    writer holds its lock only for three small values and one sha256.
    """

    __slots__ = ("pieces", "order")

    def __init__(self, run: Mapping[str, Any], children: Mapping[str, Sequence[str]]):
        body = _run_body(run, children)
        #: the chain fields this layout hashes, in key order
        self.order = tuple(k for k in sorted(body) if k in CHAIN_FIELDS)
        # one encoding of the whole body, a marker in each chain field's place: the texts
        # between the markers are the texts between those fields' values
        text = _canonical_text({k: _MARKER if k in CHAIN_FIELDS else v for k, v in body.items()})
        self.pieces = text.split(_MARKER_TEXT)
        if len(self.pieces) != len(self.order) + 1:  # a value held the marker: member by member
            self.pieces, text = [], "{"
            for i, k in enumerate(sorted(body)):
                text += ("," if i else "") + _member(k)
                if k in CHAIN_FIELDS:
                    self.pieces.append(text)
                    text = ""
                else:
                    text += _canonical_text(body[k])
            self.pieces.append(text + "}")

    def finish(self, **chain: Any) -> str:
        """The run's hash, given the chain fields its layout hashes."""
        return hashlib.sha256(_utf8(self._text(chain))).hexdigest()

    def around_head(self, **known: Any) -> tuple[bytes, bytes, bytes]:
        """The hashed bytes but for the head-dependent values, for a database that reads the
        head and hashes in one statement: ``(a, b, c)`` such that the hash is
        ``sha256(a + str(chain_pos) + b + prev_hash + c)``, ``prev_hash`` being hex (written
        as is inside its quotes), given every other chain field in ``known``."""
        text = self._text({**known, "chain_pos": _CUT, "prev_hash": _CUT_TEXT})
        a, b, c = text.split(_CUT_MARK)
        return _utf8(a), _utf8(b), _utf8(c)

    def _text(self, chain: Mapping[str, Any]) -> str:
        out = [self.pieces[0]]
        for key, piece in zip(self.order, self.pieces[1:]):
            out.append(_encode_chain(chain[key]))
            out.append(piece)
        return "".join(out)


#: a text no run value holds: it stands for a value while the rest is encoded around it
_MARKER = "\x00enginecfg-" + secrets.token_hex(16)
_MARKER_TEXT = _canonical_text(_MARKER)


def child_hashes(table: str, rows: Sequence[Mapping[str, Any]], layout_number: int | None = None) -> list[str]:
    """:func:`child_hash` of each row, from one encoding of them all (a marker between
    two rows: the texts between the markers are the rows' own texts)."""
    if len(rows) < 2:
        return [child_hash(table, row, layout_number) for row in rows]
    fields = layout(current_layout() if layout_number is None else layout_number).child_fields[table]
    docs: list[Any] = []
    for row in rows:
        docs.append({"table": table, **{f: row.get(f) for f in fields}})
        docs.append(_MARKER)
    texts = _canonical_text(docs[:-1])[1:-1].split("," + _MARKER_TEXT + ",")
    if len(texts) != len(rows):  # a value held the marker
        return [child_hash(table, row, layout_number) for row in rows]
    return [hashlib.sha256(_utf8(t)).hexdigest() for t in texts]


#: splits the hashed text where the database writes the head's values (a character no
#: canonical JSON text can hold unescaped)
_CUT_MARK = "\x00"
_CUT = object()
_CUT_TEXT = object()


def _encode_chain(value: Any) -> str:
    if value is _CUT:
        return _CUT_MARK
    if value is _CUT_TEXT:  # a text value: its quotes stay in the hashed text
        return '"' + _CUT_MARK + '"'
    return _canonical_text(value)


def _member(key: str) -> str:
    """``"key":`` as canonical JSON writes an object's member name."""
    text = _MEMBER_NAMES.get(key)
    if text is None:
        text = _MEMBER_NAMES[key] = _canonical_text(key) + ":"
    return text


_MEMBER_NAMES: dict[str, str] = {}


def _run_body(run: Mapping[str, Any], children: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    lay = layout(run.get("hash_layout"))
    body = {f: run.get(f) for f in lay.run_fields}
    # fields added before layouts existed are hashed only when set (see OPTIONAL_RUN_FIELDS)
    for f in OPTIONAL_RUN_FIELDS:
        if run.get(f) is not None:
            body[f] = run[f]
    body["children"] = {t: list(children.get(t, ())) for t in lay.child_fields}
    return body


def run_hash(run: Mapping[str, Any], children: Mapping[str, Sequence[str]]) -> str:
    """The hash of a run: its fields (with prev_hash and chain_pos) and its children's hashes,
    under the layout the run names in ``hash_layout`` (absent or None: layout 1).

    ``children`` maps each child table name to the row hashes of that table's rows of the
    run, in the table's :data:`CHILD_ORDER`.
    """
    return _sha(_run_body(run, children))


def loss_hash(row: Mapping[str, Any]) -> str:
    """The hash of one ``audit_losses`` row: its :data:`LOSS_FIELDS` (``prev_hash`` among
    them, so that a loss deleted, inserted or moved breaks the chain)."""
    return _sha({"table": "audit_losses", **{f: row.get(f) for f in LOSS_FIELDS}})
