"""Scale-out on the real broker and a shared ClickHouse server: several partitions, several
workers, partitions moving between them under load.

The reference is the embedded runtime on the same records (one process, one pipeline). Each
cluster's load has its own entities, so clusters never interact, and keying by cluster must
give exactly the reference: the same timeline rows, no duplicate, the same incident log event
by event, whatever the partition count, the assignment and the crashes.
"""

from __future__ import annotations

import json
import re
import signal
import threading
from pathlib import Path

import pytest

from tests.integration.kafka_helpers import consume_all, lag, wait_caught_up
from tests.integration.load_kit import (
    CLUSTERS,
    Group,
    assert_same_as_reference,
    dump,
    records,
    reference,
    wait,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_keyed_by_cluster_several_partitions_give_the_one_process_result(
        kafka_broker: str, clickhouse_server: str, tmp_path: Path) -> None:
    events = records(2500)
    group = Group(kafka_broker, clickhouse_server, tmp_path)
    group.produce(events)
    # every cluster's events are on one partition, and the clusters spread over several
    by_cluster: dict[str, set[int]] = {}
    for partition, _, value in consume_all(kafka_broker, [group.settings.topic("events")])[
            group.settings.topic("events")]:
        for line in value.splitlines():
            by_cluster.setdefault(json.loads(line)["cluster"], set()).add(partition)
    assert set(by_cluster) == set(CLUSTERS)
    assert all(len(parts) == 1 for parts in by_cluster.values())
    assert len(set().union(*by_cluster.values())) >= 2
    worker = group.worker("w1")
    try:
        wait_caught_up(kafka_broker, group.app_id, group.topics(), worker)
    finally:
        assert list(group.stop()) == [0]
    assert_same_as_reference(dump(clickhouse_server, group.database),
                              reference(tmp_path, events), len(events))


def test_a_worker_joining_and_one_killed_under_load_lose_and_double_nothing(
        kafka_broker: str, clickhouse_server: str, tmp_path: Path) -> None:
    events = records(4000)
    group = Group(kafka_broker, clickhouse_server, tmp_path)
    group.produce(events[:2000])
    producer = threading.Thread(target=group.produce, args=(events[2000:], 40, 0.4))
    # the first worker saves its state only when it hands partitions over: what it does
    # after that, the second worker must replay from Kafka when it dies
    first = group.worker("a", snapshot_interval_s=600)
    try:
        wait("the first worker to commit",
              lambda: lag(kafka_broker, group.app_id, group.topics())[0] > 0)
        producer.start()
        second = group.worker("b")  # joins under load: a rebalance hands partitions over
        wait("both workers in the group", lambda: group.members() == 2)
        wait("the second worker to take partitions",
              lambda: "partition" in second.log.read_text(errors="replace"))
        # by construction, not by timing: the first worker has committed records past the
        # state it saved at the handover, so its successor must replay them from Kafka
        wait("the first worker to commit past its saved state",
             lambda: group.committed_past_saved_state(first), timeout_s=300)
        first.stop(signal.SIGKILL)  # dies mid-stream: its partitions move after the timeout
        producer.join(timeout=120)
        assert not producer.is_alive()
        wait_caught_up(kafka_broker, group.app_id, group.topics(), second, timeout_s=300)
    finally:
        if producer.is_alive():
            producer.join(timeout=120)
        list(group.stop())
    took = second.log.read_text(errors="replace")
    # the joiner loaded the states the first worker saved at the handover, and when it died,
    # those states plus what it had committed since, replayed from Kafka
    assert re.search(r"partition \d: state at offset \d+; replayed [1-9]\d* records", took), took
    assert_same_as_reference(dump(clickhouse_server, group.database),
                              reference(tmp_path, events), len(events))
