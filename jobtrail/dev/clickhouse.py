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

import base64
import gzip
import hmac
import json
import logging
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

log = logging.getLogger("jobtrail.dev.clickhouse")

# request parameters that steer the transport, not the engine
_TRANSPORT = frozenset({
    "query", "database", "session_id", "session_timeout", "session_check", "query_id",
    "quota_key", "compress", "decompress", "wait_end_of_query", "client_protocol_version",
    "role", "send_progress_in_http_headers", "http_headers_progress_interval_ms",
    "enable_http_compression", "default_format", "user", "password", "buffer_size",
})
_TRAILING_FORMAT = re.compile(r"\bFORMAT\s+(\w+)\s*;?\s*$", re.IGNORECASE)
_INSERT = re.compile(r"^\s*INSERT\s+INTO\s+(?P<target>.+?)\s+FORMAT\s+(?P<fmt>\w+)[ \t]*(?:\r?\n)?",
                     re.IGNORECASE | re.DOTALL)
_SETTING = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CODE = re.compile(r"Code: (\d+)")


class ServerError(RuntimeError):
    pass


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _decompress(data: bytes, encoding: str) -> bytes:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return data
    if encoding == "lz4":
        import lz4.frame  # type: ignore[import-untyped]

        return bytes(lz4.frame.decompress(data))
    if encoding == "zstd":
        from backports import zstd

        return bytes(zstd.decompress(data))
    if encoding == "gzip":
        return gzip.decompress(data)
    if encoding == "deflate":
        return zlib.decompress(data)
    raise ValueError(f"unsupported Content-Encoding {encoding!r}")


