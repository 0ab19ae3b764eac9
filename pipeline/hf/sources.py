"""Where a model's files come from: a local folder, a ``config.json``, or a Hugging Face repo.

Users give enginecfg what they give vLLM: a downloaded folder, or a repo id such as
``Qwen/Qwen3.5-27B`` (optionally with a revision).  :func:`open_source` turns that into a
:class:`ModelSource` that reads the few small files vLLM 0.19.0 reads while it builds its
config (``config.json``, ``tokenizer_config.json``, sentence-transformers files, the
safetensors headers ...) and records, for the audit, where each one came from and its sha256.

Repo ids follow vLLM's own two paths, because they give different answers:

* ``HF_HUB_OFFLINE`` set: vLLM swaps the repo id for the cached snapshot folder and from then
  on treats it as a local folder (safetensors dtypes come from the ``*.safetensors`` files
  present in that folder, i.e. only if the weights were downloaded).  enginecfg does the same;
  nothing is fetched.
* online: the small files are fetched through ``huggingface_hub`` into its standard cache (so
  a later offline run finds them), and the safetensors headers are read with ranged requests
  (``huggingface_hub.get_safetensors_metadata``, as vLLM does); weights are never downloaded.

The cache location, offline switch and token are read from the environment at call time
(``HF_HUB_CACHE`` / ``HF_HOME`` / ``XDG_CACHE_HOME``, ``HF_HUB_OFFLINE``, ``HF_TOKEN``,
``HF_ENDPOINT``), the
way ``huggingface_hub`` reads them, so a caller that changes them after import is honoured.
``huggingface_hub`` is imported only for repo ids.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from enginecfg.pipeline.errors import InvalidInputError
from enginecfg.pipeline.hf.safetensors_header import HeaderRead, read_header

__all__ = [
    "SMALL_FILES", "ModelSource", "FileRecord", "open_source", "is_repo_id", "hub_cache_dir",
    "hub_offline", "forget_files",
]

#: the files (besides safetensors headers) vLLM 0.19.0 may read before it loads weights; online,
#: only these (and a sentence-transformers module's ``<folder>/config.json``) are downloaded
SMALL_FILES = (
    "config.json",
    "hf_quant_config.json",
    "processor_config.json",
    "preprocessor_config.json",
    "generation_config.json",
    "tokenizer_config.json",
    "modules.json",
    "sentence_bert_config.json",
    "sentence_xlnet_config.json",
    "sentence_distilbert_config.json",
    "sentence_camembert_config.json",
    "sentence_albert_config.json",
    "sentence_xlm-roberta_config.json",
    "sentence_roberta_config.json",
    "model.safetensors.index.json",
)

# huggingface_hub's repo-id rule: one "/" (namespace/name), word characters, "-", "." and no
# "--" / ".." / leading or trailing "-" or "." in a part; at most 96 characters
_REPO_PART = r"[A-Za-z0-9](?:[A-Za-z0-9_.\-]*[A-Za-z0-9_])?"
_REPO_ID = re.compile(rf"^(?:{_REPO_PART}/)?{_REPO_PART}$")
_TRUE = {"1", "ON", "YES", "TRUE"}
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def is_repo_id(text: str) -> bool:
    """Whether *text* can name a Hugging Face repo (``org/name``; a bare ``name`` too)."""
    if len(text) > 96 or "--" in text or ".." in text:
        return False
    return bool(_REPO_ID.match(text))


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` as huggingface_hub reads it (1/ON/YES/TRUE, any case).

    Set now, or set when huggingface_hub was imported (it then stays offline for the process).
    """
    if (os.environ.get("HF_HUB_OFFLINE") or "").upper() in _TRUE:
        return True
    constants = sys.modules.get("huggingface_hub.constants")
    return bool(getattr(constants, "HF_HUB_OFFLINE", False))


