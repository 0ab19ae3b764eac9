"""Signed checkpoints of the chain head: anchors kept outside the audit database.

The hash chain catches an edited, deleted or reordered row, but whoever can write the
database can recompute every hash and the chain head.  A *checkpoint* is a signed statement
of the head at one moment (database identity, position, head hash, the run there, the time,
and a short digest of every run up to it), kept somewhere the database's writers cannot
reach: a file in object storage, a second database, a ticket.  ``verify`` against it proves
that the database still *extends* the checkpoint, i.e. that its first ``position`` runs are
the ones the checkpoint saw, and names the first run where they are not.

Signatures: Ed25519 (``cryptography``) when the key is a PEM key (the private key signs; the
public key, or the private one, verifies), HMAC-SHA256 when it is a shared secret (any
other content of at least 16 bytes; the same secret signs and verifies).  Each checkpoint
names the key's id, so that after a key rotation old checkpoints still verify with the old
key (see ``docs/audit.md``).

Optionally the store writes a checkpoint every N runs to a mirror (``ENGINECFG_AUDIT_MIRROR``,
see :mod:`enginecfg.store.mirror`), signed with ``ENGINECFG_AUDIT_KEY``; this module reads
such a mirror (:func:`read_checkpoints`) as it reads a checkpoint file.
"""

from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import hmac
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
from sqlalchemy import select

from enginecfg.pipeline.errors import EngineCfgError, InvalidInputError
from enginecfg.store.files import (
    CHECKPOINT_FILE_LIMIT,
    CHECKPOINT_LINE_LIMIT,
    KEY_FILE_LIMIT,
    TooLarge,
    read_bounded,
    size_text,
)
from enginecfg.store.hashing import canonical
from enginecfg.store.models import ChainHead, Run
from enginecfg.store.verify import Problem, VerifyResult, verify

__all__ = [
    "FORMAT",
    "KEY_ENV",
    "MIRROR_ENV",
    "MIRROR_EVERY_ENV",
    "AuditKey",
    "CheckpointError",
    "NotIntactError",
    "load_key",
    "parse_key",
    "generate_key",
    "public_key_path",
    "make_checkpoint",
    "sign",
    "check_signature",
    "read_checkpoints",
    "check_against",
    "verify_with_checkpoints",
    "read_mirror",
    "checkpoint_text",
    "mirror_table",
]

FORMAT = "enginecfg-audit-checkpoint/1"
KEY_ENV = "ENGINECFG_AUDIT_KEY"
MIRROR_ENV = "ENGINECFG_AUDIT_MIRROR"
MIRROR_EVERY_ENV = "ENGINECFG_AUDIT_MIRROR_EVERY"
DEFAULT_MIRROR_EVERY = 100
MIN_SECRET_BYTES = 16
#: bytes of each run's row hash kept in a checkpoint, to name the first run that differs
DIGEST_BYTES = 4
_ED25519, _HMAC = "ed25519", "hmac-sha256"
_MIRROR_TABLE = "audit_checkpoints"


class CheckpointError(InvalidInputError):
    """A checkpoint or key that cannot be used: unreadable, malformed, signed with another
    key, or with a signature that does not verify (altered or forged).  Exit code 2."""


class NotIntactError(EngineCfgError):
    """The audit history is not intact, so no checkpoint of it is signed (exit code 1)."""


# -- keys ---------------------------------------------------------------------------------