class Engine:
    """One chDB engine; a connection handle per serving thread, each remembering the settings
    it carries so a request changes only what differs from the previous one on that handle."""

    def __init__(self, path: Path) -> None:
        import chdb

        self._connect = chdb.connect
        self.path = str(path.resolve())
        self._local = threading.local()
        self._lock = threading.Lock()
        with self._lock:
            self._handle()  # fail at start, not at the first request

    def _handle(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect(self.path)
            self._local.conn = conn
            self._local.settings = {}
            self._local.database = ""
        return conn

    def run(self, sql: str, fmt: str, *, database: str, settings: Mapping[str, str],
            params: Mapping[str, str]) -> Any:
        conn = self._handle()
        if database and database != self._local.database:
            if not _SETTING.match(database):
                raise ValueError(f"database name {database!r} is not a plain identifier")
            conn.query(f"USE {database}", "TabSeparated")
            self._local.database = database
        applied: dict[str, str] = self._local.settings
        for name in [n for n in applied if n not in settings]:
            conn.query(f"SET {name} = DEFAULT", "TabSeparated")
            del applied[name]
        for name, value in settings.items():
            if applied.get(name) != value:
                if not _SETTING.match(name):
                    raise ValueError(f"setting name {name!r} is not an identifier")
                conn.query(f"SET {name} = {_quote(value)}", "TabSeparated")
                applied[name] = value
        return conn.query(sql, fmt, params=dict(params))


@dataclass
class _Request:
    sql: str
    fmt: str
    database: str
    settings: dict[str, str]
    params: dict[str, str]
    data: bytes | None  # an insert's rows


def _form(content_type: str, body: bytes) -> dict[str, str]:
    """The fields of a multipart/form-data body (clickhouse-connect sends long bindings so)."""
    from email.parser import BytesParser
    from email.policy import HTTP

    message = BytesParser(policy=HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    fields: dict[str, str] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if isinstance(name, str):
            payload = part.get_payload(decode=True)
            fields[name] = payload.decode() if isinstance(payload, bytes) else ""
    return fields


def _parse(raw_query: str, body: bytes, content_type: str = "") -> _Request:
    fields = dict(parse_qsl(raw_query, keep_blank_values=True))
    if content_type.lower().startswith("multipart/form-data"):
        fields.update(_form(content_type, body))
        body = b""
    params = {k[6:]: v for k, v in fields.items() if k.startswith("param_")}
    settings = {k: v for k, v in fields.items()
                if k not in _TRANSPORT and not k.startswith("param_")}
    database = fields.get("database", "")
    query = fields.get("query")
    if query is not None:
        head, data = query, body
    else:
        head, data = body.decode("utf-8", "replace"), b""
        insert = _INSERT.match(head)
        if insert is not None:  # "INSERT ... FORMAT X\n<rows>" in one body
            cut = len(head[:insert.end()].encode())
            head, data = head[:insert.end()], body[cut:]
    insert = _INSERT.match(head)
    if insert is not None:
        return _Request(insert.group("target"), insert.group("fmt"), database, settings,
                        params, data)
    if query is not None and body:
        head = f"{head}\n{body.decode('utf-8', 'replace')}"
    fmt = "TabSeparated"
    found = _TRAILING_FORMAT.search(head)
    if found is not None:
        fmt, head = found.group(1), head[:found.start()]
    return _Request(head, fmt, database, settings, params, None)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        log.debug(format, *args)

    def do_GET(self) -> None:
        split = urlsplit(self.path)
        if split.path == "/ping" or (split.path == "/" and not split.query):
            self._send(200, b"Ok.\n", {})
            return
        self._serve()

    def _authenticated(self, query: str) -> bool:
        user, password = self.headers.get("X-ClickHouse-User"), \
            self.headers.get("X-ClickHouse-Key")
        scheme, _, value = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() == "basic":
            try:
                user, _, password = base64.b64decode(value.strip()).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                return False
        if user is None:
            fields = dict(parse_qsl(query, keep_blank_values=True))
            user, password = fields.get("user"), fields.get("password")
        expected_user, expected = self.server.credentials
        return hmac.compare_digest((user or "").encode(), expected_user.encode()) and \
            hmac.compare_digest((password or "").encode(), expected.encode())

    def do_POST(self) -> None:
        self._serve()

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            body = b"".join(parts)
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        return _decompress(body, self.headers.get("Content-Encoding", ""))

    def _serve(self) -> None:
        split = urlsplit(self.path)
        if not self._authenticated(split.query):
            if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.close_connection = True
            self._send(403, b"Code: 516. DB::Exception: jobtrail: Authentication failed: "
                            b"password is incorrect, or there is no user with such name. "
                            b"(AUTHENTICATION_FAILED)\n",
                       {"X-ClickHouse-Exception-Code": "516"})
            return
        try:
            request = _parse(split.query, self._body(), self.headers.get("Content-Type", ""))
            result = self.server.execute(request)
        except Exception as exc:  # the client reads ClickHouse's own error text
            text = str(exc)
            start = text.find("Code: ")
            text = text[start:] if start >= 0 else f"Code: 1000. DB::Exception: {text}"
            code = _CODE.search(text)
            self._send(500, (text.strip() + "\n").encode(),
                       {"X-ClickHouse-Exception-Code": code.group(1) if code else "1000"})
            return
        self._send(200, result[0], result[1])

    def _send(self, status: int, body: bytes, headers: Mapping[str, str]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-ClickHouse-Server-Display-Name", "jobtrail-dev-clickhouse")
        self.send_header("X-ClickHouse-Timezone", "UTC")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, engine: Engine, credentials: tuple[str, str]) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.engine = engine
        self.credentials = credentials

    def execute(self, request: _Request) -> tuple[bytes, dict[str, str]]:
        engine = self.engine
        if request.data is None:
            result = engine.run(request.sql, request.fmt, database=request.database,
                                settings=request.settings, params=request.params)
            summary = {"read_rows": str(result.rows_read()),
                       "read_bytes": str(result.bytes_read())}
            return result.bytes(), {"X-ClickHouse-Summary": json.dumps(summary),
                                    "X-ClickHouse-Format": request.fmt}
        # the engine reads an insert's rows from a file (clickhouse-local's INFILE)
        with tempfile.NamedTemporaryFile(prefix="jt-insert-", suffix=".rows",
                                         dir=os.environ.get("JOBTRAIL_DEV_TMP")) as tmp:
            tmp.write(request.data)
            tmp.flush()
            clause = ""
            settings = dict(request.settings)
            inline = {k: settings.pop(k) for k in list(settings) if k.startswith("insert_")
                      or k.startswith("input_format_") or k == "date_time_input_format"}
            if inline:
                clause = " SETTINGS " + ", ".join(f"{k} = {_quote(v)}" for k, v in inline.items()
                                                 if _SETTING.match(k))
            sql = (f"INSERT INTO {request.sql} FROM INFILE {_quote(tmp.name)}{clause} "
                   f"FORMAT {request.fmt}")
            result = engine.run(sql, "TabSeparated", database=request.database,
                                settings=settings, params=request.params)
        summary = {"written_rows": str(result.rows_read()),
                   "written_bytes": str(result.bytes_read())}
        return b"", {"X-ClickHouse-Summary": json.dumps(summary)}


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