def hub_cache_dir() -> Path:
    """The hub cache huggingface_hub would use with the current environment."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(os.path.expandvars(os.path.expanduser(explicit)))
    home = os.environ.get("HF_HOME")
    if not home:
        home = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface")
    return Path(os.path.expandvars(os.path.expanduser(home))) / "hub"


class FileRecord:
    """One input read: its name in the model folder / repo, sha256, size and how it was read.

    ``how`` is ``"file"`` (the whole file), ``"header"`` (a safetensors file's length prefix
    and JSON header only) or ``"remote-header"`` (the header of a hub file, fetched with
    ranged requests; ``sha256`` is then that of the header's canonical JSON).
    """

    __slots__ = ("name", "sha256", "size", "how")

    def __init__(self, name: str, sha256: str, size: int, how: str = "file"):
        self.name, self.sha256, self.size, self.how = name, sha256, size, how

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "sha256": self.sha256, "size": self.size, "how": self.how}


def _read_regular(path: Path | str, source: "ModelSource", name: str) -> bytes:
    """The bytes of a regular file; a FIFO or device is refused rather than read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise InvalidInputError(f"invalid model: cannot read {source.describe(name)}: not a regular "
                                        f"file; allowed: a regular file", field="model")
            with os.fdopen(fd, "rb", closefd=False) as fh:
                return fh.read()
        finally:
            os.close(fd)
    except OSError as exc:
        raise InvalidInputError(f"invalid model: cannot read {source.describe(name)}: {exc.strerror or exc}",
                                field="model") from None


# -- what was read before: a folder read again without re-reading unchanged files --------------
#
# A model folder resolved again and again (an engine's start, a CI job, ``plan``) is read again
# each time: every file vLLM may read is looked for, and those there are read and hashed.  The
# listing of a folder and the bytes (with their sha256) of a file are kept, each with the
# ``os.stat`` facts it was read under: device, inode, size, modification and change times
# (nanoseconds).  A later read takes what was kept when ``os.stat`` gives the very same facts.
#
# What this trusts: that a file (a folder) whose contents change gets a new modification or
# change time, or a new inode, or a new size, as local filesystems do on every write, rename
# and ``os.utime`` (the change time cannot be set back by a caller).  Where a timestamp cannot
# tell two writes apart (they fall within one tick of the filesystem's clock), the stat facts
# are not trusted: a file or folder changed less than :data:`SETTLED_NS` before it was read is
# never kept, so it is read and hashed every time until it has been left alone that long.  A
# file written in place with the same size right after a read is therefore always seen.

#: how long (ns) a file or folder must have been left unchanged before its stat facts vouch
#: for its contents
SETTLED_NS = 2_000_000_000
#: the most files and folders kept, and the largest file kept (bytes)
_KEEP_FILES = 256
_KEEP_BYTES = 8 << 20

_FILES: dict[str, tuple[tuple[int, ...], bytes, str]] = {}
_LISTINGS: dict[str, tuple[tuple[int, ...], frozenset[str]]] = {}
_KEPT_LOCK = threading.Lock()


def forget_files() -> None:
    """Forget every file and folder listing kept (the next read of each reads it again)."""
    with _KEPT_LOCK:
        _FILES.clear()
        _LISTINGS.clear()


def _facts(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _settled(st: os.stat_result) -> bool:
    """Whether *st*'s times are far enough in the past that a later change moves one of them."""
    return time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) >= SETTLED_NS


def _keep(table: dict, path: str, entry: tuple) -> None:
    with _KEPT_LOCK:
        table.pop(path, None)
        table[path] = entry
        while len(table) > _KEEP_FILES:
            del table[next(iter(table))]


def _folder_names(folder: str, st: os.stat_result | None = None) -> frozenset[str] | None:
    """The names in *folder* when its listing was kept under the same stat facts (listed and
    kept now if it is settled); None where it cannot say (the caller looks name by name).
    *st*: the folder's stat, when the caller has just taken it."""
    if st is None:
        try:
            st = os.stat(folder)
        except (OSError, ValueError):
            return None
    facts = _facts(st)
    kept = _LISTINGS.get(folder)
    if kept is not None and kept[0] == facts:
        return kept[1]
    if not stat.S_ISDIR(st.st_mode) or not _settled(st):
        return None
    try:
        names = frozenset(os.listdir(folder))
    except (OSError, ValueError):
        return None
    _keep(_LISTINGS, folder, (facts, names))
    return names


def _read_kept(path: str, source: "ModelSource", name: str,
               st: os.stat_result | None = None) -> tuple[bytes, str]:
    """The bytes of a regular file and their sha256: kept ones where the file's stat facts are
    those they were read under, else read (and kept if the file is settled).  *st*: the
    file's stat, when the caller has just taken it."""
    if st is None:
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            st = None
    if st is not None and stat.S_ISREG(st.st_mode):
        facts = _facts(st)
        kept = _FILES.get(path)
        if kept is not None and kept[0] == facts:
            return kept[1], kept[2]
    data = _read_regular(path, source, name)
    digest = hashlib.sha256(data).hexdigest()
    if st is not None and stat.S_ISREG(st.st_mode) and len(data) == st.st_size <= _KEEP_BYTES and _settled(st):
        _keep(_FILES, path, (facts, data, digest))
    return data, digest


class ModelSource:
    """The files of one model, wherever they live; every read is recorded in :attr:`files`.

    ``kind`` is ``"folder"``, ``"file"`` (a lone ``config.json``: nothing beside it is read)
    or ``"hub"``.  For a hub repo, ``root`` is the cached snapshot folder when offline and
    ``None`` online (files are fetched one by one).
    """

    def __init__(self, kind: str, given: str, root: Path | None, *, config_path: Path | None = None,
                 repo_id: str | None = None, revision: str | None = None, commit: str | None = None,
                 offline: bool = False, fetch: Callable[[str], Path | None] | None = None,
                 root_stat: os.stat_result | None = None):
        self.kind = kind
        #: the folder's stat as opening it found it (its listing is looked up under it)
        self._root_stat = root_stat
        #: (path, stat) of the file :meth:`_local` just found, for the read that follows
        self._found: tuple[str, os.stat_result] | None = None
        self.given = given
        self.root = root
        self._root_text = os.fspath(root) if root is not None else None
        self.repo_id = repo_id
        self.revision = revision
        self.commit = commit
        self.offline = offline
        self._config_path = config_path
        self._fetch = fetch
        self.files: dict[str, FileRecord] = {}
        self._cache: dict[str, bytes | None] = {}
        self._headers: dict[str, dict[str, Any]] | None = None
        self._listing: tuple[frozenset[str] | None] | None = None
        #: the names in the folder, when its listing was kept under the same stat facts
        #: (:func:`_folder_names`; looked at on the first read)
        self._names: tuple[frozenset[str] | None] | None = None

    # -- naming ----------------------------------------------------------------------------
    def __str__(self) -> str:
        return self.given

    @property
    def model(self) -> str:
        """What vLLM's ``model_config.model`` holds: the repo id, or the path as given."""
        return self.given

    def describe(self, name: str) -> str:
        """How to name the file *name* of this source in a message."""
        if self.kind == "file" and name == "config.json":
            return str(self._config_path)
        if self.kind == "hub":
            at = f"@{self.revision}" if self.revision else ""
            return f"{name} of {self.repo_id}{at}"
        if self.root is None:
            return name
        return _joined(self.root, name) if isinstance(self.root, Path) else str(self.root / name)

    # -- reading ---------------------------------------------------------------------------
    def _local(self, name: str) -> Path | str | None:
        if self.kind == "file":
            return self._config_path if name == "config.json" else None
        if self.root is not None:
            names = None
            if "/" not in name:
                names = self._folder_listing()
                if names is not None and name not in names:
                    return None  # not in the folder (its listing kept under the same stat facts)
            # plain strings: a warm run reads a dozen names, and pathlib's parsing is most of it
            p = os.path.join(self._root_text, name)
            if name == "config.json":
                # present but not a regular file (a FIFO, a folder): refused when read, not missed
                # (in the listing kept: there, as lexists would say)
                return p if names is not None or os.path.lexists(p) else None
            try:
                st = os.stat(p)
            except (OSError, ValueError):
                return None
            if not stat.S_ISREG(st.st_mode):
                return None
            self._found = (p, st)  # the read that follows takes it, not a second stat
            return p
        return self._fetch(name) if self._fetch is not None else None

    def _folder_listing(self) -> frozenset[str] | None:
        """The names in the folder (:func:`_folder_names`, under its stat facts looked at once
        per source: the stat opening it took, where it took one); None where it cannot say."""
        if self._names is None:
            self._names = (_folder_names(self._root_text, self._root_stat),)
            self._root_stat = None
        return self._names[0]

    def read_bytes(self, name: str) -> bytes | None:
        """The bytes of *name* (a path inside the model folder/repo), or None if absent."""
        if name in self._cache:
            return self._cache[name]
        path = self._local(name)
        if path is None:
            data = None
        elif self.root is not None:
            found, self._found = self._found, None
            path = os.fspath(path)
            data, digest = _read_kept(path, self, name, found[1] if found is not None and found[0] == path else None)
            self.files[name] = FileRecord(name, digest, len(data))
        else:
            data = _read_regular(path, self, name)
            self.files[name] = FileRecord(name, hashlib.sha256(data).hexdigest(), len(data))
        self._cache[name] = data
        return data

    def still_absent(self, names: tuple[str, ...]) -> bool:
        """Whether none of *names* (each looked for before and not found) is found now, each
        recorded as looked for and absent as :meth:`read_bytes` records it: by the folder's
        kept listing for a name in the folder itself, else as :meth:`read_bytes` looks."""
        listing = self._folder_listing() if self.kind == "folder" and self.root is not None else None
        for name in names:
            if listing is not None and "/" not in name:
                if name in listing:
                    return False
                known = self._cache.setdefault(name, None)
                if known is not None:
                    return False
            elif self.read_bytes(name) is not None:
                return False
        return True

    def reads(self) -> dict[str, bytes | None]:
        """Every file looked at so far: its bytes, or None where none was found."""
        return dict(self._cache)

    def listed(self, name: str) -> bool:
        """Whether the model has a file *name*, found as vLLM finds the files it asks about
        before it reads them (``hf_quant_config.json``, ``modules.json``, the
        sentence-transformers settings): in a folder (or a cached snapshot) by looking, in a
        repo by the repo's file list, fetched once.  A file not there is recorded as looked
        for and absent; when the hub cannot list the repo, the file is asked for instead."""
        if name in self._cache:
            return self._cache[name] is not None
        if self.kind == "hub" and self.root is None:
            files = self._repo_files()
            if files is None:
                return self.read_bytes(name) is not None
            if name in files:
                return True
        elif self._local(name) is not None:
            return True
        self._cache[name] = None
        return False

    def _repo_files(self) -> frozenset[str] | None:
        """The repo's file list at this source's commit (None when the hub cannot say)."""
        if self._listing is None:
            from huggingface_hub import HfApi

            try:
                with _quiet_hub():
                    names = HfApi(endpoint=_endpoint(), token=_token()).list_repo_files(
                        self.repo_id, revision=self.commit or self.revision)
                self._listing = (frozenset(names),)
            except Exception:  # not reachable, or no listing: ask for each file instead
                self._listing = (None,)
        return self._listing[0]

    @property
    def safetensors_read(self) -> bool:
        """Whether the safetensors headers were read (see :meth:`safetensors_headers`)."""
        return self._headers is not None

    def read_json(self, name: str) -> Any:
        """*name* parsed as JSON, or None if absent; bad JSON is bad input naming the file."""
        data = self.read_bytes(name)
        if data is None:
            return None
        try:
            return json.loads(data)
        except UnicodeDecodeError:
            raise InvalidInputError(f"invalid {name}: {self.describe(name)} is not UTF-8 text",
                                    field=name) from None
        except RecursionError:
            raise InvalidInputError(f"invalid {name}: {self.describe(name)} is nested too deeply",
                                    field=name) from None
        except ValueError as exc:
            raise InvalidInputError(f"invalid {name}: {self.describe(name)} is not valid JSON: "
                                    f"{getattr(exc, 'msg', exc)}", field=name) from None

    def config_bytes(self) -> bytes:
        """``config.json``; its absence is bad input naming the folder or repo."""
        data = self.read_bytes("config.json")
        if data is None:
            if self.kind == "hub":
                raise InvalidInputError(
                    f"invalid model: Hugging Face repo {self.repo_id!r}"
                    f"{' at revision ' + repr(self.revision) if self.revision else ''} has no config.json"
                    f"{' in the local cache (' + str(hub_cache_dir()) + ')' if self.offline else ''}; "
                    f"allowed: a repo holding a transformers config.json", field="model")
            raise InvalidInputError(f"invalid model: {self.given} has no config.json; allowed: a model folder "
                                    f"holding config.json, or a config.json file", field="model")
        return data

    def safetensors_headers(self) -> dict[str, dict[str, Any]]:
        """Each safetensors file's JSON header, as vLLM 0.19.0 finds them at config time.

        A local (or offline snapshot) folder: every ``*.safetensors`` file directly in it.
        Online: the repo's safetensors metadata through ranged requests; when the hub cannot
        say (no safetensors, no network), nothing, as vLLM then has nothing either.
        """
        if self._headers is not None:
            return self._headers
        headers: dict[str, dict[str, Any]] = {}
        if self.kind == "hub" and self.root is None:
            headers = self._remote_headers()
        elif self.root is not None and self.kind != "file":
            for path in sorted(self.root.glob("*.safetensors")):
                if not path.is_file():
                    continue
                got: HeaderRead = read_header(path)
                headers[path.name] = got.header
                self.files[path.name] = FileRecord(path.name, got.sha256, got.bytes_read, "header")
        self._headers = headers
        return headers

    def _remote_headers(self) -> dict[str, dict[str, Any]]:
        from huggingface_hub import HfApi

        try:
            with _quiet_hub():
                meta = HfApi(endpoint=_endpoint(), token=_token()).get_safetensors_metadata(
                    self.repo_id, revision=self.commit or self.revision)
        except Exception:  # vLLM swallows every failure here and goes on without a dtype
            return {}
        out: dict[str, dict[str, Any]] = {}
        for fname, fmeta in sorted((meta.files_metadata or {}).items()):
            header: dict[str, Any] = {}
            if fmeta.metadata:
                header["__metadata__"] = dict(fmeta.metadata)
            for tname, info in fmeta.tensors.items():
                header[tname] = {"dtype": info.dtype, "shape": list(info.shape),
                                 "data_offsets": list(info.data_offsets)}
            out[fname] = header
            canon = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
            self.files[fname] = FileRecord(fname, hashlib.sha256(canon).hexdigest(), len(canon), "remote-header")
        return out

    # -- provenance ------------------------------------------------------------------------
    def provenance(self) -> dict[str, Any]:
        """Where the config came from, the sha256 of each file read, and the files looked for
        and not found (``absent``), for the audit."""
        out: dict[str, Any] = {"kind": self.kind, "model": self.given}
        if self.kind == "hub":
            out.update(repo_id=self.repo_id, revision=self.revision, commit=self.commit, offline=self.offline)
        else:
            out["path"] = real_path(self.given)  # what Path.resolve() gives, without pathlib
        out["files"] = [self.files[n].to_dict() for n in sorted(self.files)]
        out["absent"] = sorted(n for n, data in self._cache.items() if data is None)
        return out


def real_path(path: Any) -> str:
    """``os.path.realpath(path)`` for a path that exists: the name the kernel gives the file it
    opens (Linux's ``/proc/self/fd``), three system calls where ``realpath`` makes one per
    component of the path; ``os.path.realpath`` itself where that cannot be asked (another
    system, no ``/proc``, a path that does not open, or was removed meanwhile)."""
    if _O_PATH is not None:
        try:
            fd = os.open(path, _O_PATH)
        except (OSError, TypeError, ValueError):
            return os.path.realpath(path)
        try:
            name = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            name = None
        finally:
            os.close(fd)
        if name is not None and name.startswith("/") and not name.endswith(" (deleted)"):
            return name
    return os.path.realpath(path)


#: opening a path only to name it (Linux); None where there is no such flag
_O_PATH: int | None = getattr(os, "O_PATH", None) if os.path.isdir("/proc/self/fd") else None


# -- opening ---------------------------------------------------------------------------------

#: the concrete class ``Path()`` makes here (PosixPath or WindowsPath)
_PATH_CLASS = type(Path())


@functools.lru_cache(maxsize=256)
def _path_of(text: str) -> Path:
    """``Path(text)``: pure and immutable, so one per text (a warm run opens the same folder
    again and again, and pathlib's parsing costs more than the rest of opening it)."""
    return Path(text)


@functools.lru_cache(maxsize=256)
def _joined(root: Path, name: str) -> str:
    """``str(root / name)``, kept per root and name (pure, as :func:`_path_of`)."""
    return str(root / name)


def open_source(model: Any, revision: str | None = None) -> ModelSource:
    """The :class:`ModelSource` for what the user typed: a path, or a Hugging Face repo id.

    As in vLLM, an existing path wins; otherwise a string shaped like a repo id is one.
    ``revision`` (a branch, tag or commit) only applies to repo ids.
    """
    if not isinstance(model, (str, os.PathLike)):
        raise InvalidInputError(f"invalid model: got {model!r}; allowed: a path to a model folder or "
                                f"config.json, or a Hugging Face repo id (org/name)", field="model")
    if revision is not None and (not isinstance(revision, str) or not revision.strip()):
        raise InvalidInputError(f"invalid revision (--revision): got {revision!r}; allowed: a branch, tag or "
                                f"commit of the Hugging Face repo", field="revision")
    # a path typed again (text, or a Path of the platform's own class) is parsed once
    p = _path_of(model) if model.__class__ is str else (
        _path_of(str(model)) if model.__class__ is _PATH_CLASS else Path(model))
    try:
        found = os.stat(p)  # one stat for exists() and is_dir()
    except (OSError, ValueError):
        found = None
    if found is not None:
        if revision is not None:
            raise InvalidInputError(f"invalid revision (--revision): got {revision!r} for the local path {p}; "
                                    f"allowed: a revision only with a Hugging Face repo id", field="revision")
        if stat.S_ISDIR(found.st_mode):
            return ModelSource("folder", str(model), p, root_stat=found)
        return ModelSource("file", str(model), p.parent, config_path=p)
    text = os.fspath(model)
    if isinstance(text, str) and "/" in text and is_repo_id(text):
        return _open_hub(text, revision)
    raise InvalidInputError(f"invalid model: {text} does not exist; allowed: a model folder holding "
                            f"config.json, a config.json file, or a Hugging Face repo id (org/name)",
                            field="model")


@contextlib.contextmanager
def _quiet_hub():
    """huggingface_hub logs each retry as a warning; enginecfg reports the outcome in one line."""
    import logging  # only for a hub download

    log = logging.getLogger("huggingface_hub")
    before = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(before)


def _token() -> str | None:
    """``HF_TOKEN`` now; None lets huggingface_hub fall back to its saved token."""
    return os.environ.get("HF_TOKEN") or None


def _endpoint() -> str | None:
    """``HF_ENDPOINT`` now (huggingface_hub itself reads it once, at import)."""
    return (os.environ.get("HF_ENDPOINT") or "").rstrip("/") or None


def _repo_cache_folder(repo_id: str) -> Path:
    return hub_cache_dir() / ("models--" + repo_id.replace("/", "--"))


def _commit_of(path: str | Path) -> str | None:
    parts = Path(path).parts
    if "snapshots" in parts:
        i = len(parts) - 1 - parts[::-1].index("snapshots")
        if i + 1 < len(parts):
            return parts[i + 1]
    return None


def _open_hub(repo_id: str, revision: str | None) -> ModelSource:
    cache = hub_cache_dir()
    if hub_offline():
        return _open_offline(repo_id, revision, cache)
    return _open_online(repo_id, revision, cache)


def _open_offline(repo_id: str, revision: str | None, cache: Path) -> ModelSource:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = snapshot_download(repo_id, revision=revision, cache_dir=cache, local_files_only=True)
    except LocalEntryNotFoundError:
        if not _repo_cache_folder(repo_id).is_dir():
            raise InvalidInputError(
                f"invalid model: Hugging Face repo {repo_id!r} is not in the local cache ({cache}) and "
                f"HF_HUB_OFFLINE is set; allowed: a cached repo (unset HF_HUB_OFFLINE to download it, or "
                f"set HF_HOME / HF_HUB_CACHE to the cache that holds it)", field="model") from None
        raise InvalidInputError(
            f"invalid revision (--revision): {revision or 'main'!r} of Hugging Face repo {repo_id!r} is not in "
            f"the local cache ({cache}) and HF_HUB_OFFLINE is set; allowed: a revision cached there (unset "
            f"HF_HUB_OFFLINE to download it)", field="revision") from None
    return ModelSource("hub", repo_id, Path(folder), repo_id=repo_id, revision=revision,
                       commit=_commit_of(folder), offline=True)


def _open_online(repo_id: str, revision: str | None, cache: Path) -> ModelSource:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError, GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError, RemoteEntryNotFoundError,
        RepositoryNotFoundError, RevisionNotFoundError,
    )

    at = f" at revision {revision!r}" if revision else ""
    try:
        with _quiet_hub():
            first = hf_hub_download(repo_id, "config.json", revision=revision, cache_dir=cache,
                                    endpoint=_endpoint(), token=_token())
    except GatedRepoError:
        raise InvalidInputError(
            f"invalid model: Hugging Face repo {repo_id!r} is gated and this token has no access; allowed: "
            f"a repo you can read (set HF_TOKEN to a token that was granted access)", field="model") from None
    except RepositoryNotFoundError:
        raise InvalidInputError(
            f"invalid model: Hugging Face repo {repo_id!r} does not exist (or is private); allowed: an existing "
            f"repo id, or a local folder (set HF_TOKEN for a private repo)", field="model") from None
    except RevisionNotFoundError:
        raise InvalidInputError(
            f"invalid revision (--revision): {revision!r} is not a branch, tag or commit of Hugging Face repo "
            f"{repo_id!r}; allowed: an existing revision of the repo", field="revision") from None
    except RemoteEntryNotFoundError:
        raise InvalidInputError(
            f"invalid model: Hugging Face repo {repo_id!r}{at} has no config.json; allowed: a repo holding a "
            f"transformers config.json", field="model") from None
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError):
        raise InvalidInputError(
            f"invalid model: cannot reach the Hugging Face Hub ({_endpoint() or 'https://huggingface.co'}) for "
            f"{repo_id!r}{at} and it is not in the local cache ({cache}); allowed: a reachable hub, or a cached "
            f"repo with HF_HUB_OFFLINE=1 (HF_HOME / HF_HUB_CACHE naming the cache)", field="model") from None
    commit = _commit_of(first)
    pinned = commit if commit and _COMMIT.match(commit) else revision

    def fetch(name: str) -> Path | None:
        if name == "config.json":
            return Path(first)
        if name not in SMALL_FILES and not name.endswith("/config.json"):
            # only settings files are ever downloaded (weights: headers, by range, elsewhere)
            raise ValueError(f"not a settings file vLLM reads at config time: {name}")
        try:
            with _quiet_hub():
                return Path(hf_hub_download(repo_id, name, revision=pinned, cache_dir=cache,
                                            endpoint=_endpoint(), token=_token()))
        except (EntryNotFoundError, LocalEntryNotFoundError, RevisionNotFoundError, RepositoryNotFoundError):
            return None
        except (HfHubHTTPError, OSError):  # vLLM skips a file it cannot fetch, too
            return None

    return ModelSource("hub", repo_id, None, repo_id=repo_id, revision=revision, commit=commit,
                       offline=False, fetch=fetch)