@attrs.frozen
class AuditKey:
    """A key that signs and/or verifies checkpoints.

    ``alg`` is ``ed25519`` or ``hmac-sha256``; ``key_id`` a short fingerprint (of the
    public key, or of the secret) that checkpoints carry; ``source`` says where it was read.
    """

    alg: str
    key_id: str
    source: str
    _private: Any = attrs.field(default=None, repr=False)
    _public: Any = attrs.field(default=None, repr=False)
    _secret: bytes | None = attrs.field(default=None, repr=False)

    @property
    def can_sign(self) -> bool:
        return self._private is not None or self._secret is not None

    def sign(self, data: bytes) -> str:
        if self._secret is not None:
            return base64.b64encode(hmac.new(self._secret, data, hashlib.sha256).digest()).decode()
        if self._private is None:
            raise CheckpointError(f"the key {self.source} is an Ed25519 public key: it verifies "
                                  "checkpoints but cannot sign them; give the private key",
                                  field="key")
        return base64.b64encode(self._private.sign(data)).decode()

    def verify(self, data: bytes, signature: str) -> bool:
        try:
            raw = base64.b64decode(signature.encode("ascii"), validate=True)
        except (ValueError, UnicodeEncodeError):
            return False
        if self._secret is not None:
            return hmac.compare_digest(raw, hmac.new(self._secret, data, hashlib.sha256).digest())
        from cryptography.exceptions import InvalidSignature

        try:
            self._public.verify(raw, data)
        except InvalidSignature:
            return False
        return True


def _key_error(source: str, why: str) -> CheckpointError:
    return CheckpointError(f"invalid audit key {source}: {why}; allowed: an Ed25519 key in PEM "
                           f"(private or public), or a shared secret of at least "
                           f"{MIN_SECRET_BYTES} bytes", field="key")


def parse_key(data: bytes, source: str) -> AuditKey:
    """The key in ``data`` (a PEM Ed25519 key, else an HMAC secret); ``source`` names it."""
    if data.lstrip().startswith(b"-----BEGIN"):
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import (
            Ed25519PrivateKey,
            Ed25519PublicKey,
        )

        private = public = None
        try:
            if b"PUBLIC KEY" in data:
                public = serialization.load_pem_public_key(data)
            else:
                private = serialization.load_pem_private_key(data, password=None)
                public = private.public_key()
        except TypeError:
            raise _key_error(source, "the private key is encrypted with a password; store "
                                     "it unencrypted where only the signer can read it") from None
        except ValueError as exc:
            raise _key_error(source, f"not a readable PEM key ({' '.join(str(exc).split())})"
                             ) from None
        if not isinstance(public, Ed25519PublicKey) or (
                private is not None and not isinstance(private, Ed25519PrivateKey)):
            raise _key_error(source, f"a {type(public).__name__.lstrip('_')} key, not Ed25519")
        raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return AuditKey(_ED25519, hashlib.sha256(raw).hexdigest()[:16], source,
                        private=private, public=public)
    secret = data.strip()
    if len(secret) < MIN_SECRET_BYTES:
        raise _key_error(source, f"a shared secret of {len(secret)} bytes is too short")
    kid = hashlib.sha256(b"enginecfg-audit-hmac-key-id\0" + secret).hexdigest()[:16]
    return AuditKey(_HMAC, kid, source, secret=secret)


def load_key(key_file: str | os.PathLike | None = None, *,
             env: Mapping[str, str] | None = None) -> AuditKey:
    """The key in ``key_file``, else the key held by ``ENGINECFG_AUDIT_KEY`` itself."""
    if key_file is not None:
        path = Path(key_file)
        try:
            data = read_bounded(path, KEY_FILE_LIMIT)
        except OSError as exc:
            raise CheckpointError(f"invalid --key-file {str(path)!r}: cannot read it "
                                  f"({exc.strerror or exc}); allowed: a readable key file",
                                  field="key_file") from None
        except TooLarge as exc:
            raise CheckpointError(f"invalid --key-file {str(path)!r}: {exc}; allowed: a key file "
                                  f"(an Ed25519 PEM key or a shared secret, at most "
                                  f"{size_text(KEY_FILE_LIMIT)})", field="key_file") from None
        return parse_key(data, str(path))
    value = (os.environ if env is None else env).get(KEY_ENV)
    if not value:
        raise CheckpointError(f"no audit key: pass --key-file FILE or set {KEY_ENV} (an Ed25519 "
                              "PEM key or a shared secret)", field="key")
    return parse_key(value.encode("utf-8"), f"${KEY_ENV}")


