"""A ClickHouse server for development, tests and benchmarks: the real engine (chDB) behind the
part of ClickHouse's HTTP interface that clickhouse-connect speaks, on 127.0.0.1.

Why it exists: chDB runs one engine per process, so several workers cannot share an embedded
store, and no ClickHouse server of a usable version installs on these machines (Debian's is
18.16, older than every type our DDL uses). Production runs a ClickHouse server (`deploy/`);
this process lets the multi-worker tests, the scaling benchmark and the fault drills run the
same HTTP client path against the same engine, and lets a drill pause or kill "the store" the
way a real server goes away.

What it serves: `GET /ping`; queries (the SQL in the body or in `query`, a trailing `FORMAT X`
picks the output format); inserts (`INSERT ... FORMAT X` in `query` or at the head of the
body, the data after it, chunked or not, `Content-Encoding` lz4/zstd/gzip/deflate); `param_*`
bindings; per-request settings; `database`. Answers carry `X-ClickHouse-Summary` and, on error,
`X-ClickHouse-Exception-Code` with ClickHouse's own message. Not served: sessions (temporary
tables, `SET` across requests), external data, progress headers.

Like a real server it wants a user and password on every request but `/ping` (HTTP basic
auth, `X-ClickHouse-User`/`X-ClickHouse-Key` or `user`/`password` parameters): one user,
`jobtrail`, with a password generated at each start, handed to the process in its
environment (never its command line) and to clients in the DSN (`Server.dsn`, kept in
`server.json`, mode 0600). Loopback is no boundary: anything on the host that can be made
to send a request (a webhook, a proxy) must not reach an open database.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobtrail.dev.clickhouse_http import Engine, ServerError, _Server

USER = "jobtrail"
_PASSWORD_ENV = "JOBTRAIL_DEV_CLICKHOUSE_PASSWORD"  # noqa: S105 (a variable name)


def serve(path: Path, port: int, password: str) -> None:
    """Serve until SIGTERM (blocks)."""
    if len(password) < 16:
        raise ServerError("the dev ClickHouse server needs a password of 16 characters or "
                          f"more (in {_PASSWORD_ENV})")
    path.mkdir(parents=True, exist_ok=True)
    server = _Server(port, Engine(path), (USER, password))

    def stop(*_: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"listening on 127.0.0.1:{port}", flush=True)
    server.serve_forever(poll_interval=0.2)
    server.server_close()


# --- the process, for tests, benchmarks and `jobtrail dev clickhouse` --------------------------


@dataclass(frozen=True)
class Server:
    pid: int
    port: int
    directory: Path
    password: str = field(default="", repr=False)

    @property
    def dsn(self) -> str:
        return f"http://{USER}:{self.password}@127.0.0.1:{self.port}"

    def to_json(self) -> str:
        return json.dumps({"pid": self.pid, "port": self.port, "directory": str(self.directory),
                           "password": self.password})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return s.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def start(directory: Path, *, port: int | None = None, timeout_s: float = 60.0) -> Server:
    """Start a server on the engine data under `directory` (kept across restarts)."""
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    port = port or _free_port()
    password = secrets.token_urlsafe(24)
    out = (directory / "server.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobtrail.dev.clickhouse", str(directory / "engine"), str(port)],
        stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        env={**os.environ, _PASSWORD_ENV: password})
    server = Server(proc.pid, port, directory, password)
    state = directory / "server.json"
    fd = os.open(state, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(server.to_json())
    os.chmod(state, 0o600)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerError(f"the ClickHouse dev server exited with {proc.returncode}; "
                              f"see {directory}/server.log")
        if _ready(port):
            return server
        time.sleep(0.2)
    stop(server)
    raise ServerError(f"the ClickHouse dev server was not ready in {timeout_s:.0f} s")


def load(directory: Path) -> Server | None:
    state = directory / "server.json"
    if not state.exists():
        return None
    data = json.loads(state.read_text())
    return Server(int(data["pid"]), int(data["port"]), Path(data["directory"]),
                  str(data.get("password") or ""))


def alive(server: Server) -> bool:
    try:
        os.kill(server.pid, 0)
    except ProcessLookupError:
        return False
    try:
        pid, _ = os.waitpid(server.pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return pid != server.pid


def stop(server: Server, timeout_s: float = 30.0, *, sig: int = signal.SIGTERM) -> None:
    """Stop it (SIGTERM, then SIGKILL after `timeout_s`); bounded either way."""
    if not alive(server):
        return
    os.kill(server.pid, signal.SIGCONT)  # a paused server cannot act on SIGTERM
    os.kill(server.pid, sig)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(server):
            return
        time.sleep(0.1)
    os.kill(server.pid, signal.SIGKILL)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    serve(Path(sys.argv[1]), int(sys.argv[2]), os.environ.pop(_PASSWORD_ENV, ""))
