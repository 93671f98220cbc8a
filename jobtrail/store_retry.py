"""How the store meets ClickHouse trouble: transient failures are retried with capped
exponential backoff, refusals are not."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from clickhouse_connect.driver.exceptions import ClickHouseError

from jobtrail.telemetry import emit

T = TypeVar("T")


class StoreUnavailable(RuntimeError):
    """ClickHouse did not acknowledge a write within the retry budget."""


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 8
    first_delay_s: float = 0.2
    max_delay_s: float = 10.0

    def run(self, action: Callable[[], T], *, sleep: Callable[[float], None] = time.sleep) -> T:
        """Run `action`, retrying ClickHouse/connection errors with capped exponential backoff."""
        delay = self.first_delay_s
        for attempt in range(1, self.attempts + 1):
            try:
                return action()
            except (ClickHouseError, OSError) as exc:
                if attempt == self.attempts:
                    raise StoreUnavailable(f"gave up after {attempt} tries: {exc}") from exc
                emit("store_retries")
                sleep(delay)
                delay = min(delay * 2, self.max_delay_s)
        raise AssertionError("unreachable")
