"""Dialect SQL: the statements that append one run to the chain, for SQLite and PostgreSQL.

The write is the hot path of a fleet (every engine start records a run), so it goes to the
driver directly, with the values encoded by the very SQLAlchemy column types the reading
side decodes with and no SQL compiled per run:

* SQLite (:class:`SQLiteStatements`): one prepared ``INSERT`` per table, its rows sent with
  ``executemany``, inside ``BEGIN IMMEDIATE``; the head is read and moved in the same
  transaction.
* PostgreSQL (:class:`PostgreSQLStatements`): one statement appends the run: it takes the
  head, hashes the run on the server from bytes the writer prepared, inserts every row and
  moves the head, so the head's lock is held while that statement runs and never across a
  round trip; several writers then add throughput instead of queueing on the network.

Each class's :meth:`~Statements.append` runs one transaction on a driver connection and
returns the run's chain position; :meth:`~Statements.commit` ends an explicit transaction.
Connections, locks and retries are :mod:`enginecfg.store.connection`'s.
"""

from __future__ import annotations

import time
from typing import Any

from enginecfg.store.hashing import PreparedRunHash
from enginecfg.store.models import ChainHead, Change, Message, Run, StageExecution, ValidationCheck
from enginecfg.store.rows import CHILD_ORDER, TEXTS

__all__ = ["Statements", "SQLiteStatements", "PostgreSQLStatements", "statements_for"]

_TABLES = {
    "runs": Run.__table__,
    "stage_executions": StageExecution.__table__,
    "changes": Change.__table__,
    "messages": Message.__table__,
    "validation_checks": ValidationCheck.__table__,
}
_PG_IDLE = 0  # psycopg.pq.TransactionStatus.IDLE, without importing the driver here
#: the run columns a PostgreSQL append computes in the statement (see PostgreSQLStatements)
_HEAD_COLUMNS = {"chain_pos": "k.pos", "prev_hash": "k.prev", "row_hash": "k.hash"}


class Statements:
    """The write statements of one dialect, built once: SQL text with the driver's
    placeholders, and per column the bind processor SQLAlchemy itself would apply (so a
    value is stored exactly as an ORM insert would store it: JSON text, NaN markers, ...)."""

    sqlite = False

    def __init__(self, dialect: Any):
        self.dialect = dialect
        q = dialect.identifier_preparer.quote
        self.mark = "?" if dialect.paramstyle == "qmark" else "%s"
        self.inserts: dict[str, tuple[str, list[tuple[str, Any]]]] = {}
        for name in ("runs",) + CHILD_ORDER:
            table = _TABLES[name]
            cols = list(table.columns)
            sql = (f"INSERT INTO {q(table.name)} ({', '.join(q(c.name) for c in cols)}) "
                   f"VALUES ({', '.join([self.mark] * len(cols))})")
            procs = [(c.name, c.type.dialect_impl(dialect).bind_processor(dialect)) for c in cols]
            self.inserts[name] = (sql, procs)
        #: the chain fields' places in the run INSERT, with their (cheap, scalar) encoders
        self.chain_slots = [(name, i, proc) for i, (name, proc) in enumerate(self.inserts["runs"][1])
                            if name in ("chain_pos", "prev_hash", "recorded_at", "row_hash")]
        self.head = q(ChainHead.__table__.name)
        self._null_values: dict[str, dict[str, Any]] = {}

    def params(self, table: str, rows: list[dict[str, Any]]) -> list[tuple]:
        """Each row's INSERT values, in column order, encoded."""
        _, procs = self.inserts[table]
        nulls = self._nulls(table)
        out = []
        for row in rows:
            get = row.get
            # PostgreSQL's driver binds JSON through its own adapter: the values go that way
            texts = get(TEXTS) if self.sqlite else None
            if texts:
                out.append(tuple(texts[name] if name in texts
                                 else nulls[name] if (v := get(name)) is None
                                 else v if proc is None else proc(v) for name, proc in procs))
            else:
                out.append(tuple(nulls[name] if (v := get(name)) is None
                                 else v if proc is None else proc(v) for name, proc in procs))
        return out

    def _nulls(self, table: str) -> dict[str, Any]:
        """What each column's processor makes of None (the common value of optional
        columns), computed once."""
        found = self._null_values.get(table)
        if found is None:
            found = self._null_values[table] = {
                name: None if proc is None else proc(None) for name, proc in self.inserts[table][1]}
        return found

    def append(self, raw: Any, cur: Any, run_row: dict[str, Any], run_params: list,
               prepared: PreparedRunHash, child_params: dict[str, list[tuple]]) -> int:
        """Append the run in one transaction on the driver connection *raw*; its position."""
        raise NotImplementedError

    def commit(self, cur: Any) -> None:
        """End the explicit write transaction."""
        cur.execute("COMMIT")

    def rollback(self, raw: Any, cur: Any) -> None:
        """Undo a write transaction that failed half-way (best effort)."""
        raise NotImplementedError


