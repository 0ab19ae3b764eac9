"""Schema downgrades that would lose audit history: refused, unless the history was exported.

Every revision says what its downgrade drops or rewrites (``downgrade_loses`` in its file).
:func:`plan` lists the revisions a downgrade to a target goes through and what each loses;
:func:`downgrade` refuses one that loses anything on a store holding runs, unless the
operator names a complete export of the store as it is now (``enginecfg export --all``,
checked by :func:`check_export`: the same store, the same chain head, every row).  Then the
loss itself is recorded, in the same transaction as the downgrade, in ``audit_losses``, a
table no downgrade drops, each loss hashed and chained to the one before (``audit verify``
reports every loss recorded there, and any that was altered).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import attrs
from sqlalchemy import Connection, Engine, inspect, select, text, update

from enginecfg.pipeline.errors import InvalidInputError
from enginecfg.store import engine as _eng
from enginecfg.store.files import EXPORT_LINE_LIMIT, TooLarge, bounded_lines
from enginecfg.store.hashing import loss_hash
from enginecfg.store.models import GENESIS_HASH, AuditLoss, ChainHead
from enginecfg.store.queries import EXPORT_FORMAT, store_state
from enginecfg.store.rows import Identity

__all__ = ["HistoryLossError", "Step", "DowngradePlan", "plan", "check_export", "downgrade"]



class HistoryLossError(InvalidInputError):
    """A downgrade that would lose audit history, on a store holding runs, without an export
    of them (or with one that does not cover the store as it is).  Exit code 2."""


@attrs.frozen
class Step:
    """One revision a downgrade undoes, and what undoing it loses (None: nothing)."""

    revision: str
    loses: str | None


@attrs.frozen
class DowngradePlan:
    current: str | None
    target: str
    steps: tuple[Step, ...]

    @property
    def loses(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.loses)


def plan(engine: Engine, target: str) -> DowngradePlan:
    """The revisions a downgrade of *engine*'s database to *target* undoes (newest first).
    *target*: a revision id (or a unique prefix), ``base``, or ``-N`` (N steps down)."""
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    script = ScriptDirectory.from_config(_eng.alembic_config())
    current = _eng.current_revision(engine)
    chain = []  # from the current revision down to the first
    rev = script.get_revision(current) if current else None
    while rev is not None:
        chain.append(rev)
        rev = script.get_revision(rev.down_revision) if rev.down_revision else None
    given = target
    target = (target or "").strip() if isinstance(target, str) else target
    ids = [r.revision for r in chain]
    allowed = ", ".join(ids[1:] + ["base"]) if len(ids) > 1 else "base"
    if not isinstance(target, str) or not target:
        raise InvalidInputError.for_value("revision", given, f"a revision below the current one "
                                          f"({current or 'base'}): {allowed}, or -N")
    if target.startswith("-") and target[1:].isdigit():
        n = int(target[1:])
        if not 1 <= n <= len(chain):
            raise InvalidInputError.for_value("revision", target, f"-1 to -{len(chain)}: the "
                                              f"database is {len(chain)} revision(s) above base")
        undone, name = chain[:n], (chain[n].revision if n < len(chain) else "base")
    elif target == "base":
        undone, name = chain, "base"
    else:
        try:
            found = script.get_revision(target)
        except (CommandError, AssertionError):  # Alembic asserts on what it cannot resolve
            found = None
        if found is None or found.revision not in ids:
            raise InvalidInputError.for_value("revision", target, f"a revision below the "
                                              f"current one ({current or 'base'}): {allowed}, "
                                              "or -N")
        undone, name = chain[:ids.index(found.revision)], found.revision
    steps = tuple(Step(r.revision, getattr(r.module, "downgrade_loses", "this revision's "
                                           "columns and tables")) for r in undone)
    return DowngradePlan(current, name, steps)


def check_export(path: str, state: dict[str, Any]) -> str:
    """The sha256 of the export at *path* once it is shown to hold the store whose *state*
    is given (:func:`store_state`): its header names the same store and chain head, it is
    complete (its closing line is there), and it holds as many rows of each table as the
    store.  Otherwise :class:`HistoryLossError` says what does not match."""
    def refuse(why: str) -> HistoryLossError:
        return HistoryLossError(f"invalid --i-have-exported {path!r}: {why}; allowed: the file "
                                "`enginecfg export --all -o FILE` wrote from this store as it "
                                "is now", field="i_have_exported")

    digest = hashlib.sha256()
    counts: dict[str, int] = {}
    header = trailer = None
    try:
        with open(path, "rb") as fh:
            for n, line in enumerate(bounded_lines(fh, EXPORT_LINE_LIMIT), start=1):
                digest.update(line)
                if trailer is not None:
                    raise refuse(f"line {n} follows the closing line")
                try:
                    item = json.loads(line)
                except ValueError:
                    raise refuse(f"line {n} is not JSON") from None
                if not isinstance(item, dict):
                    raise refuse(f"line {n} is not a JSON object")
                if header is None:
                    if item.get("format") != EXPORT_FORMAT:
                        raise refuse(f"it is not an export of every table (format "
                                     f"{EXPORT_FORMAT!r}: `export --all`)")
                    header = item
                elif "table" in item:
                    counts[item["table"]] = counts.get(item["table"], 0) + 1
                elif item.get("end") is True:
                    trailer = item
    except OSError as exc:
        raise refuse(f"cannot read it ({exc.strerror or exc})") from None
    except TooLarge as exc:
        raise refuse(f"{exc} (no row of an export is)") from None
    if header is None:
        raise refuse("it is empty")
    if trailer is None:
        raise refuse("it is incomplete (no closing line): the export was cut short")
    if header.get("store_id") != state["store_id"]:
        raise refuse(f"it is an export of store {header.get('store_id')}, this store is "
                     f"{state['store_id']}")
    if (header.get("head_position"), header.get("head_hash")) != (state["head_position"],
                                                                   state["head_hash"]):
        raise refuse(f"it ends at position {header.get('head_position')}, the store's head is at "
                     f"position {state['head_position']} ({state['head_hash'][:16]}): runs were "
                     "recorded since (export again)")
    for table, n in state["rows"].items():
        if counts.get(table, 0) != n:
            raise refuse(f"it holds {counts.get(table, 0)} {table} row(s), the store {n}")
    said = trailer.get("rows")
    if not isinstance(said, dict) or {t: n for t, n in said.items() if n} != counts:
        raise refuse("its closing line does not count the rows it holds")
    return digest.hexdigest()


def _record_loss(conn: Connection, loss: dict[str, Any]) -> None:
    """Append *loss* to ``audit_losses``: chained and hashed where the schema holds the chain
    (revision 0012_hashed_losses; a table made here, below 0008_store_record, holds it too),
    its hash then named by ``chain_head.losses_head`` where that column is there."""
    table = AuditLoss.__table__
    table.create(conn, checkfirst=True)  # below 0008_store_record
    inspector = inspect(conn)
    hashed = "row_hash" in {c["name"] for c in inspector.get_columns("audit_losses")}
    columns = [table.c.id, table.c.row_hash] if hashed else [table.c.id]
    last = conn.execute(select(*columns).order_by(table.c.id.desc()).limit(1)).one_or_none()
    loss["id"] = last.id + 1 if last else 1  # hashed: known before the row is written
    if hashed:
        loss["prev_hash"] = (last.row_hash if last else None) or GENESIS_HASH
        loss["row_hash"] = loss_hash(loss)
    conn.execute(table.insert().values(**loss))
    if conn.dialect.name == "postgresql":  # the id was given: its sequence follows
        conn.execute(text("SELECT setval(pg_get_serial_sequence('audit_losses', 'id'), :n)"),
                     {"n": loss["id"]})
    if "row_hash" in loss and "losses_head" in {c["name"] for c in inspector.get_columns("chain_head")}:
        conn.execute(update(ChainHead.__table__).where(ChainHead.id == 1)
                     .values(losses_head=loss["row_hash"]))


def downgrade(engine: Engine, target: str, *, exported: str | None = None,
              who: Identity | None = None) -> DowngradePlan:
    """Downgrade the schema to *target*, refusing a loss of history (see the module doc).

    With *exported* (the path of a complete export), a downgrade that loses something on
    a store holding runs goes ahead and is recorded in ``audit_losses``, by *who*."""
    the_plan = plan(engine, target)
    if not the_plan.steps:
        return the_plan

    def before(conn: Connection) -> None:
        state = store_state(conn)
        runs = state["rows"].get("runs", 0)
        if not runs or not the_plan.loses:
            return
        what = "; ".join(f"{s.revision}: {s.loses}" for s in the_plan.loses)
        if exported is None:
            raise HistoryLossError(
                f"refused: downgrading to {the_plan.target} (from {the_plan.current}) would "
                f"lose audit history of the {runs} run(s) this store holds (head at position "
                f"{state['head_position']}): {what}. Export them first (`enginecfg export "
                "--all -o FILE`) and pass --i-have-exported FILE; the loss is then recorded in "
                "the store and `audit verify` reports it", field="i_have_exported")
        sha = check_export(exported, state)
        _record_loss(conn, dict(
            recorded_at=time.time(), store_id=state["store_id"],
            head_position=state["head_position"], head_hash=state["head_hash"], runs=runs,
            from_revision=the_plan.current, to_revision=the_plan.target, dropped=what,
            export_path=str(Path(exported).resolve()), export_sha256=sha,
            os_user=who.os_user if who else None, actor=who.actor if who else None,
            host=who.host if who else None))

    _eng.downgrade(engine, the_plan.target, before=before)
    return the_plan
