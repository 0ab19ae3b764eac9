"""Opening an audit database: URL defaults, SQLite pragmas, write locking, migrations.

SQLite is the embedded default, shared by every engine process on a host, so its
connections run in WAL mode (readers never block the writer), with a busy timeout (a writer
waits for the lock instead of failing) and foreign keys on.  The driver's own
implicit transactions are switched off and this module emits ``BEGIN`` itself: a write
transaction starts with ``BEGIN IMMEDIATE``, which takes SQLite's write lock up front, so
concurrent writers queue on the busy timeout rather than deadlocking on a lock upgrade
half-way through.  Before that ``BEGIN``, enginecfg's own writers of one file queue on a
cross-process file lock (:func:`write_lock`, ``flock`` on ``<database>.lock``), polled at
a millisecond's grain, so the next waiter goes as soon as the holder releases it, whereas
SQLite's busy handler sleeps up to a tenth of a second between tries, which under contention
wastes most of the time asleep.  The busy
timeout stays as the fallback for writers that do not take the file lock.  PostgreSQL
needs none of this; its writers serialise on the ``chain_head`` row (``SELECT ... FOR
UPDATE``).

No wait is without end: a writer that stopped while holding a lock (a process suspended
with Ctrl-Z, hung on a dead disk) would otherwise hold up every other one for good.  Each
lock is waited for at most :func:`lock_timeout` seconds (``ENGINECFG_DB_LOCK_TIMEOUT``,
default 30): the file lock, SQLite's busy timeout, PostgreSQL's ``lock_timeout``; then
:class:`StoreBusyError` says which store is held and for how long it was waited for.

Alembic is imported only to migrate: an audited run on an up-to-date database reads the
revision it is at (one query) and the newest revision (from the revision files' headers)
without it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import re
from typing import TYPE_CHECKING, Any

import platformdirs
from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.engine import URL, make_url

from enginecfg.pipeline.errors import EngineCfgError, InvalidInputError
from enginecfg.store.walcheckpoint import BACKSTOP_PAGES, WalCheckpointer

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = [
    "BUSY_TIMEOUT_S",
    "LOCK_TIMEOUT_ENV",
    "StoreBusyError",
    "lock_timeout",
    "ENV_VAR",
    "default_url",
    "normalise_url",
    "display_url",
    "make_engine",
    "check_url",
    "check_readable",
    "known_revisions",
    "StoreNotReadyError",
    "SUPPORTED_URLS",
    "write_connection",
    "one_snapshot",
    "write_lock",
    "WriteLock",
    "wal_checkpointer",
    "alembic_config",
    "current_revision",
    "head_revision",
    "upgrade",
    "downgrade",
]

ENV_VAR = "ENGINECFG_DB"
#: the default of :func:`lock_timeout`
BUSY_TIMEOUT_S = 30.0
LOCK_TIMEOUT_ENV = "ENGINECFG_DB_LOCK_TIMEOUT"
_WRITE_OPTION = "enginecfg_write"
# pg_advisory_xact_lock key taken while migrating, so concurrent first uses migrate once
_MIGRATE_LOCK_KEY = 0x656E67636667  # "engcfg"


class StoreBusyError(EngineCfgError):
    """Another writer held the audit store's lock for longer than :func:`lock_timeout` (a
    stopped or hung process, most often); nothing was written.  Exit code 2."""

    exit_code = 2


def lock_timeout() -> float:
    """How long a writer waits for the store's lock, in seconds: ``ENGINECFG_DB_LOCK_TIMEOUT``
    (a number > 0), else :data:`BUSY_TIMEOUT_S`."""
    raw = os.environ.get(LOCK_TIMEOUT_ENV, "").strip()
    if not raw:
        return BUSY_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value < 10 ** 6:  # NaN, inf and nonpositive numbers fall here
        raise InvalidInputError.for_value(LOCK_TIMEOUT_ENV, raw, "a number of seconds above 0 "
                                          "and below 1000000 (default 30)")
    return value


def busy(url: Any, waited: float, holder: str = "another writer") -> StoreBusyError:
    """The error of a lock wait given up after *waited* seconds."""
    return StoreBusyError(
        f"the audit store {display_url(url)} is locked: {holder} has held its write lock for "
        f"more than {waited:g} s (a stopped or hung enginecfg process, or a transaction left "
        f"open); nothing was written. Resume or end that process and try again "
        f"({LOCK_TIMEOUT_ENV} sets how long to wait)", field="db")


def default_url() -> str:
    """``ENGINECFG_DB`` if set, else a SQLite file in the user's data directory."""
    env = os.environ.get(ENV_VAR)
    if env:
        return env
    path = Path(platformdirs.user_data_dir("enginecfg")) / "audit.db"
    return f"sqlite:///{path}"


