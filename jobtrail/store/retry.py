"""How the store meets ClickHouse trouble: transient failures (the server unreachable, busy,
restarting, a replica without Keeper) are retried with capped exponential backoff until a
budget runs out; refusals (bad SQL, a value a column cannot hold) are raised at once, because
trying again cannot change the answer and would only wedge the caller for the budget."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from clickhouse_connect.driver.exceptions import (
    ClickHouseError,
    DataError,
    NotSupportedError,
    ProgrammingError,
)

from jobtrail.telemetry import emit, gauge

T = TypeVar("T")

TRANSIENT_CODES = frozenset({
    159,   # TIMEOUT_EXCEEDED
    164,   # READONLY: a replica that lost Keeper
    202,   # TOO_MANY_SIMULTANEOUS_QUERIES
    203,   # NO_FREE_CONNECTION
    209,   # SOCKET_TIMEOUT
    210,   # NETWORK_ERROR
    241,   # MEMORY_LIMIT_EXCEEDED
    242,   # TABLE_IS_READ_ONLY
    252,   # TOO_MANY_PARTS: inserts faster than merges, back off
    279,   # ALL_CONNECTION_TRIES_FAILED
    285,   # TOO_FEW_LIVE_REPLICAS
    319,   # UNKNOWN_STATUS_OF_INSERT
    425,   # SYSTEM_ERROR
    999,   # KEEPER_EXCEPTION
    1000,  # POCO_EXCEPTION: usually the network
})


@dataclass
class StoreStatus:
    """What this process last saw of ClickHouse (for probes; updated by every retried call)."""

    up: bool = True
    since: float = field(default_factory=time.time)
    """Wall time of the last change between up and down."""
    error: str = ""

    def mark(self, up: bool, error: str = "") -> None:
        if up != self.up:
            self.up, self.since = up, time.time()
        gauge("store_up", 1 if up else 0)
        if not up:
            self.error = error[:300]


STATUS = StoreStatus()


class StoreUnavailable(RuntimeError):
    """ClickHouse did not answer (or kept failing transiently) within the retry budget."""


class StoreRejected(RuntimeError):
    """ClickHouse refused the request itself; the same request will be refused again."""


def transient(exc: BaseException) -> bool:
    """Whether trying again may succeed: the transport failed, or ClickHouse said it is
    busy or degraded. A client-side mistake or a ClickHouse refusal is not transient."""
    if isinstance(exc, OSError):
        return True
    code = getattr(exc, "code", None)
    if code is not None:
        return int(code) in TRANSIENT_CODES
    return not isinstance(exc, ProgrammingError | DataError | NotSupportedError)


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 8
    first_delay_s: float = 0.2
    max_delay_s: float = 10.0
    budget_s: float = 0.0
    """When > 0, retry for this long (whatever the number of attempts)."""

    def run(self, action: Callable[[], T], *, sleep: Callable[[float], None] = time.sleep,
            clock: Callable[[], float] = time.monotonic) -> T:
        """Run `action`, retrying transient ClickHouse/connection errors with capped
        exponential backoff; raises StoreUnavailable past the budget, StoreRejected at once
        for a refusal."""
        delay = self.first_delay_s
        deadline = clock() + self.budget_s if self.budget_s > 0 else None
        attempt = 0
        while True:
            attempt += 1
            try:
                result = action()
            except (ClickHouseError, OSError) as exc:
                if not transient(exc):
                    STATUS.mark(True)  # it answered, with a refusal
                    raise StoreRejected(f"ClickHouse refused it: {exc}") from exc
                STATUS.mark(False, f"{type(exc).__name__}: {exc}")
                out_of_budget = clock() + delay > deadline if deadline is not None \
                    else attempt >= self.attempts
                if out_of_budget:
                    raise StoreUnavailable(f"gave up after {attempt} tries: {exc}") from exc
                emit("store_retries")
                sleep(delay)
                delay = min(delay * 2, self.max_delay_s)
                continue
            STATUS.mark(True)
            return result
