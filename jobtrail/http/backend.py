"""The runtime behind the API, made async: every call to it runs on one executor thread
(chDB's client is not shared between threads; the embedded processors are single-threaded),
CPU-heavy decoding runs on another, so the event loop keeps answering `/livez` while a
100k-event batch is parsed or drained."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from aiohttp import web

from jobtrail.runtime import Runtime

log = logging.getLogger("jobtrail.http")

T = TypeVar("T")
HEALTH_EVERY_S = 5.0
STALE_AFTER_S = 30.0


class RuntimeBackend:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="runtime")
        self.parser = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parse")
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.health: dict[str, object] = {"store": "not checked yet"}
        self.health_at = 0.0
        self.started = False
        self.parsing = 0
        """Payloads on the parse thread now (one at most; a test watches it)."""

    @property
    def store(self) -> Any:
        return self.runtime.store

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, lambda: fn(*args, **kwargs))

    async def parse(self, fn: Callable[..., T], *args: Any, budget_s: float | None = None,
                    **kwargs: Any) -> T:
        """`fn` on the parse thread; past `budget_s` (from when it starts) a 413 while the
        thread finishes and its result is dropped (every pattern is linear and lines are
        capped, so that work is bounded by the body size)."""
        loop = asyncio.get_running_loop()
        started = asyncio.Event()

        def work() -> T:
            loop.call_soon_threadsafe(started.set)
            self.parsing += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self.parsing -= 1

        future = loop.run_in_executor(self.parser, work)
        if budget_s is None:
            return await future
        waiter = asyncio.ensure_future(started.wait())  # queued time is not parse time
        either: set[asyncio.Future[Any]] = {future, waiter}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout=budget_s)
        except TimeoutError:
            future.add_done_callback(lambda f: f.exception())  # read, never "never retrieved"
            raise web.HTTPRequestEntityTooLarge(
                max_size=0, actual_size=0,
                text=json.dumps({"error": f"the payload took longer than the {budget_s:g} s "
                                          "parse budget (JOBTRAIL_PARSE_BUDGET_S): nothing of "
                                          "it was accepted; send it in smaller parts"}),
                content_type="application/json") from None

    async def submit(self, records: list[Any]) -> None:
        """Durable, or 503: the log could not be written or the broker did not acknowledge,
        so nothing is claimed accepted (the client retries; ids make that safe)."""
        try:
            await self.call(self.runtime.submit, records)
        except Exception as exc:
            log.warning("submit failed: %s: %s", type(exc).__name__, exc)
            raise web.HTTPServiceUnavailable(
                text=json.dumps({"error": f"not accepted, retry: {type(exc).__name__}: {exc}"}),
                content_type="application/json", headers={"Retry-After": "5"}) from None
        self._wake.set()

    async def command(self, command: Any) -> Any:
        from processors.incidents.model import InvalidTransition

        try:
            return await self.call(self.runtime.command, command)
        except InvalidTransition:
            raise
        except Exception as exc:
            log.warning("command failed: %s: %s", type(exc).__name__, exc)
            raise web.HTTPServiceUnavailable(
                text=json.dumps({"error": f"not applied, retry: {type(exc).__name__}: {exc}"}),
                content_type="application/json", headers={"Retry-After": "5"}) from None

    def topology(self) -> Any:
        return self.runtime.topology()

    async def _drain_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=1.0)
            self._wake.clear()
            try:
                await self.call(self.runtime.drain)
            except Exception:  # keep serving; the log keeps the records for the next drain
                log.exception("drain failed; will retry")
                await asyncio.sleep(1.0)

    async def check(self) -> None:
        """Readiness, measured through the same thread the processors use."""
        self.health = await self.call(self.runtime.health)
        self.health_at = time.monotonic()

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(HEALTH_EVERY_S)
            try:
                await self.check()
            except Exception as exc:
                self.health = {"store": f"check failed: {type(exc).__name__}: {exc}"}

    def readiness(self) -> tuple[bool, dict[str, object]]:
        age = time.monotonic() - self.health_at if self.health_at else None
        checks = dict(self.health)
        ready = self.started and all(v == "ok" for k, v in checks.items()
                                     if k in ("store", "broker"))
        if age is not None and age > STALE_AFTER_S:
            ready = False
            checks["checked"] = f"{age:.0f} s ago: the processing thread is busy or stuck"
        return ready, checks

    async def start(self) -> None:
        await self.call(self.runtime.drain)
        await self.check()
        self.started = True
        self._tasks = [asyncio.create_task(self._drain_loop()),
                       asyncio.create_task(self._health_loop())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await self.call(self.runtime.close)
        self.executor.shutdown(wait=False)
        self.parser.shutdown(wait=False)
