"""Two clusters with the same node names on one partition, through the Kafka worker: the
records and the checks of `tests/runtime/test_many_clusters.py` (the embedded runtime)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ingest.canonical import decode
from jobtrail.config import Settings
from jobtrail.runtime.kafka_io import publish_sync
from tests.integration.kafka_helpers import Worker, run_to_end
from tests.runtime.test_many_clusters import jsonl

pytestmark = pytest.mark.kafka

CHECK = """
import sys
from jobtrail.store import Store
from tests.runtime.test_many_clusters import check
check(Store.connect(f"chdb://{sys.argv[1]}/chdb"))
"""


def test_two_clusters_with_the_same_node_names_stay_apart_on_one_partition(
        kafka_broker: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    prefix, app_id = f"mc{tag}.", f"many-clusters-{tag}"
    settings = Settings(kafka=kafka_broker, topic_prefix=prefix, wire_batch=3, partitions=1)
    publish_sync(settings, decode(jsonl(), producer="test", observed_at=datetime.now(UTC)))
    worker = Worker(kafka_broker, tmp_path / "worker", prefix, app_id, batch_size=5)
    worker.env["JOBTRAIL_PARTITIONS"] = "1"
    assert run_to_end(worker, kafka_broker, app_id, [settings.topic("events")]) == 0
    # the worker's chDB home is read in a child: one engine path per process
    out = subprocess.run([sys.executable, "-c", CHECK, str(worker.home)], capture_output=True,
                         text=True, timeout=300, check=False, cwd=Path(__file__).parents[2])
    assert out.returncode == 0, out.stderr[-3000:]