def normalise_url(url: str | URL) -> URL:
    """Parse ``url``; a bare ``postgresql://`` means psycopg 3 (the driver enginecfg ships)."""
    u = make_url(url)
    if u.drivername in ("postgresql", "postgres"):
        u = u.set(drivername="postgresql+psycopg")
    return u


#: the databases the audit store is kept in, as their URLs are written
SUPPORTED_URLS = ("sqlite:///PATH (a file, the default), or postgresql://USER:PASSWORD@HOST[:PORT]"
                  "/DATABASE (PostgreSQL through psycopg 3, which enginecfg installs)")
_BACKENDS = ("sqlite", "postgresql")


def check_url(url: str | URL) -> URL:
    """``url`` parsed (:func:`normalise_url`), refused with :class:`InvalidInputError` unless
    it names a database the store is kept in: SQLite or PostgreSQL (the writer speaks their
    SQL only, :mod:`enginecfg.store.dialects`)."""
    from sqlalchemy.exc import ArgumentError

    try:
        u = normalise_url(url)
    except (ArgumentError, ValueError, TypeError) as exc:
        raise InvalidInputError(f"invalid database URL {display_url(url)}: "
                                f"{' '.join(str(exc).split())}; allowed: {SUPPORTED_URLS}",
                                field="db") from None
    backend = u.get_backend_name()
    if backend not in _BACKENDS:
        raise InvalidInputError(f"invalid database URL {display_url(u)}: the audit store is kept "
                                f"in SQLite or PostgreSQL, not {backend}; allowed: {SUPPORTED_URLS}",
                                field="db")
    return u


def display_url(url: str | URL) -> str:
    """The URL with its password hidden, for messages (an unparsable one is quoted as given,
    with anything between ``:`` and ``@`` masked, so that reporting it never fails)."""
    try:
        return normalise_url(url).render_as_string(hide_password=True)
    except Exception:
        import re

        return repr(re.sub(r":[^:@/]*@", ":***@", str(url)))


def _sqlite_on_connect(dbapi_conn, _record) -> None:
    dbapi_conn.isolation_level = None  # BEGIN is emitted by _sqlite_on_begin
    cur = dbapi_conn.cursor()
    try:
        cur.execute(f"PRAGMA busy_timeout = {int(lock_timeout() * 1000)}")
        cur.execute("PRAGMA foreign_keys = ON")
        try:
            cur.execute("PRAGMA journal_mode = WAL")
            # WAL + NORMAL is safe against a killed process (only a power loss may drop
            # the newest commits) and saves an fsync per recorded run
            cur.execute("PRAGMA synchronous = NORMAL")
            # checkpoints are run beside the writers (walcheckpoint); SQLite's own stays
            # as a backstop
            cur.execute(f"PRAGMA wal_autocheckpoint = {BACKSTOP_PAGES}")
        except Exception:  # a read-only file can still be read
            pass
    finally:
        cur.close()


def _sqlite_on_begin(conn: Connection) -> None:
    mode = "IMMEDIATE" if conn.get_execution_options().get(_WRITE_OPTION) else "DEFERRED"
    conn.exec_driver_sql(f"BEGIN {mode}")


