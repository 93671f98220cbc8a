"""A worker refuses a store that is not the one its consumer group wrote to (a fresh `./var`,
another ClickHouse): replaying the committed records without writing would build a store
missing those attempts and infrastructure rows."""

from __future__ import annotations

import json
import subprocess
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ingest.canonical import decode
from jobtrail.config import Settings
from jobtrail.learn import sample
from jobtrail.runtime.kafka_io import publish_sync
from tests.integration.kafka_helpers import Worker, run_to_end, stats

pytestmark = pytest.mark.kafka
EXIT_PARTIAL_STORE = 78


def test_worker_refuses_a_store_without_what_the_group_committed(kafka_broker: str,
                                                                 tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    prefix, app_id = f"w{tag}.", f"worker-{tag}"
    settings = Settings(kafka=kafka_broker, topic_prefix=prefix)
    records = decode("\n".join(json.dumps(r) for r in sample.synthetic(500)),
                     producer="test", observed_at=datetime.now(UTC))
    publish_sync(settings, records)
    first = Worker(kafka_broker, tmp_path / "home-a", prefix, app_id)
    assert run_to_end(first, kafka_broker, app_id, [settings.topic("events")]) == 0
    assert stats(tmp_path / "home-a")["final"]["events"] == 500

    # the same group on an empty store: it stops and says what to do, storing nothing
    other = Worker(kafka_broker, tmp_path / "home-b", prefix, app_id)
    other.start()
    assert other.proc is not None
    try:
        code = other.proc.wait(timeout=240)
    except subprocess.TimeoutExpired:
        other.stop()
        raise AssertionError(f"the worker kept running: {other.log.read_text()[-3000:]}")
    log = other.log.read_text()
    assert code == EXIT_PARTIAL_STORE, log[-3000:]
    assert "not the store this group wrote to" in log and "JOBTRAIL_APP_ID" in log
    assert stats(tmp_path / "home-b")["final"]["events"] == 0

    # a new group rebuilds that store from the topic's beginning
    fresh = Worker(kafka_broker, tmp_path / "home-b", prefix, f"{app_id}-rebuild")
    assert run_to_end(fresh, kafka_broker, f"{app_id}-rebuild",
                      [settings.topic("events")]) == 0
    assert stats(tmp_path / "home-b")["final"]["events"] == 500
