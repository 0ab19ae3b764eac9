"""``audit verify``: recompute the hash chain and name the first record that does not fit.

The walk goes through the runs in chain order, in batches, and for each run checks, in
this order: that its position follows the previous one (a gap means a deleted run), that
its ``prev_hash`` is the previous run's ``row_hash`` (a deleted, inserted or moved run),
that it has as many child rows of each table as it recorded (deleted or inserted child
rows), that every child row still hashes to its ``row_hash`` (an edited child row), and
that the run itself hashes to its ``row_hash`` (an edited run row, or a child row edited
together with its hash).  Each run is checked by the hash layout it names
(``runs.hash_layout``), its child rows by the same one.  Finally the last run must be the one ``chain_head`` names (a run
removed from, or appended to, the tail), and no child row may belong to no run.  The
recorded losses of history (``audit_losses``) form a chain of their own, checked first the
same way: each row against its hash, its link to the loss before, the last against
``chain_head.losses_head``.

The whole walk reads one snapshot of the database, so that a store written while it is
verified (a fleet's engines recording runs) is judged as it stood when the walk began: a run
appended meanwhile is neither in the walk nor in the head it is compared with.  On SQLite
the transaction the first read opens is such a snapshot (WAL); on PostgreSQL the walk runs at
``REPEATABLE READ`` (at the default ``READ COMMITTED`` every statement saw the newest
commits, and a run appended during the walk was reported as added to the tail).

An attacker who can rewrite every hash *and* the chain head consistently is out of reach of
any self-contained check; signed checkpoints kept elsewhere close that
(:mod:`enginecfg.store.checkpoint`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import attrs
from sqlalchemy import exists, select

from enginecfg.store.engine import one_snapshot
from enginecfg.store.rows import (
    EARLIER_RELEASE,
    MEMORY_COLUMNS_SINCE,
    RELEASE_COLUMNS_SINCE,
    impact_columns,
    memory_columns,
    release_columns,
)
from enginecfg.store.hashing import (
    CHILD_ORDER,
    UnknownLayoutError,
    child_hash,
    current_layout,
    layout,
    loss_hash,
    run_hash,
)
from enginecfg.store.models import GENESIS_HASH, AuditLoss, Base, ChainHead, Run

__all__ = ["Problem", "VerifyResult", "verify"]

_BATCH = 500
_MAX_PROBLEMS = 1000
_COUNT_COLUMN = {"stage_executions": "n_stages", "changes": "n_changes",
                 "messages": "n_messages", "validation_checks": "n_checks"}


@attrs.frozen
class Problem:
    """One record that does not fit the chain.

    ``kind``: ``recorded_loss`` (history an operator dropped after exporting it, see
    :mod:`.downgrade`), ``missing_run``, ``broken_link``, ``missing_rows``, ``extra_rows``,
    ``edited_row``, ``edited_run``, ``unknown_layout``, ``head_mismatch`` or ``orphan_rows``;
    against a checkpoint also ``checkpoint_mismatch`` or ``checkpoint_other_db``.  ``table`` and
    ``key`` name the row (``key`` is the child's seq/stage_order, None for a run row).
    """

    kind: str
    message: str
    table: str
    run_id: str | None = None
    position: int | None = None
    key: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class VerifyResult:
    """The outcome of a walk: ``ok`` is true when the history is intact."""

    ok: bool
    runs_checked: int
    head_position: int
    head_hash: str
    problems: tuple[Problem, ...] = ()
    #: signed checkpoints the chain was checked against (see :mod:`.checkpoint`)
    checkpoints_checked: int = 0
    #: what was checked: the store's identity and creation time (epoch seconds; None
    #: where unknown), and the first and last chain positions walked (None: no run)
    store_id: str | None = None
    created_at: float | None = None
    first_position: int | None = None
    last_position: int | None = None
    #: where the checkpoints came from (files, mirror URLs), and a note on the mirror
    #: (``ENGINECFG_AUDIT_MIRROR``) when one is configured
    checkpoint_sources: tuple[str, ...] = ()
    mirror: str | None = None

    @property
    def first_bad(self) -> Problem | None:
        return self.problems[0] if self.problems else None

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "runs_checked": self.runs_checked,
                "head_position": self.head_position, "head_hash": self.head_hash,
                "checkpoints_checked": self.checkpoints_checked,
                "store_id": self.store_id, "created_at": _iso(self.created_at),
                "first_position": self.first_position, "last_position": self.last_position,
                "checkpoint_sources": list(self.checkpoint_sources), "mirror": self.mirror,
                "first_bad": self.first_bad.to_dict() if self.first_bad else None,
                "problems": [p.to_dict() for p in self.problems]}


def _children(conn, run_ids: list[str]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    out: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for table in layout(current_layout()).child_fields:
        t = Base.metadata.tables[table]
        order = t.c[CHILD_ORDER[table]]
        for row in conn.execute(select(t).where(t.c.run_id.in_(run_ids))
                                .order_by(t.c.run_id, order)).mappings():
            out[row["run_id"]][table].append(dict(row))
    return out


def _check_run(run: dict[str, Any], kids: dict[str, list[dict[str, Any]]],
               problems: list[Problem]) -> None:
    rid, pos = run["id"], run["chain_pos"]
    try:
        lay = layout(run.get("hash_layout"))
    except UnknownLayoutError as exc:
        problems.append(Problem("unknown_layout", f"run {rid} (position {pos}): {exc}", "runs",
                                rid, pos))
        return
    child_trouble = False
    for table in lay.child_fields:
        rows = kids.get(table, [])
        recorded = run[_COUNT_COLUMN[table]] if table in _COUNT_COLUMN else len(rows)
        if len(rows) != recorded:
            child_trouble = True
            kind = "missing_rows" if len(rows) < recorded else "extra_rows"
            problems.append(Problem(kind, f"run {rid} (position {pos}) recorded {recorded} "
                                          f"{table} rows, {len(rows)} found", table, rid, pos))
        for row in rows:
            if child_hash(table, row, lay.number) != row["row_hash"]:
                child_trouble = True
                key = row[CHILD_ORDER[table]]
                problems.append(Problem("edited_row", f"{table} row {CHILD_ORDER[table]}={key} "
                                        f"of run {rid} (position {pos}) does not match its hash",
                                        table, rid, pos, key))
    projected = impact_columns(run["result"])
    # a run recorded before a projected column existed holds the column's default there
    # (NULL, the release 0.19.0): its hash does not cover that column, so the default is
    # what verify holds it to
    memory = memory_columns(run["result"])
    if lay.number < MEMORY_COLUMNS_SINCE:
        memory = dict.fromkeys(memory)
    projected.update(memory)
    if lay.number >= RELEASE_COLUMNS_SINCE:
        projected.update(release_columns(run["result"], projected["gpu"]))
    else:
        projected["vllm_version"] = EARLIER_RELEASE
    off = [k for k, v in projected.items() if not _held_as(run.get(k), v)]
    if off and not child_trouble:
        child_trouble = True
        what = ("its release column (vllm_version) does not match the release of its stored "
                "result" if off == ["vllm_version"] else "its impact columns do not match the "
                f"impact of its stored result ({', '.join(off)})")
        problems.append(Problem("edited_run", f"run {rid} (position {pos}): {what}", "runs",
                                rid, pos))
    hashes = {t: [r["row_hash"] for r in kids.get(t, [])] for t in lay.child_fields}
    if run_hash(run, hashes) != run["row_hash"] and not child_trouble:
        problems.append(Problem("edited_run", f"run {rid} (position {pos}) does not match its "
                                "hash: the run row or one of its child rows was altered",
                                "runs", rid, pos))


def verify(store) -> VerifyResult:
    """Walk the chain of ``store`` (an :class:`~enginecfg.store.AuditStore`)."""
    problems: list[Problem] = []
    runs = Run.__table__
    with one_snapshot(store.engine.connect()) as conn:  # see the module docstring
        head = conn.execute(select(ChainHead.position, ChainHead.head_hash, ChainHead.store_id,
                                   ChainHead.created_at, ChainHead.losses_head)
                            .where(ChainHead.id == 1)).one_or_none()
        problems.extend(recorded_losses(conn, None if head is None else head.losses_head))
        expected_pos, prev_hash, checked = 1, GENESIS_HASH, 0
        last_pos = 0
        first_pos: int | None = None
        after: int | None = None
        while len(problems) < _MAX_PROBLEMS:
            q = select(runs).order_by(runs.c.chain_pos).limit(_BATCH)
            if after is not None:
                q = q.where(runs.c.chain_pos > after)
            batch = [dict(r) for r in conn.execute(q).mappings()]
            if not batch:
                break
            kids = _children(conn, [r["id"] for r in batch])
            for run in batch:
                rid, pos = run["id"], run["chain_pos"]
                if pos != expected_pos:
                    what = (f"positions {expected_pos}..{pos - 1} are missing before run {rid}"
                            if pos > expected_pos else
                            f"run {rid} has position {pos}, expected {expected_pos}")
                    problems.append(Problem("missing_run", what, "runs", rid, pos))
                if run["prev_hash"] != prev_hash:
                    problems.append(Problem(
                        "broken_link", f"run {rid} (position {pos}) is not chained to the run "
                        "before it: a run was deleted, inserted or moved", "runs", rid, pos))
                _check_run(run, kids.get(rid, {}), problems)
                prev_hash, expected_pos, last_pos = run["row_hash"], pos + 1, pos
                if first_pos is None:
                    first_pos = pos
                checked += 1
            after = batch[-1]["chain_pos"]
        if head is None:
            problems.append(Problem("head_mismatch", "the chain_head row is missing",
                                    "chain_head"))
            head_pos, head_hash = 0, GENESIS_HASH
        else:
            head_pos, head_hash = head.position, head.head_hash
            if (head_pos, head_hash) != (last_pos, prev_hash) and len(problems) < _MAX_PROBLEMS:
                problems.append(Problem(
                    "head_mismatch", f"the chain head names position {head_pos} but the chain "
                    f"ends at position {last_pos}: runs were removed from or added to its tail",
                    "chain_head", None, head_pos))
        for table in layout(current_layout()).child_fields:
            t = Base.metadata.tables[table]
            orphans = conn.execute(
                select(t.c.run_id).where(~exists().where(runs.c.id == t.c.run_id))
                .distinct().limit(10)).scalars().all()
            for rid in orphans:
                problems.append(Problem("orphan_rows", f"{table} rows belong to run {rid}, "
                                        "which is not in the chain", table, rid))
    return VerifyResult(ok=not problems, runs_checked=checked, head_position=head_pos,
                        head_hash=head_hash, problems=tuple(problems),
                        store_id=head.store_id if head is not None else None,
                        created_at=head.created_at if head is not None else None,
                        first_position=first_pos, last_position=last_pos if checked else None)


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    import datetime as _dt

    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).isoformat().replace("+00:00", "Z")


def recorded_losses(conn, losses_head: str | None = GENESIS_HASH) -> list[Problem]:
    """One ``recorded_loss`` problem per loss of history recorded in ``audit_losses``, and
    the losses' own chain checked as the runs' is: each row against its hash
    (``edited_row``), its ``prev_hash`` against the loss before (``broken_link``: a loss
    deleted, inserted or moved), the last one against ``chain_head.losses_head``
    (``head_mismatch``: a loss removed from, or added to, the end; *losses_head* None: no
    chain head row, reported by the run walk)."""
    out: list[Problem] = []
    prev = GENESIS_HASH
    for loss in conn.execute(select(AuditLoss.__table__).order_by(AuditLoss.id)):
        at = f"loss id={loss.id} (recorded {_iso(loss.recorded_at)})"
        if loss.prev_hash != prev:
            out.append(Problem("broken_link", f"{at} is not chained to the loss before it: a "
                               "recorded loss was deleted, inserted or moved", "audit_losses",
                               None, loss.head_position, loss.id))
        if loss.row_hash is None or loss_hash(loss._mapping) != loss.row_hash:
            out.append(Problem("edited_row", f"{at} does not match its hash: the record of "
                               "the loss was altered", "audit_losses", None, loss.head_position,
                               loss.id))
        prev = loss.row_hash
        who = loss.os_user or "an unknown user"
        if loss.actor:
            who += f" (actor {loss.actor})"
        out.append(Problem(
            "recorded_loss",
            f"audit history was dropped on purpose: on {_iso(loss.recorded_at)} {who} on "
            f"{loss.host or 'an unknown host'} downgraded store {loss.store_id} from revision "
            f"{loss.from_revision} to {loss.to_revision} while it held {loss.runs} run(s), head "
            f"at position {loss.head_position} ({loss.head_hash[:16]}); lost: {loss.dropped}; "
            f"the history before it is in the export {loss.export_path} (sha256 "
            f"{loss.export_sha256})", "audit_losses", None, loss.head_position, loss.id))
    if losses_head is not None and losses_head != prev:
        out.append(Problem("head_mismatch", "the chain head names another last loss than the "
                           "chain of recorded losses ends with: a recorded loss was removed "
                           "from or added to its end", "chain_head"))
    return out


def _held_as(column: Any, projected: Any) -> bool:
    """Whether an impact column holds its projection.  A NaN figure projects to NULL; a
    PostgreSQL run recorded before that held NaN in the column, which is the same figure."""
    return column == projected or (projected is None and isinstance(column, float) and column != column)