def generate_key(private_path: str | os.PathLike,
                 public_path: str | os.PathLike | None = None) -> AuditKey:
    """Write a new Ed25519 private key (mode 0600) and its public key (default: the private
    key's path with ``.pub.pem``); returns the key.

    Neither file is ever overwritten, and both are made or neither: the two paths must name
    two different files that do not exist yet (:class:`CheckpointError` otherwise, naming
    the path), and both are created before either is written."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private_path = _new_key_path(private_path, "out", "--out")
    public_path = _new_key_path(private_path.with_suffix(".pub.pem") if public_path is None
                                else public_path, "public", "--public")
    if os.path.abspath(private_path) == os.path.abspath(public_path):
        raise CheckpointError(f"invalid public (--public): got {str(public_path)!r}, the path "
                              "of the private key; allowed: another path, so that one key does "
                              "not overwrite the other", field="public")
    fds: list[tuple[int, Path]] = []
    try:
        for path, mode in ((private_path, 0o600), (public_path, 0o644)):
            try:
                fds.append((os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), path))
            except FileExistsError:
                flag = "--out" if path is private_path else "--public"
                raise CheckpointError(f"invalid {flag[2:]} ({flag}): got {str(path)!r}, which "
                                      "exists; allowed: a path that does not exist yet (an "
                                      "existing key is never overwritten)",
                                      field=flag[2:]) from None
            except OSError as exc:
                flag = "--out" if path is private_path else "--public"
                raise CheckpointError(f"invalid {flag[2:]} ({flag}): got {str(path)!r}: cannot "
                                      f"create it ({exc.strerror or exc}); allowed: a new file "
                                      "in a folder you can write", field=flag[2:]) from None
    except BaseException:
        for fd, path in fds:  # made here a moment ago, still empty: not a key of anyone's
            os.close(fd)
            try:
                os.unlink(path)
            except OSError:
                pass
        raise
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    for (fd, _), data in zip(fds, (pem, public)):
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    return parse_key(pem, str(private_path))


def public_key_path(private_path: str | os.PathLike,
                    public_path: str | os.PathLike | None = None) -> Path:
    """Where :func:`generate_key` writes the public key: *public_path*, else the private
    key's path with the suffix ``.pub.pem``."""
    return Path(private_path).with_suffix(".pub.pem") if public_path is None else Path(public_path)


def _new_key_path(value: str | os.PathLike, field: str, flag: str) -> Path:
    """*value* as the path of a key file to create (not empty, not a folder)."""
    text = os.fspath(value)
    if not isinstance(text, str) or not text.strip() or text.endswith(("/", os.sep)) \
            or os.path.isdir(text):
        raise CheckpointError.for_value(field, text, "the path of a new file (an existing key "
                                        "is never overwritten)", flag=flag)
    return Path(text)


# -- making and checking one checkpoint ---------------------------------------------------


def _now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _head_and_runs(conn) -> tuple[Any, list[Any]]:
    head = conn.execute(select(ChainHead.position, ChainHead.head_hash, ChainHead.store_id,
                               ChainHead.created_at).where(ChainHead.id == 1)).one()
    # runs are append-only and the head names a committed position: reading up to it is a
    # consistent view even while other writers append
    runs = conn.execute(select(Run.chain_pos, Run.id, Run.row_hash)
                        .where(Run.chain_pos <= head.position).order_by(Run.chain_pos)).all()
    return head, runs


def _unsigned(head: Any, runs: Sequence[Any]) -> dict[str, Any]:
    last = runs[-1] if runs else None
    if last is not None and (last.chain_pos != head.position or last.row_hash != head.head_hash):
        raise NotIntactError(f"the chain head (position {head.position}) does not name the last "
                             "run: run `audit verify` first")
    digests = b"".join(bytes.fromhex(r.row_hash)[:DIGEST_BYTES] for r in runs)
    return {"format": FORMAT, "store_id": head.store_id,
            "store_created_at": head.created_at, "position": head.position,
            "run_id": last.id if last is not None else None, "head_hash": head.head_hash,
            "created_at": _now_iso(), "digest_bytes": DIGEST_BYTES,
            "digests": base64.b64encode(digests).decode("ascii")}