class SQLiteStatements(Statements):
    """SQLite: the head read and moved inside ``BEGIN IMMEDIATE``, then ``COMMIT``."""

    sqlite = True

    def __init__(self, dialect: Any):
        super().__init__(dialect)
        self.select_head = f"SELECT position, head_hash FROM {self.head} WHERE id = 1"
        self.update_head = (f"UPDATE {self.head} SET position = {self.mark}, "
                            f"head_hash = {self.mark} WHERE id = 1")

    def _chained(self, run_row: dict[str, Any], run_params: list, prepared: PreparedRunHash,
                 position: int, head_hash: str) -> dict[str, Any]:
        """The run's row once the head is known: chain fields, hash, and their INSERT values."""
        row = dict(run_row, chain_pos=position + 1, prev_hash=head_hash, recorded_at=time.time())
        row["row_hash"] = prepared.finish(chain_pos=row["chain_pos"], prev_hash=head_hash,
                                          recorded_at=row["recorded_at"])
        for name, i, proc in self.chain_slots:
            run_params[i] = row[name] if proc is None else proc(row[name])
        return row

    def append(self, raw, cur, run_row, run_params, prepared, child_params) -> int:
        cur.execute("BEGIN IMMEDIATE")
        cur.execute(self.select_head)
        row = self._chained(run_row, run_params, prepared, *cur.fetchone())
        cur.execute(self.inserts["runs"][0], tuple(run_params))
        for table, params in child_params.items():
            cur.executemany(self.inserts[table][0], params)
        cur.execute(self.update_head, (row["chain_pos"], row["row_hash"]))
        self.commit(cur)
        return row["chain_pos"]

    def rollback(self, raw, cur) -> None:
        if raw.in_transaction:
            cur.execute("ROLLBACK")


