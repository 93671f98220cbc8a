"""The worker rides out a broker that is away (a restart, a leader moving) while it sends a
batch's incident events or dead letters: a retriable Kafka error waits and retries, within a
budget; anything else, or past the budget, is raised (the worker then exits without acking).
A drill restarted the broker mid-send and the worker exited: `Unable to bootstrap`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from aiokafka.errors import KafkaConnectionError

from jobtrail.runtime.kafka_io import until_sent


def _sender(failures: list[Exception]) -> tuple[list[int], Callable[[], Awaitable[None]]]:
    calls: list[int] = []

    async def send() -> None:
        calls.append(len(calls))
        if failures:
            raise failures.pop(0)

    return calls, send


def test_a_broker_away_is_waited_for() -> None:
    calls, send = _sender([KafkaConnectionError("Unable to bootstrap"),
                           KafkaConnectionError("Unable to bootstrap")])
    asyncio.run(until_sent("incident events", send))
    assert calls == [0, 1, 2]


def test_an_error_that_is_not_the_broker_s_absence_is_raised_at_once() -> None:
    calls, send = _sender([ValueError("a bug"), KafkaConnectionError("x")])
    with pytest.raises(ValueError):
        asyncio.run(until_sent("incident events", send))
    assert calls == [0]


def test_past_the_budget_the_error_is_raised() -> None:
    calls, send = _sender([KafkaConnectionError("down")] * 5)
    with pytest.raises(KafkaConnectionError):
        asyncio.run(until_sent("dead letters", send, budget_s=0.1))
    assert calls == [0]  # the first wait (0.5 s) would pass the budget: raised, not slept