def sign(doc: Mapping[str, Any], key: AuditKey) -> dict[str, Any]:
    """``doc`` with ``alg``, ``key_id`` and ``signature`` (over every other field) added."""
    body = {k: v for k, v in doc.items() if k != "signature"}
    body.update(alg=key.alg, key_id=key.key_id)
    return {**body, "signature": key.sign(canonical(body))}


def make_checkpoint(store, key: AuditKey, *, verify_first: bool = True) -> dict[str, Any]:
    """A signed checkpoint of ``store``'s chain head.

    With ``verify_first`` (the default) the whole chain is verified before it is signed:
    a checkpoint vouches for the history up to it, so a history that does not verify is
    refused (:class:`NotIntactError`).
    """
    if not key.can_sign:
        key.sign(b"")  # raises the key's own explanation
    if verify_first:
        res = verify(store)
        if not res.ok:
            raise NotIntactError("audit history NOT intact; no checkpoint signed: "
                                 f"{res.first_bad.message}")
    with store.engine.connect() as conn:
        head, runs = _head_and_runs(conn)
    return sign(_unsigned(head, runs), key)


def _digest(row_hash: Any, width: int) -> bytes | None:
    """The first *width* bytes of a stored row hash (None: not a hex hash, an altered one)."""
    try:
        return bytes.fromhex(row_hash)[:width]
    except (TypeError, ValueError):
        return None


def _iso_time(ts: Any) -> str:
    if not isinstance(ts, (int, float)) or isinstance(ts, bool):
        return repr(ts)
    try:
        return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).isoformat().replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return repr(ts)


def _describe(doc: Mapping[str, Any], where: str) -> str:
    return f"checkpoint {where} (position {doc.get('position')}, {doc.get('created_at')})"


def check_signature(doc: Mapping[str, Any], keys: Sequence[AuditKey], where: str) -> None:
    """Refuse ``doc`` unless it is well formed and signed by one of ``keys``."""
    required = {"format": str, "store_id": (str, type(None)), "position": int,
                "head_hash": str, "created_at": str, "alg": str, "key_id": str,
                "signature": str, "digests": str, "digest_bytes": int}
    if not isinstance(doc, Mapping) or doc.get("format") != FORMAT:
        raise CheckpointError(f"invalid checkpoint {where}: not an enginecfg checkpoint "
                              f"(format {FORMAT!r})", field="checkpoint")
    for name, kind in required.items():
        if not isinstance(doc.get(name), kind) or isinstance(doc.get(name), bool):
            raise CheckpointError(f"invalid checkpoint {where}: field {name!r} is "
                                  f"{doc.get(name)!r}", field="checkpoint")
    created = doc.get("store_created_at")  # absent from checkpoints made before it was signed
    if created is not None and (isinstance(created, bool) or not isinstance(created, (int, float))):
        raise CheckpointError(f"invalid checkpoint {where}: field 'store_created_at' is "
                              f"{created!r}", field="checkpoint")
    matching = [k for k in keys if k.key_id == doc["key_id"] and k.alg == doc["alg"]]
    if not matching:
        given = ", ".join(f"{k.key_id} ({k.alg}, {k.source})" for k in keys) or "none"
        raise CheckpointError(
            f"{_describe(doc, where)} is signed with key {doc['key_id']} ({doc['alg']}), "
            f"which is not the key given: {given}; pass the key it was signed with "
            "(--key-file, once per key)", field="key")
    body = {k: v for k, v in doc.items() if k != "signature"}
    if not matching[0].verify(canonical(body), doc["signature"]):
        raise CheckpointError(
            f"{_describe(doc, where)}: the signature does not verify with key "
            f"{doc['key_id']}: the checkpoint was altered or forged; refused", field="checkpoint")


