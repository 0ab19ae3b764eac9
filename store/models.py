"""The audit tables, as SQLAlchemy 2.0 typed ORM models.

The tables are append-only (database triggers created by the migrations refuse UPDATE and
DELETE), so the models carry no relationships with cascades and no mutable defaults: a row
is written once, by :class:`enginecfg.store.recorder.AuditStore`, inside the one
transaction that records its run.

Times are seconds since the epoch (``time.time()``) in double precision, because that value
survives a round trip through both SQLite and PostgreSQL bit for bit, and the tamper-evident
hash is computed over exactly what the database gives back.
"""

from __future__ import annotations

import json
import math
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Double,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
)
from sqlalchemy import text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

__all__ = [
    "Base",
    "Run",
    "StageExecution",
    "Change",
    "Message",
    "ValidationCheck",
    "ChainHead",
    "AuditLoss",
    "AUDIT_TABLES",
    "GENESIS_HASH",
    "JSONValue",
    "TEXT_COLUMNS",
    "storable_text",
]

GENESIS_HASH = "0" * 64

_FLOAT_TAG = "$float"
_ESC_TAG = "$esc"
_NONFINITE = ("nan", "inf", "-inf")


def _encode_nonfinite(value: Any) -> Any:
    """Replace NaN/Infinity (which PostgreSQL's ``json`` refuses) by ``{"$float": "inf"}``.

    A genuine one-key object whose key is a tag is wrapped in ``{"$esc": ...}`` so that
    decoding is unambiguous.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return {_FLOAT_TAG: repr(value)}  # 'nan', 'inf', '-inf'
    if isinstance(value, dict):
        enc = {str(k): _encode_nonfinite(v) for k, v in value.items()}
        if len(enc) == 1 and next(iter(enc)) in (_FLOAT_TAG, _ESC_TAG):
            return {_ESC_TAG: enc}
        return enc
    if isinstance(value, (list, tuple)):
        return [_encode_nonfinite(v) for v in value]
    return value


def _decode_nonfinite(value: Any) -> Any:
    if isinstance(value, dict):
        if len(value) == 1:
            (key, inner), = value.items()
            if key == _FLOAT_TAG and inner in _NONFINITE:
                return float(inner)
            if key == _ESC_TAG and isinstance(inner, dict):
                return {k: _decode_nonfinite(v) for k, v in inner.items()}
        return {k: _decode_nonfinite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode_nonfinite(v) for v in value]
    return value


class JSONValue(TypeDecorator):
    """Any JSON value, including the non-standard NaN and Infinity that model configs hold.

    Stored in the backend's JSON type (``json`` on PostgreSQL, text on SQLite); non-finite
    floats travel as ``{"$float": "inf"}`` and come back as floats.
    """

    impl = JSON
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        return _encode_nonfinite(value)

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        return _decode_nonfinite(value)


#: ``json.dumps(value, default=str, allow_nan=True)`` without building an encoder per call
_dumps_any = json.JSONEncoder(default=str, allow_nan=True).encode
#: what SQLAlchemy's JSON type binds on SQLite: ``json.dumps`` with its defaults
_dumps_column = json.JSONEncoder().encode


def normalise_json(value: Any) -> Any:
    """The value as it will come back from a JSON column (tuples -> lists, keys -> str)."""
    return json.loads(_dumps_any(value))


def encode_json(value: Any) -> tuple[Any, str]:
    """``(normalise_json(value), text)``: ``text`` is the exact text a :class:`JSONValue`
    column stores on SQLite for that value.  One ``dumps`` and one ``loads`` in the common
    case; a text that may hold a non-finite number or a tag key (``$float`` / ``$esc``) is
    encoded again the column's own way, from the normalised value (a false alarm, such as
    "NaN" inside a string, only costs that second encoding)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or (kind is float and math.isfinite(value)):
        return value, _dumps_any(value)  # comes back as it is (most changed values): no loads
    text = _dumps_any(value)
    normalised = json.loads(text)
    if "NaN" in text or "Infinity" in text or _FLOAT_TAG in text or _ESC_TAG in text:
        return normalised, _dumps_column(_encode_nonfinite(normalised))
    return normalised, text


