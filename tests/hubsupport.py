"""Hugging Face hub stand-ins for tests: a cache laid out as huggingface_hub writes it, and a
tiny local HTTP hub (``HF_ENDPOINT``) that answers as huggingface.co does.

No network: the cache is files in a temp folder, the hub a thread on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def safetensors_bytes(tensors: dict[str, tuple[str, list[int]]], metadata: dict[str, str] | None = None,
                      *, payload: bool = True) -> bytes:
    """A safetensors file whose tensors are zeros (tiny shapes) or, ``payload=False``, absent.

    ``tensors``: name -> (safetensors dtype code, shape).
    """
    sizes = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
             "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "C64": 8, "U16": 2, "U32": 4, "U64": 8}
    header: dict[str, Any] = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    for name, (code, shape) in tensors.items():
        n = sizes[code]
        for s in shape:
            n *= s
        header[name] = {"dtype": code, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    body = json.dumps(header, separators=(",", ":")).encode()
    body += b" " * (-len(body) % 8)
    return struct.pack("<Q", len(body)) + body + (b"\0" * offset if payload else b"")


def write_cache_repo(cache: Path, repo_id: str, files: dict[str, bytes], *, commit: str | None = None,
                     refs: tuple[str, ...] = ("main",)) -> str:
    """Write *files* as one commit of *repo_id* into the hub cache at *cache*; returns the commit.

    Layout as huggingface_hub writes it: ``models--org--name/blobs/<hash>``,
    ``snapshots/<commit>/<file>`` as relative symlinks to the blobs, ``refs/<ref>`` = commit.
    """
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    if commit is None:
        h = hashlib.sha1()
        for name in sorted(files):
            h.update(name.encode() + b"\0" + files[name])
        commit = h.hexdigest()
    snap = repo / "snapshots" / commit
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snap / name
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    for ref in refs:
        (repo / "refs" / ref).write_text(commit)
    return commit


class LocalHub:
    """An HTTP hub on 127.0.0.1 serving ``{repo_id: {"commit": sha, "files": {name: bytes},
    "refs": (names...)}}`` through ``/{repo}/resolve/{revision}/{file}`` (HEAD and ranged GET).

    Unknown repos answer 404 ``RepoNotFound``, unknown revisions ``RevisionNotFound``, missing
    files ``EntryNotFound``: the ``X-Error-Code`` headers huggingface_hub maps to its errors.
    ``requests`` logs (method, path, range header) for the tests to inspect.  With
    ``listing=True`` the hub also answers the repo's file list
    (``/api/models/{repo}/tree/{revision}``, what ``list_repo_files`` asks); without it, that
    request is answered 404, as by a hub that cannot list.
    """

    def __init__(self, repos: dict[str, dict[str, Any]], *, listing: bool = False):
        self.repos = repos
        self.listing = listing
        self.requests: list[tuple[str, str, str | None]] = []
        self.authorizations: list[str | None] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _answer(self, head: bool) -> None:
                hub.requests.append((self.command, self.path, self.headers.get("Range")))
                hub.authorizations.append(self.headers.get("Authorization"))
                path = self.path.split("?", 1)[0].lstrip("/")
                parts = path.split("/")
                if hub.listing and not head and parts[:2] == ["api", "models"] and len(parts) >= 6 \
                        and parts[4] == "tree":
                    return self._tree("/".join(parts[2:4]), parts[5])
                if len(parts) < 5 or parts[2] != "resolve":
                    return self._error(404, "RepoNotFound")
                repo_id, rev, name = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
                repo = hub.repos.get(repo_id)
                if repo is None:
                    return self._error(404, "RepoNotFound")
                if rev != repo["commit"] and rev not in repo.get("refs", ("main",)):
                    return self._error(404, "RevisionNotFound")
                data = repo["files"].get(name)
                if data is None:
                    return self._error(404, "EntryNotFound")
                start, end = 0, len(data) - 1
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes="):
                    a, _, b = rng[6:].partition("-")
                    start, end = int(a or 0), min(int(b) if b else len(data) - 1, len(data) - 1)
                chunk = data[start:end + 1]
                self.send_response(206 if rng else 200)
                self.send_header("X-Repo-Commit", repo["commit"])
                self.send_header("ETag", '"' + hashlib.sha256(data).hexdigest() + '"')
                self.send_header("Content-Length", str(len(chunk)))
                self.end_headers()
                if not head:
                    self.wfile.write(chunk)

            def _tree(self, repo_id: str, rev: str) -> None:
                repo = hub.repos.get(repo_id)
                if repo is None:
                    return self._error(404, "RepoNotFound")
                if rev != repo["commit"] and rev not in repo.get("refs", ("main",)):
                    return self._error(404, "RevisionNotFound")
                body = json.dumps([{"type": "file", "path": name, "size": len(data),
                                    "oid": hashlib.sha1(data).hexdigest()}
                                   for name, data in sorted(repo["files"].items())]).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _error(self, code: int, error_code: str) -> None:
                self.send_response(code)
                self.send_header("X-Error-Code", error_code)
                self.send_header("X-Error-Message", error_code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_HEAD(self):
                self._answer(head=True)

            def do_GET(self):
                self._answer(head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "LocalHub":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def bytes_sent_for(self, name: str) -> list[str | None]:
        """The Range headers of the GETs of *name* (None: the whole file was asked for)."""
        return [rng for method, path, rng in self.requests if method == "GET" and path.endswith("/" + name)]