def check_against(store, doc: Mapping[str, Any], where: str) -> list[Problem]:
    """Problems that keep ``store`` from extending the (signature-checked) checkpoint ``doc``."""
    what = _describe(doc, where)
    with store.engine.connect() as conn:
        store_row = conn.execute(select(ChainHead.store_id, ChainHead.created_at)
                                 .where(ChainHead.id == 1)).one_or_none()
        sid, created = store_row if store_row is not None else (None, None)
        runs = conn.execute(select(Run.chain_pos, Run.id, Run.row_hash)
                            .where(Run.chain_pos <= doc["position"])
                            .order_by(Run.chain_pos)).all()
    if doc["store_id"] != sid:
        return [Problem("checkpoint_other_db", f"{what} is of audit database "
                        f"{doc['store_id']}, this database is {sid}: the wrong database or "
                        "checkpoint was given, or the database was re-created", "chain_head")]
    # the store's creation time, which `audit verify` and `export --all` show, is held to
    # the one the checkpoint signed (checkpoints made before it was signed carry none)
    if "store_created_at" in doc and doc["store_created_at"] != created:
        return [Problem("checkpoint_mismatch", f"the database does not extend {what}: the "
                        f"store's creation time reads {_iso_time(created)}, the checkpoint "
                        f"signed {_iso_time(doc['store_created_at'])}: the store record "
                        "(chain_head) was altered", "chain_head")]
    width = doc["digest_bytes"]
    try:
        digests = base64.b64decode(doc["digests"], validate=True)
    except ValueError:
        digests = b""
    have_digests = width > 0 and len(digests) == width * doc["position"]
    for i, run in enumerate(runs, start=1):
        if run.chain_pos != i:
            return [Problem("checkpoint_mismatch", f"the database does not extend {what}: "
                            f"position {i} is missing (the next run is {run.id} at position "
                            f"{run.chain_pos})", "runs", run.id, i)]
        if have_digests and _digest(run.row_hash, width) != digests[(i - 1) * width:i * width]:
            return [Problem("checkpoint_mismatch", f"the database does not extend {what}: "
                            f"run {run.id} (position {i}) is not the run the checkpoint saw "
                            "there; the history was rewritten from this run on", "runs",
                            run.id, i)]
    if len(runs) < doc["position"]:
        return [Problem("checkpoint_mismatch", f"the database does not extend {what}: it ends "
                        f"at position {len(runs)}; runs were removed", "runs", None,
                        len(runs) + 1)]
    last = runs[-1] if runs else None
    if last is not None and (last.row_hash != doc["head_hash"] or last.id != doc["run_id"]):
        return [Problem("checkpoint_mismatch", f"the database does not extend {what}: run "
                        f"{last.id} (position {last.chain_pos}) does not have the checkpoint's "
                        "head hash; the history up to it was rewritten", "runs", last.id,
                        last.chain_pos)]
    return []


# -- reading checkpoints ------------------------------------------------------------------


def read_checkpoints(source: str) -> list[tuple[str, dict[str, Any]]]:
    """The checkpoints in a file (one JSON object, a JSON list, or JSON lines) or in a mirror
    database (a URL with ``://``), each with a label saying where it came from."""
    if "://" in source:
        return _read_mirror_db(source)
    path = Path(source)
    try:
        text = read_bounded(path, CHECKPOINT_FILE_LIMIT, CHECKPOINT_LINE_LIMIT).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise CheckpointError(f"invalid --checkpoint {source!r}: cannot read it ({why}); "
                              "allowed: a checkpoint file or a mirror database URL",
                              field="checkpoint") from None
    except TooLarge as exc:
        raise CheckpointError(f"invalid --checkpoint {source!r}: {exc}; allowed: a checkpoint "
                              f"file (at most {size_text(CHECKPOINT_FILE_LIMIT)}, each line at "
                              f"most {size_text(CHECKPOINT_LINE_LIMIT)}) or a mirror database "
                              "URL", field="checkpoint") from None
    try:
        data = json.loads(text)
        docs = data if isinstance(data, list) else [data]
    except json.JSONDecodeError:
        docs = []
        for n, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    docs.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise CheckpointError(f"invalid checkpoint {source}:{n}: not JSON "
                                          f"({exc.msg})", field="checkpoint") from None
    if not docs:
        raise CheckpointError(f"invalid --checkpoint {source!r}: it holds no checkpoint",
                              field="checkpoint")
    if len(docs) == 1:
        return [(source, docs[0])]
    return [(f"{source}#{i}", d) for i, d in enumerate(docs, start=1)]