class Base(DeclarativeBase):
    """Declarative base of the audit tables."""


class Run(Base):
    """One pipeline run: its inputs, its result or error, and its link in the hash chain."""

    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    chain_pos: Mapped[int] = mapped_column(Integer, nullable=False, unique=True)
    started_at: Mapped[float] = mapped_column(Double, nullable=False)
    finished_at: Mapped[float] = mapped_column(Double, nullable=False)
    recorded_at: Mapped[float] = mapped_column(Double, nullable=False)
    status: Mapped[str] = mapped_column(String(16), nullable=False)
    enginecfg_version: Mapped[str] = mapped_column(String(64), nullable=False)
    host: Mapped[str] = mapped_column(String(255), nullable=False)
    pid: Mapped[int] = mapped_column(Integer, nullable=False)
    model: Mapped[str] = mapped_column(Text, nullable=False)
    architecture: Mapped[str | None] = mapped_column(String(255))
    engine_args: Mapped[Any] = mapped_column(JSONValue, nullable=False)
    planned_stages: Mapped[Any] = mapped_column(JSONValue, nullable=False)
    input_config: Mapped[Any] = mapped_column(JSONValue, nullable=False)
    input_fingerprint: Mapped[str] = mapped_column(String(128), nullable=False)
    result: Mapped[Any | None] = mapped_column(JSONValue)
    result_fingerprint: Mapped[str | None] = mapped_column(String(128))
    error: Mapped[Any | None] = mapped_column(JSONValue)
    failed_stage: Mapped[str | None] = mapped_column(String(255))
    n_stages: Mapped[int] = mapped_column(Integer, nullable=False)
    n_changes: Mapped[int] = mapped_column(Integer, nullable=False)
    n_messages: Mapped[int] = mapped_column(Integer, nullable=False)
    n_checks: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    #: where the model's files came from and each file's sha256 (NULL: not recorded)
    source: Mapped[Any | None] = mapped_column(JSONValue)
    # the run's KV-cache impact, a projection of ``result["impact"]`` (which the hash covers)
    # kept in columns so that runs can be filtered and ordered by capacity
    kv_tokens: Mapped[int | None] = mapped_column(BigInteger)
    max_concurrency: Mapped[float | None] = mapped_column(Double)
    max_model_len_fits: Mapped[int | None] = mapped_column(BigInteger)
    #: who ran it: the operating-system user of the recording process (revision 0007_actor;
    #: NULL in runs recorded before it), and the actor named explicitly (``--actor``,
    #: ``ENGINECFG_ACTOR``: a service account, a CI job; NULL: none named).  Hashed from
    #: layout 2 on.
    os_user: Mapped[str | None] = mapped_column(String(255))
    actor: Mapped[str | None] = mapped_column(String(255))
    #: what the run's KV-cache figures assumed and whether vLLM would start: a projection of
    #: ``result["impact"]`` (revision 0009_impact_memory; NULL in runs recorded before it, and
    #: where the run has no figures).  Hashed from layout 3 on.
    gpu: Mapped[str | None] = mapped_column(String(64))
    gpu_memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    gpu_memory_utilization: Mapped[float | None] = mapped_column(Double)
    kv_cache_memory: Mapped[int | None] = mapped_column(BigInteger)
    kv_cache_memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    num_gpu_blocks_override: Mapped[int | None] = mapped_column(BigInteger)
    starts: Mapped[bool | None] = mapped_column(Boolean)
    #: the vLLM release whose rules decided the run (the run document's ``vllm_version``;
    #: revision 0010_release, which gives every earlier run ``0.19.0``, the only release
    #: enginecfg had then).  Hashed from layout 4 on.
    vllm_version: Mapped[str] = mapped_column(String(64), nullable=False,
                                              server_default=text("'0.19.0'"))
    #: the hash layout (field lists, :mod:`enginecfg.store.hashing`) the row was hashed with
    hash_layout: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("1"))
    prev_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    row_hash: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)

    __table_args__ = (
        Index("ix_runs_model", "model"),
        Index("ix_runs_architecture", "architecture"),
        Index("ix_runs_status", "status"),
        Index("ix_runs_started_at", "started_at"),
        Index("ix_runs_max_concurrency", "max_concurrency"),
        Index("ix_runs_actor", "actor"),
        Index("ix_runs_os_user", "os_user"),
        Index("ix_runs_gpu", "gpu"),
        Index("ix_runs_starts", "starts"),
        Index("ix_runs_vllm_version", "vllm_version"),
    )