def _sqlite_read_only(dbapi_conn, _record) -> None:
    """A reader's connection: it waits as a writer would, and writes nothing, not even the
    file's journal mode (an empty file stays empty)."""
    dbapi_conn.isolation_level = None  # BEGIN is emitted by _sqlite_on_begin
    cur = dbapi_conn.cursor()
    try:
        cur.execute(f"PRAGMA busy_timeout = {int(lock_timeout() * 1000)}")
        cur.execute("PRAGMA query_only = ON")  # every write statement is refused
    finally:
        cur.close()


def make_engine(url: str | URL, *, read_only: bool = False, **kwargs) -> Engine:
    """An engine for ``url`` with the audit store's connection settings.  ``read_only``:
    every connection refuses to write (SQLite ``query_only``; PostgreSQL read-only
    transactions), and a SQLite file that does not exist is not created."""
    u = check_url(url)
    if u.get_backend_name() == "sqlite":
        if u.database and u.database != ":memory:" and not u.database.startswith("file:"):
            path = Path(u.database).expanduser()
            if read_only and not path.exists():
                raise StoreNotReadyError(
                    f"the audit store {display_url(u)} does not exist: nothing was ever recorded "
                    f"in {path} (a mistyped --db, or no run recorded there yet); allowed: the URL "
                    "of an existing audit store",
                    field="db")
            if not read_only:
                path.parent.mkdir(parents=True, exist_ok=True)
        engine = _create(u, connect_args={"timeout": lock_timeout()}, **kwargs)
        event.listen(engine, "connect", _sqlite_read_only if read_only else _sqlite_on_connect)
        event.listen(engine, "begin", _sqlite_on_begin)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    # the URL's own options (a search_path, say) are kept: connect_args would replace them
    args = dict(kwargs.get("connect_args") or {})
    given = args.get("options") or u.query.get("options") or ""
    if isinstance(given, tuple):
        given = " ".join(given)
    given += f" -c lock_timeout={int(lock_timeout() * 1000)}"
    if read_only:
        given += " -c default_transaction_read_only=on"
    args["options"] = given.strip()
    kwargs["connect_args"] = args
    return _create(u, **kwargs)


def _create(u: URL, **kwargs) -> Engine:
    """``create_engine``; a driver that is not installed is named, with the URLs that work."""
    try:
        return create_engine(u, **kwargs)
    except ModuleNotFoundError as exc:
        raise InvalidInputError(f"invalid database URL {display_url(u)}: its driver "
                                f"{u.get_driver_name()} is not installed (no module named "
                                f"{exc.name!r}); allowed: {SUPPORTED_URLS}", field="db") from None


class StoreNotReadyError(InvalidInputError):
    """A command that only reads was pointed at a database that holds no audit store at the
    schema revision this enginecfg reads: none at all (a mistyped URL, an empty file), or one
    to be upgraded first (reads never migrate), or one a newer enginecfg wrote."""


def known_revisions() -> set[str]:
    """Every revision id of the migrations shipped."""
    from enginecfg.migrations import versions

    found = set()
    for file in Path(versions.__file__).resolve().parent.glob("*.py"):
        rev = _REVISION.search(file.read_text(encoding="utf-8"))
        if rev:
            found.add(rev[1])
    return found


def check_readable(engine: Engine, url: str | URL) -> None:
    """Refuse, with :class:`StoreNotReadyError`, a database a read cannot use as it is: one
    holding no audit store (the message says what it holds), or a store at another schema
    revision than this enginecfg's newest (below it: ``enginecfg db upgrade`` first; reads
    never migrate)."""
    from sqlalchemy.exc import DBAPIError

    shown = display_url(url)
    try:
        current = current_revision(engine)
    except DBAPIError as exc:
        raise StoreNotReadyError(f"the database {shown} holds no audit store: it cannot be read "
                                 f"as one ({' '.join(str(exc.orig).split())}); allowed: the URL of "
                                 "an audit store", field="db") from None
    head = head_revision()
    if current == head:
        return
    if current is None and _has_table(engine, "audit_losses"):
        raise StoreNotReadyError(
            f"the audit store {shown} was downgraded to base: only its record of that loss "
            "(audit_losses) is left; run `enginecfg db upgrade --db URL` to read it (a command "
            "that only reads never migrates the store)", field="db")
    if current is None:
        raise StoreNotReadyError(f"the database {shown} holds no audit store: {_found(engine)}; "
                                 "nothing was ever recorded there (a command that only reads "
                                 "creates no store); allowed: the URL of an audit store",
                                 field="db")
    if current in known_revisions():
        raise StoreNotReadyError(
            f"the audit store {shown} is at schema revision {current}, and this enginecfg reads "
            f"revision {head}: run `enginecfg db upgrade --db URL` first (a command that only "
            "reads never migrates the store)", field="db")
    raise StoreNotReadyError(f"the audit store {shown} is at schema revision {current}, which this "
                             f"enginecfg does not know (its newest is {head}): it was written by "
                             "a newer enginecfg; read it with that version", field="db")


