"""The dev ClickHouse server's HTTP side: the part of ClickHouse's HTTP interface that
clickhouse-connect speaks (auth, queries, inserts, formats, compression), over a chDB engine."""

from __future__ import annotations

import base64
import gzip
import hmac
import json
import logging
import os
import re
import tempfile
import threading
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
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