class StageExecution(Base):
    """A stage of a run: where it sits in the order, whether it changed anything, how long."""

    __tablename__ = "stage_executions"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    stage_order: Mapped[int] = mapped_column(Integer, primary_key=True)
    stage: Mapped[str] = mapped_column(String(255), nullable=False)
    origin: Mapped[str] = mapped_column(String(255), nullable=False)
    outcome: Mapped[str] = mapped_column(String(16), nullable=False)
    duration_s: Mapped[float | None] = mapped_column(Double)
    n_changes: Mapped[int] = mapped_column(Integer, nullable=False)
    error: Mapped[str | None] = mapped_column(Text)
    row_hash: Mapped[str] = mapped_column(String(64), nullable=False)


class Change(Base):
    """One field mutation: which stage, from what to what, and the reason behind it."""

    __tablename__ = "changes"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    stage: Mapped[str] = mapped_column(String(255), nullable=False)
    field: Mapped[str] = mapped_column(String(255), nullable=False)
    old: Mapped[Any | None] = mapped_column(JSONValue)
    new: Mapped[Any | None] = mapped_column(JSONValue)
    reason: Mapped[str] = mapped_column(Text, nullable=False)
    level: Mapped[str] = mapped_column(String(16), nullable=False)
    via: Mapped[str] = mapped_column(String(16), nullable=False)
    #: the rule and the numbers behind the new value, in words (revision 0003; not hashed)
    explanation: Mapped[str | None] = mapped_column(Text)
    row_hash: Mapped[str] = mapped_column(String(64), nullable=False)

    __table_args__ = (Index("ix_changes_field", "field", "run_id"),)


class Message(Base):
    """A line a stage logged (warning or info), with or without a change."""

    __tablename__ = "messages"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    stage: Mapped[str] = mapped_column(String(255), nullable=False)
    level: Mapped[str] = mapped_column(String(16), nullable=False)
    message: Mapped[str] = mapped_column(Text, nullable=False)
    row_hash: Mapped[str] = mapped_column(String(64), nullable=False)


class ValidationCheck(Base):
    """A GPU validation check of a run: kernel, shapes, dtype, error against the reference."""

    __tablename__ = "validation_checks"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    check: Mapped[str] = mapped_column(String(255), nullable=False)
    kernel: Mapped[str] = mapped_column(String(255), nullable=False)
    shapes: Mapped[Any] = mapped_column(JSONValue, nullable=False)
    dtype: Mapped[str] = mapped_column(String(64), nullable=False)
    max_error: Mapped[float | None] = mapped_column(Double)
    tolerance: Mapped[float | None] = mapped_column(Double)
    passed: Mapped[bool] = mapped_column(Boolean, nullable=False)
    device: Mapped[str] = mapped_column(String(255), nullable=False)
    seconds: Mapped[float] = mapped_column(Double, nullable=False)
    detail: Mapped[str | None] = mapped_column(Text)
    row_hash: Mapped[str] = mapped_column(String(64), nullable=False)