class PostgreSQLStatements(Statements):
    """PostgreSQL: the run appended to the chain in one statement (:meth:`statement`)."""

    #: parameters one statement may carry (the protocol's limit is 65,535); a run with more
    #: sends the rest after it, in one explicit transaction
    max_params = 30_000

    def __init__(self, dialect: Any):
        super().__init__(dialect)
        #: the run's values bound to the statement (the head-dependent ones are its own)
        self.run_value_slots = [i for i, (name, _) in enumerate(self.inserts["runs"][1])
                                if name not in _HEAD_COLUMNS]
        self.recorded_at_slot = next(i for i, (name, _) in enumerate(self.inserts["runs"][1])
                                     if name == "recorded_at")
        self._appends: dict[tuple[int, ...], str] = {}

    def statement(self, child_params: dict[str, list[tuple]]) -> str:
        """The append statement for a run with these child rows, its own transaction.

        It takes the head ``FOR UPDATE``, makes this transaction's commit asynchronous,
        hashes the run from the bytes around the head's values
        (:meth:`PreparedRunHash.around_head`), inserts the run and each child table's rows
        (one multi-row INSERT each) and moves the head, and returns the new position.  The
        head's row lock lasts only as long as the statement runs on the server, never
        across a round trip, so writers queue for microseconds, not for network turns.
        Parameters: the three hashed byte strings, the run's values
        (:attr:`run_value_slots`), then each table's rows in :data:`CHILD_ORDER`.
        (``sha256`` in SQL: PostgreSQL 11 or newer.)"""
        shape = tuple(len(child_params.get(t, ())) for t in CHILD_ORDER)
        sql = self._appends.get(shape)
        if sql is None:
            if len(self._appends) >= 256:  # run shapes are few; a long tail is not kept
                self._appends.clear()
            head_sql, _ = self.inserts["runs"][0].split(" VALUES ")
            select = ", ".join(_HEAD_COLUMNS.get(name, "%s") for name, _ in self.inserts["runs"][1])
            parts = [
                f"h AS (SELECT position + 1 AS pos, head_hash AS prev, "
                f"set_config('synchronous_commit', 'off', true) AS async FROM {self.head} "
                f"WHERE id = 1 FOR UPDATE)",
                "k AS (SELECT pos, prev, encode(sha256(%s::bytea || convert_to(pos::text, 'UTF8') "
                "|| %s::bytea || convert_to(prev, 'UTF8') || %s::bytea), 'hex') AS hash "
                "FROM h WHERE async IS NOT NULL)",
                f"r AS ({head_sql} SELECT {select} FROM k)",
            ]
            for i, (table, n) in enumerate(zip(CHILD_ORDER, shape)):
                if n:
                    insert, one = self.inserts[table][0].split(" VALUES ")
                    parts.append(f"c{i} AS ({insert} VALUES {', '.join([one] * n)})")
            parts.append(f"u AS (UPDATE {self.head} SET position = k.pos, head_hash = k.hash FROM k "
                         f"WHERE {self.head}.id = 1)")
            sql = self._appends[shape] = f"WITH {', '.join(parts)} SELECT pos FROM k"
        return sql

    def append(self, raw, cur, run_row, run_params, prepared, child_params) -> int:
        """Two round trips: the append, one statement that is its own transaction, committed
        without waiting for the WAL flush; then a transaction with an id, committed
        synchronously: it returns once the WAL is flushed past it, hence past this run, and
        the head is not locked meanwhile (writers share those flushes).  A run whose rows
        exceed one statement's parameters makes the append part of an explicit
        transaction: the remaining rows, then :meth:`commit`."""
        recorded_at = time.time()
        slot = self.recorded_at_slot
        proc = self.inserts["runs"][1][slot][1]
        run_params[slot] = recorded_at if proc is None else proc(recorded_at)
        values = list(prepared.around_head(recorded_at=recorded_at))
        values += [run_params[i] for i in self.run_value_slots]
        # the rows go in the statement up to the protocol's limit on parameters; a run with
        # more (thousands of changes) sends the rest after it, in the same transaction
        budget = self.max_params - len(values)
        inline: dict[str, list[tuple]] = {}
        later: list[tuple[str, list[tuple]]] = []
        for table in CHILD_ORDER:
            rows = child_params.get(table)
            if not rows:
                continue
            n = min(len(rows), max(0, budget // len(rows[0])))
            if n:
                inline[table] = rows[:n]
                budget -= n * len(rows[0])
                for params in rows[:n]:
                    values.extend(params)
            if n < len(rows):
                later.append((table, rows[n:]))
        raw.autocommit = True  # the statement is its own transaction: no BEGIN, no COMMIT trip
        try:
            if later:
                cur.execute("BEGIN")
            cur.execute(self.statement(inline), values)
            (position,) = cur.fetchone()
            if later:
                for table, rows in later:
                    cur.executemany(self.inserts[table][0], rows)
                self.commit(cur)
            cur.execute("SELECT txid_current()")  # its own transaction, committed synchronously
        except BaseException:
            if raw.info.transaction_status != _PG_IDLE:
                cur.execute("ROLLBACK")
            raise
        finally:
            if raw.info.transaction_status == _PG_IDLE:
                raw.autocommit = False  # as the pool handed it out
        return position

    def rollback(self, raw, cur) -> None:
        raw.rollback()


def statements_for(dialect: Any) -> Statements:
    """The write statements of *dialect* (``sqlite`` or ``postgresql``)."""
    if dialect.name == "sqlite":
        return SQLiteStatements(dialect)
    if dialect.name == "postgresql":
        return PostgreSQLStatements(dialect)
    raise NotImplementedError(f"the audit store writes to SQLite and PostgreSQL, not {dialect.name}")