def mirror_table(metadata=None):
    """The mirror database's table of checkpoints (one JSON document a row)."""
    from sqlalchemy import Column, Integer, MetaData, String, Table, Text

    return Table(_MIRROR_TABLE, metadata if metadata is not None else MetaData(),
                 Column("id", Integer, primary_key=True, autoincrement=True),
                 Column("store_id", String(32)), Column("position", Integer, nullable=False),
                 Column("created_at", String(40), nullable=False),
                 Column("document", Text, nullable=False))


def read_mirror(target: str) -> list[tuple[str, dict[str, Any]]]:
    """The checkpoints the mirror *target* holds (``ENGINECFG_AUDIT_MIRROR``): none (an
    empty list) where it has not written one yet."""
    if "://" in target:
        return _read_mirror_db(target, empty_ok=True)
    path = Path(target)
    if not path.exists() or (path.is_file() and path.stat().st_size <= 4096
                             and not path.read_bytes().strip()):
        return []
    return read_checkpoints(target)


def _read_mirror_db(url: str, empty_ok: bool = False) -> list[tuple[str, dict[str, Any]]]:
    from sqlalchemy import inspect

    from enginecfg.store.engine import display_url, make_engine

    try:
        engine = make_engine(url, read_only=empty_ok)
    except InvalidInputError:  # a SQLite mirror file not written yet
        if empty_ok:
            return []
        raise
    try:
        table = mirror_table()
        with engine.connect() as conn:
            if empty_ok and not inspect(conn).has_table(table.name):
                return []
            rows = conn.execute(select(table.c.id, table.c.document)
                                .order_by(table.c.id)).all()
    finally:
        engine.dispose()
    if not rows and empty_ok:
        return []
    if not rows:
        raise CheckpointError(f"invalid --checkpoint {display_url(url)}: its {_MIRROR_TABLE} "
                              "table holds no checkpoint", field="checkpoint")
    out = []
    for rid, document in rows:
        try:
            out.append((f"{display_url(url)}#{rid}", json.loads(document)))
        except json.JSONDecodeError as exc:
            raise CheckpointError(f"invalid checkpoint {display_url(url)}#{rid}: not JSON "
                                  f"({exc.msg})", field="checkpoint") from None
    return out


# -- verify -------------------------------------------------------------------------------


def verify_with_checkpoints(store, sources: Iterable[str], keys: Sequence[AuditKey], *,
                            mirror: str | None = None) -> VerifyResult:
    """The chain's own walk plus, for every checkpoint in ``sources`` and in the *mirror*
    (``ENGINECFG_AUDIT_MIRROR``, which may hold none yet), proof that the database extends
    it: a store that shrank, was rewritten or was replaced by another one (an emptied one
    included) is reported.  Every signature is checked first: one that does not verify (or
    whose key was not given) is refused with :class:`CheckpointError` before any verdict."""
    sources = list(sources)
    docs = [pair for s in sources for pair in read_checkpoints(s)]
    note = None
    if mirror:
        from enginecfg.store.engine import display_url

        shown = display_url(mirror) if "://" in mirror else mirror
        found = read_mirror(mirror)
        docs += found
        sources.append(shown)
        note = (f"{shown}: {len(found)} checkpoint(s)" if found
                else f"{shown}: no checkpoint written yet")
    for where, doc in docs:
        check_signature(doc, keys, where)
    base = verify(store)
    problems = list(base.problems)
    for where, doc in sorted(docs, key=lambda p: p[1]["position"]):
        problems.extend(check_against(store, doc, where))
    return attrs.evolve(base, ok=not problems, problems=tuple(problems),
                        checkpoints_checked=len(docs), checkpoint_sources=tuple(sources),
                        mirror=note)


def checkpoint_text(doc: Mapping[str, Any]) -> str:
    """A checkpoint as it is written to a file: indented JSON, keys sorted, one newline."""
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"