class ChainHead(Base):
    """The single row naming the newest run of the chain.

    Writers lock it to serialise appends (``SELECT ... FOR UPDATE`` on PostgreSQL; SQLite's
    ``BEGIN IMMEDIATE`` already serialises), and ``verify`` compares it with the last run so
    that a run removed from, or forged onto, the tail of the chain is noticed.
    """

    __tablename__ = "chain_head"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    position: Mapped[int] = mapped_column(Integer, nullable=False)
    head_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    #: the database's identity, drawn once when the schema is created (or upgraded to 0006_hash_layout);
    #: checkpoints name it so that one is never checked against another database
    store_id: Mapped[str | None] = mapped_column(String(32))
    #: when the store was created (revision 0008_store_record; for a store created before
    #: it, the time its first run was recorded, or of the upgrade when it held none)
    created_at: Mapped[float | None] = mapped_column(Double)
    #: the ``row_hash`` of the last recorded loss (``audit_losses``; GENESIS while there is
    #: none): a loss removed from the end of their chain is noticed (revision 0012_hashed_losses)
    losses_head: Mapped[str] = mapped_column(String(64), nullable=False,
                                             server_default=text(f"'{GENESIS_HASH}'"))


class AuditLoss(Base):
    """A loss of audit history an operator chose: a schema downgrade that dropped or
    rewrote audit tables of a store holding runs, after exporting them.

    Its table survives every downgrade (the record of a loss is not lost by the loss
    itself) and is append-only; ``audit verify`` reports every row, and checks each against
    its hash and the chain of losses.
    """

    __tablename__ = "audit_losses"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    recorded_at: Mapped[float] = mapped_column(Double, nullable=False)
    #: the store's identity, chain head and number of runs when it happened
    store_id: Mapped[str | None] = mapped_column(String(32))
    head_position: Mapped[int] = mapped_column(Integer, nullable=False)
    head_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    runs: Mapped[int] = mapped_column(Integer, nullable=False)
    from_revision: Mapped[str] = mapped_column(String(64), nullable=False)
    to_revision: Mapped[str] = mapped_column(String(64), nullable=False)
    #: what the downgrade dropped or rewrote, in words
    dropped: Mapped[str] = mapped_column(Text, nullable=False)
    #: the export the operator named, and its sha256 (it holds the history lost)
    export_path: Mapped[str] = mapped_column(Text, nullable=False)
    export_sha256: Mapped[str] = mapped_column(String(64), nullable=False)
    os_user: Mapped[str | None] = mapped_column(String(255))
    actor: Mapped[str | None] = mapped_column(String(255))
    host: Mapped[str | None] = mapped_column(String(255))
    #: the chain of the losses (revision 0012_hashed_losses; see
    #: :func:`enginecfg.store.hashing.loss_hash`): the hash of the loss before (GENESIS for the
    #: first), and this row's own hash; NULL only in a row recorded below that revision and
    #: not yet hashed by its upgrade
    prev_hash: Mapped[str | None] = mapped_column(String(64))
    row_hash: Mapped[str | None] = mapped_column(String(64))


#: Tables whose rows may never be updated or deleted (the triggers' list).
AUDIT_TABLES = ("runs", "stage_executions", "changes", "messages", "validation_checks")


def storable_text(value: str) -> str:
    """*value* as every backend's text column can hold it, which is as it is but for two
    characters no driver sends: NUL (PostgreSQL's text refuses it; a ``\\u0000`` escape in
    a JSON file gives one), and a lone surrogate (what Python makes of a file name's byte
    that is not UTF-8, a model folder named in Latin-1, say, as ``os`` functions and
    ``sys.argv`` give it, or of a ``\\udXXX`` escape in a JSON file).  Each is written as
    its JSON escape (``\\u0000``, ``\\udcff``), the same on SQLite and PostgreSQL; the
    run's hash covers the text as stored.  The escape is spelled with ordinary characters,
    so a text that holds those very characters (a folder literally named ``caf\\udce9``)
    is stored alike: a filter finds both, and the run's JSON documents, which hold either
    exactly, tell them apart.  (JSON columns need none of this: their text escapes both,
    and a backslash as ``\\\\``.)"""
    if "\x00" in value:
        value = value.replace("\x00", "\\u0000")
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


#: The text columns of each audit table (what :func:`storable_text` applies to).
TEXT_COLUMNS: dict[str, tuple[str, ...]] = {
    model.__tablename__: tuple(c.name for c in model.__table__.columns if isinstance(c.type, String))
    for model in (Run, StageExecution, Change, Message, ValidationCheck)
}
