"""Readiness asks the store itself: `SELECT 1` on a client of its own with short timeouts,
off the processing thread, so a probe answers within a few seconds whatever the store does
(stopped: connection refused; paused or partitioned: a timeout) and whatever the processing
thread is busy with. `/readyz` (jobtrail.http.health) and the worker's `/healthz`
(jobtrail.runtime.worker_http) use it on every request.

Only a ClickHouse server is probed this way; the embedded engine lives in the process and its
client is not shared between threads, so for `chdb:` the runtime's own check stands.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import clickhouse_connect

TIMEOUT_S = 2
"""Connect and read timeout of one probe query (whole seconds: the client's unit)."""


class StoreProbe:
    def __init__(self, dsn: str, database: str, timeout_s: int = TIMEOUT_S) -> None:
        self.dsn = dsn
        self.database = database
        self.timeout_s = timeout_s
        self._client: Any = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-probe")
        self._running: asyncio.Future[str] | None = None
        self._since = 0.0

    @classmethod
    def of(cls, dsn: str, database: str) -> StoreProbe | None:
        """A probe of the server at `dsn`; None for the embedded engine."""
        return None if dsn.startswith("chdb:") else cls(dsn, database)

    def _ask(self) -> str:
        try:
            if self._client is None:
                self._client = clickhouse_connect.get_client(
                    dsn=self.dsn, database=self.database, connect_timeout=self.timeout_s,
                    send_receive_timeout=self.timeout_s, query_retries=0,
                    autogenerate_session_id=False)
            self._client.query("SELECT 1")
            return "ok"
        except Exception as exc:
            self._drop()
            said = _first_line(exc)
            password = urlsplit(self.dsn).password
            if password:  # the readiness answer is public: never the DSN's password
                said = said.replace(password, "***")
            return f"unavailable: {type(exc).__name__}: {said}"

    def _drop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()

    async def check(self) -> str:
        """"ok", or what is wrong, within the timeout and a second. Callers that ask while a
        probe is out share its answer; a probe that has not come back (a resolver that
        hangs) is reported as such instead of being joined by another."""
        running = self._running
        if running is not None and not running.done():
            waited = time.monotonic() - self._since
            if waited > self.timeout_s + 1:
                return f"unavailable: the store's last check has not answered in {waited:.0f} s"
            return await asyncio.shield(running)
        loop = asyncio.get_running_loop()
        self._since = time.monotonic()
        self._running = asyncio.ensure_future(loop.run_in_executor(self._thread, self._ask))
        try:
            return await asyncio.wait_for(asyncio.shield(self._running),
                                          timeout=self.timeout_s + 1)
        except TimeoutError:
            return f"unavailable: no answer in {self.timeout_s + 1} s"

    def close(self) -> None:
        self._thread.submit(self._drop)
        self._thread.shutdown(wait=False)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""
