"""Fault drills under load, against the real broker and the real engine behind HTTP: the
broker restarts, the store goes away for 30 s, the worker is SIGKILLed at random points, and
every topic the worker reads carries poison. Each drill ends with the same check: every event
stored once, the incident log the one an undisturbed process gives, and the figures printed
(`pytest -s -k drill`).
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from jobtrail.dev import clickhouse as dev_clickhouse
from jobtrail.dev import kafka
from tests.integration.kafka_helpers import produce_raw, wait_caught_up
from tests.integration.load_kit import (
    Group,
    assert_same_as_reference,
    dump,
    figures,
    records,
    reference,
    wait,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _check(drill: str, group: Group, tmp_path: Path, events: list[Any]) -> None:
    got = dump(group.clickhouse, group.database)
    want = reference(tmp_path, events)
    report = figures(drill, len(events), got, want)
    assert report["lost"] == report["duplicated"] == 0
    assert_same_as_reference(got, want, len(events))


def test_drill_broker_restart_under_load(clickhouse_server: str, tmp_path: Path) -> None:
    broker = kafka.start(tmp_path / "kafka")
    events = records(2500)
    group = Group(broker.bootstrap, clickhouse_server, tmp_path)
    group.produce(events[:5000])
    producer = threading.Thread(target=group.produce,
                                args=(events[5000:], 20, 0.3, 120.0))
    try:
        worker = group.worker("w")
        wait("a first commit", lambda: group.committed() > 0)
        producer.start()
        time.sleep(1.5)
        broker = kafka.restart(broker, down_s=5)  # clean stop, 5 s away, same ports and logs
        producer.join(timeout=180)
        assert not producer.is_alive()
        wait_caught_up(broker.bootstrap, group.app_id, group.topics(), worker, timeout_s=300)
        assert worker.alive()  # it rode the restart out, it did not crash and restart
    finally:
        list(group.stop())
        kafka.stop(broker)
    _check("broker restart (5 s down) under load", group, tmp_path, events)


def test_drill_store_unavailable_for_30_s(kafka_broker: str, tmp_path: Path) -> None:
    server = dev_clickhouse.start(tmp_path / "clickhouse")
    port = _free_port()
    events = records(2500)
    group = Group(kafka_broker, server.dsn, tmp_path)
    group.produce(events[:5000])
    producer = threading.Thread(target=group.produce, args=(events[5000:], 20, 1.0))
    probe = f"http://127.0.0.1:{port}"
    try:
        worker = group.worker("w", JOBTRAIL_WORKER_PORT=str(port),
                              JOBTRAIL_CLICKHOUSE_TIMEOUT_S="3")
        wait("a first commit", lambda: group.committed() > 0)
        producer.start()
        assert _get(f"{probe}/healthz")[0] == 200
        os.kill(server.pid, signal.SIGSTOP)  # the store stops answering: requests time out
        paused = time.monotonic()
        wait("the probe to see the store down", lambda: _get(f"{probe}/healthz")[0] == 503, 20)
        # the probe's own SELECT 1 may say so first; then the worker's writes say it retries
        wait("the worker to say it retries", lambda: "retrying without committing" in
             json.loads(_get(f"{probe}/healthz")[1])["checks"]["store"], 20)
        held = group.committed()
        time.sleep(max(0.0, paused + 28 - time.monotonic()))
        # nothing written, so nothing committed: no offset past unwritten data
        assert group.committed() == held
        metrics = _get(f"{probe}/metrics")[1]
        assert "jobtrail_store_up 0" in metrics
        assert worker.alive()
        time.sleep(max(0.0, paused + 30.5 - time.monotonic()))
        os.kill(server.pid, signal.SIGCONT)
        outage = time.monotonic() - paused
        wait("the probe to see the store back", lambda: _get(f"{probe}/healthz")[0] == 200, 60)
        producer.join(timeout=120)
        wait_caught_up(kafka_broker, group.app_id, group.topics(), worker, timeout_s=300)
        metrics = _get(f"{probe}/metrics")[1]
        retries = [line for line in metrics.splitlines()
                   if line.startswith("jobtrail_store_retries_total")]
        assert "jobtrail_store_up 1" in metrics and retries and int(retries[0].split()[-1]) > 0
        assert worker.alive() and outage >= 30
    finally:
        if producer.is_alive():
            producer.join(timeout=120)
        list(group.stop())
    try:
        _check("store unavailable 30 s under load", group, tmp_path, events)
    finally:
        dev_clickhouse.stop(server)


def test_drill_worker_sigkilled_at_random_points(kafka_broker: str, clickhouse_server: str,
                                                 tmp_path: Path) -> None:
    rng = random.Random(1605)  # seeded: the same kill points every run
    events = records(3000)
    group = Group(kafka_broker, clickhouse_server, tmp_path)
    group.produce(events[:3000])
    producer = threading.Thread(target=group.produce, args=(events[3000:], 40, 1.0))
    kills: list[int] = []
    try:
        worker = group.worker("w", snapshot_interval_s=3.0)
        producer.start()
        for _ in range(4):
            # once it is processing again, at a random point of the stream
            before = group.committed()
            wait("the worker to make progress", lambda: group.committed() > before, 120)
            time.sleep(rng.uniform(0.1, 2.5))
            kills.append(group.committed())
            worker.stop(signal.SIGKILL)
            worker = group.worker("w", snapshot_interval_s=3.0)
        producer.join(timeout=180)
        wait_caught_up(kafka_broker, group.app_id, group.topics(), worker, timeout_s=300)
    finally:
        if producer.is_alive():
            producer.join(timeout=120)
        list(group.stop())
    assert len(kills) == 4 and 0 < kills[0] < kills[-1]
    _check(f"worker SIGKILLed 4 times (committed at the kills: {kills})", group, tmp_path,
           events)


def test_drill_poison_in_every_topic(kafka_broker: str, clickhouse_server: str,
                                     tmp_path: Path) -> None:
    """Records no stage can read, on every topic the worker consumes and every partition in
    use: each is a dead letter with its reason, and what follows it is processed."""
    from jobtrail.runtime.kafka_io import ensure_topics

    events = records(500)
    group = Group(kafka_broker, clickhouse_server, tmp_path)
    import asyncio

    asyncio.run(ensure_topics(group.settings))
    topic = group.settings.topic
    clusters = sorted({e.cluster for e in events})
    deep = b'{"type": "job.step", "attributes": ' + b'{"a": ' * 40 + b"1" + b"}" * 41
    poison_events = [b"\x00\x01 not json", b'{"type": "no.such.type", "cluster": "c0"}',
                     b"[1, 2", deep, b'{"type": "job.step", "time": "soon"}']
    group.produce(events[:1500])
    for cluster in clusters:  # onto every partition that carries a cluster
        produce_raw(kafka_broker, topic("events"), poison_events, key=cluster.encode())
    produce_raw(kafka_broker, topic("raw"), [b"whatever"], key=b"no-such-adapter")
    produce_raw(kafka_broker, topic("raw"), [b"{{{ not: yaml"], key=b"kubernetes")
    produce_raw(kafka_broker, topic("incident-commands"),
                [b"not a command", json.dumps({
                    "command_id": "poison-1", "incident_id": "inc-none", "command": "ack",
                    "time": "2026-11-30T09:00:00Z",
                    "actor": {"kind": "person", "name": "alice"}}).encode()],
                key=b"c0")
    produce_raw(kafka_broker, topic("dlq"), [b"a foreign record on our dead-letter topic"])
    group.produce(events[1500:])  # behind the poison: must flow
    try:
        worker = group.worker("w")
        wait_caught_up(kafka_broker, group.app_id,
                       [topic(n) for n in ("events", "dlq", "raw", "incident-commands")],
                       worker, timeout_s=300)
        assert worker.alive()
    finally:
        list(group.stop())
    import clickhouse_connect

    client = clickhouse_connect.get_client(dsn=clickhouse_server, database=group.database)
    letters = client.query("SELECT stage, reason, event_ref FROM dead_letters FINAL").result_rows
    stages: dict[str, list[str]] = {}
    for stage, reason, _ in letters:
        stages.setdefault(stage, []).append(reason)
    reasons = json.dumps(stages)
    # every poison record is a dead letter saying why, none is silently dropped
    assert len(stages["process.decode"]) == len(poison_events) * len(clusters), reasons
    for why in ("not JSON", "NUL byte", "unknown event type 'no.such.type'",
                "nested deeper than 32 levels", "Field required"):
        assert sum(why in r for r in stages["process.decode"]) == len(clusters), why
    assert "no adapter 'no-such-adapter'" in stages["raw"][0]
    assert "neither JSON, JSON lines nor YAML" in stages["adapter.kubernetes"][0]
    assert len(stages.get("incident.command", [])) == 2, reasons
    assert "no such incident" in reasons
    assert stages.get("dlq.decode"), reasons
    _check("poison in every topic", group, tmp_path, events)