def _has_table(engine: Engine, name: str) -> bool:
    with engine.connect() as conn:
        return inspect(conn).has_table(name)


def _found(engine: Engine) -> str:
    """What a database without the audit store holds, in words."""
    path = _sqlite_file(engine)
    if path is not None:
        try:
            size = os.path.getsize(path)
        except OSError:
            size = None
        if size == 0:
            return f"the file {path} is empty (0 bytes)"
    with engine.connect() as conn:
        tables = sorted(inspect(conn).get_table_names())
    where = f"the file {path}" if path is not None else "its schema"
    if not tables:
        return f"{where} holds no table"
    shown = ", ".join(tables[:8]) + (f" and {len(tables) - 8} more" if len(tables) > 8 else "")
    return f"{where} holds other tables ({shown}), none of the audit store's"


@contextmanager
def write_connection(engine: Engine) -> Iterator[Connection]:
    """A connection inside a write transaction (SQLite: ``BEGIN IMMEDIATE``), committed on exit."""
    with engine.connect() as conn:
        conn.execution_options(**{_WRITE_OPTION: True})
        with conn.begin():
            yield conn


def one_snapshot(conn: Connection) -> Connection:
    """Make every read of *conn*'s next transaction see one snapshot of the database (for a
    walk of many statements while writers append).  SQLite's read transaction, begun by the
    first read, is one already (WAL); PostgreSQL's default ``READ COMMITTED`` lets each
    statement see the newest commits, so the connection reads at ``REPEATABLE READ``."""
    if conn.dialect.name == "postgresql":
        conn.execution_options(isolation_level="REPEATABLE READ")
    return conn


class WriteLock:
    """A lock held around one write transaction: a thread lock (writers of this process)
    and, for a SQLite file, ``flock`` on ``<database>.lock`` (writers of other processes).

    The lock file is opened once per process (a forked child opens its own: a shared open
    file would share the lock).  Where it cannot be created (a read-only folder) only the
    thread lock is taken and SQLite's busy timeout does the rest.
    """

    def __init__(self, path: str | None, url: Any = None):
        self.path = path
        self._url = url if url is not None else f"sqlite:///{path}"
        self._thread = threading.Lock()
        self._fd: int | None = None
        self._pid = 0

    @property
    def threads(self) -> threading.Lock:
        """The lock of this process's threads alone (closing needs no other process's turn)."""
        return self._thread

    def _file(self) -> int | None:
        if self.path is None:
            return None
        if self._fd is None or self._pid != os.getpid():
            self._fd, self._pid = None, os.getpid()
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            except OSError:
                self.path = None  # cannot create it: no file lock, the busy timeout instead
        return self._fd

    def __enter__(self) -> "WriteLock":
        timeout = lock_timeout()
        start = time.monotonic()
        if not self._thread.acquire(timeout=timeout):
            raise busy(self._url, timeout, "another thread of this process")
        try:
            fd = self._file()
            if fd is not None:
                self._flock(fd, start + timeout, timeout)
        except BaseException:
            self._thread.release()
            raise
        return self

    def _flock(self, fd: int, deadline: float, timeout: float) -> None:
        """Take the file lock, waiting until *deadline* at most (:class:`StoreBusyError`).
        The wait polls: a short sleep first, so that a lock released a moment later is taken
        within a millisecond or two, growing to a few milliseconds while it stays held."""
        import fcntl

        pause = 0.0005
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            left = deadline - time.monotonic()
            if left <= 0:
                raise busy(self._url, timeout)
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.005)

    def __exit__(self, *exc: object) -> None:
        try:
            if self._fd is not None and self._pid == os.getpid():
                import fcntl

                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._thread.release()

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None


