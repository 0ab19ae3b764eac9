"""``enginecfg ui`` on loopback, as a real process behind a real socket: several clients are
answered, every page correct, while a client that opened a connection and said nothing and one
that sends its request a byte at a time are both held open; the slow one is answered too once it
finishes.  Nothing here measures time (bench/ui_load.py does, with a baseline): the clients are
answered *before* the slow request is complete, which a server of one thread cannot do."""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import threading

import pytest

from enginecfg.store import AuditStore
from enginecfg.testing import emit_run

CLIENTS = 4
REQUESTS = 12  # per client
#: how long a client waits for an answer before it counts as none (a hang guard, not a measure)
GUARD_S = 60


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("ui-server")
    url = f"sqlite:///{root / 'audit.db'}"
    with AuditStore(url, actor="ci").attach() as store:
        ids = [emit_run(model="/models/alpha"), emit_run(model="/models/<b>beta</b>", fail="rejected")]
    store.close()
    env = dict(os.environ, ENGINECFG_PLUGINS="none")
    proc = subprocess.Popen([sys.executable, "-P", "-m", "enginecfg", "ui", "--db", url, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=root)
    line = proc.stdout.readline()
    assert " at http://127.0.0.1:" in line, line + proc.stderr.read()
    port = int(line.split(" at http://127.0.0.1:")[1].split("/")[0])
    yield port, ids
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill() if proc.poll() is None else None
    assert "Traceback" not in err, err


def _get(port: int, path: str, method: str = "GET") -> tuple[int, dict[str, str], str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=GUARD_S)
    try:
        conn.request(method, path, headers={"Host": f"127.0.0.1:{port}"})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode("utf-8")
    finally:
        conn.close()


class SlowClient:
    """A request sent a byte at a time, never finished until told to."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=GUARD_S)
        self.sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._trickle, daemon=True)
        self.thread.start()

    def _trickle(self) -> None:
        while not self.stop.wait(0.1):
            self.sock.sendall(b"a")

    def answered_yet(self) -> bool:
        self.sock.setblocking(False)
        try:
            return bool(self.sock.recv(1, socket.MSG_PEEK))
        except BlockingIOError:
            return False
        finally:
            self.sock.setblocking(True)

    def finish(self) -> bytes:
        self.stop.set()
        self.thread.join()
        self.sock.sendall(b"\r\nConnection: close\r\n\r\n")
        chunks = []
        while chunk := self.sock.recv(65536):
            chunks.append(chunk)
        self.sock.close()
        return b"".join(chunks)


def test_clients_are_answered_while_a_slow_and_an_idle_one_are_held(server):
    port, (good, rejected) = server
    idle = socket.create_connection(("127.0.0.1", port), timeout=GUARD_S)  # connects, says nothing
    slow = SlowClient(port)
    pages = [("/", 200, "alpha"), (f"/run/{good}", 200, good), (f"/run/{rejected}", 200, "rejected"),
             ("/history?field=cache_config.block_size", 200, "History"), ("/verify", 200, "verify"),
             ("/diff", 200, "diff"), ("/nowhere", 404, "no page /nowhere")]
    failures: list[str] = []
    answered: list[int] = []

    def client(k: int) -> None:
        for i in range(REQUESTS):
            path, want, holds = pages[(k + i) % len(pages)]
            try:
                status, headers, body = _get(port, path)
            except OSError as exc:  # no answer within the guard: this client gives up
                failures.append(f"{path}: {exc!r}")
                return
            if status != want or holds not in body or "default-src 'none'" not in headers.get(
                    "content-security-policy", "") or "<b>beta</b>" in body:
                failures.append(f"{path}: {status} {body[:200]!r}")
            answered.append(status)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert len(answered) == CLIENTS * REQUESTS
    # every one of them was answered while the slow request was still being sent
    assert slow.thread.is_alive() and not slow.answered_yet()
    reply = slow.finish()
    assert reply.startswith(b"HTTP/1.1 200 OK") and b"alpha" in reply
    idle.close()


def test_writes_are_refused_with_the_methods_allowed(server):
    port, _ = server
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
        status, headers, body = _get(port, "/", method)
        assert status == 405 and headers["allow"] == "GET, HEAD" and "read-only" in body, method
    status, headers, body = _get(port, "/", "HEAD")
    assert status == 200 and body == "" and int(headers["content-length"]) > 0


def _outward_address() -> str | None:
    """This machine's address on its default route (no packet is sent), or None."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.255", 1))
        address = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address


def test_it_listens_on_loopback_only_by_default(server):
    port, _ = server
    assert _get(port, "/")[0] == 200
    outward = _outward_address()
    if outward is None:
        pytest.skip("this machine has no address but loopback to try")
    with pytest.raises(OSError):
        socket.create_connection((outward, port), timeout=5).close()