def _sqlite_file(engine: Engine) -> str | None:
    """The path of *engine*'s SQLite database file (None: another backend, memory, a URI)."""
    u = engine.url
    if u.get_backend_name() == "sqlite" and u.database and u.database != ":memory:" \
            and not u.database.startswith("file:"):
        return str(Path(u.database).expanduser())
    return None


def write_lock(engine: Engine) -> WriteLock:
    """The :class:`WriteLock` for *engine*'s database (a file lock only for a SQLite file)."""
    path = _sqlite_file(engine)
    return WriteLock(path + ".lock" if path is not None and os.name == "posix" else None,
                     engine.url)


def wal_checkpointer(engine: Engine) -> WalCheckpointer | None:
    """A :class:`~enginecfg.store.walcheckpoint.WalCheckpointer` for a SQLite file, else None."""
    path = _sqlite_file(engine)
    return None if path is None else WalCheckpointer(path)


def alembic_config(url: str | URL | None = None) -> "Config":
    """An Alembic config whose scripts are the installed ``enginecfg.migrations`` package."""
    from alembic.config import Config

    from enginecfg import migrations

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrations.__file__).resolve().parent))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url",
                            normalise_url(url).render_as_string(hide_password=False)
                            .replace("%", "%%"))
    return cfg


_REVISION = re.compile(r"^revision\s*=\s*['\"]([^'\"]+)['\"]", re.M)
_DOWN = re.compile(r"^down_revision\s*=\s*(.+)$", re.M)
_head: list[str] = []


def _alembic_head() -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def head_revision() -> str:
    """The newest revision, read from the headers of the revision files (Alembic's own answer
    when they do not name exactly one head)."""
    if not _head:
        from enginecfg.migrations import versions

        revisions, downs = set(), set()
        for file in Path(versions.__file__).resolve().parent.glob("*.py"):
            body = file.read_text(encoding="utf-8")
            rev, down = _REVISION.search(body), _DOWN.search(body)
            if rev:
                revisions.add(rev[1])
                downs.update(re.findall(r"['\"]([^'\"]+)['\"]", down[1]) if down else ())
        heads = revisions - downs
        _head.append(heads.pop() if len(heads) == 1 else _alembic_head())
    return _head[0]


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (None: no audit schema yet)."""
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        rows = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
        if len(rows) <= 1:
            return rows[0] if rows else None
        from alembic.runtime.migration import MigrationContext

        return MigrationContext.configure(conn).get_current_revision()  # raises: several heads


def _run_locked(engine: Engine, fn) -> None:
    from sqlalchemy.exc import OperationalError

    try:
        with write_connection(engine) as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _MIGRATE_LOCK_KEY})
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            fn(cfg)
    except OperationalError as exc:  # the lock timeout passed: a writer holds the store
        code = getattr(exc.orig, "sqlstate", None)
        if code == "55P03" or (code is None and "locked" in str(exc.orig).lower()):
            raise busy(engine.url, lock_timeout()) from exc
        raise


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Upgrade the schema, under the write lock so that concurrent callers migrate once."""
    from alembic import command

    _run_locked(engine, lambda cfg: command.upgrade(cfg, revision))


def downgrade(engine: Engine, revision: str, *, before=None) -> None:
    """Downgrade the schema to ``revision`` (``base`` drops every audit table), under the
    write lock.  ``before(connection)`` runs first, in the same transaction (it may raise to
    refuse).  This is the bare migration: :func:`enginecfg.store.downgrade.downgrade` is the
    one that refuses to lose audit history."""
    from alembic import command

    def run(cfg) -> None:
        if before is not None:
            before(cfg.attributes["connection"])
        command.downgrade(cfg, revision)

    _run_locked(engine, run)
