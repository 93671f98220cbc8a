"""Issue 11 in cluster mode: the credential corpus through the HTTP API on the Kafka runtime
and the Faust worker, plus records that bypass ingest (produced straight onto
`jobtrail.events`, `jobtrail.incident-commands` and `jobtrail.dlq`). Scanned: every table, every
topic jobtrail writes, the worker's log and its snapshot."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from jobtrail.config import Settings
from jobtrail.http import RuntimeBackend, create_app
from jobtrail.runtime.kafka import KafkaRuntime
from tests.credentials import Case, Request, corpus, leaked, report
from tests.integration.kafka_helpers import (
    Worker,
    consume_all,
    dump_tables,
    produce_raw,
    wait_caught_up,
)
from tests.test_credentials import _incident_story
from tests.trust_kit import free_port

pytestmark = pytest.mark.kafka


async def _post_all(url: str, cases: list[Case]) -> tuple[list[Case], int]:
    tried: list[Case] = []
    skipped = 0
    async with aiohttp.ClientSession(url) as client:
        story = "\n".join(json.dumps(r) for r in _incident_story())
        assert (await client.post("/v1/events", data=story)).status == 202
        for i, case in enumerate(cases):
            built = case.placement.build(case.secret, f"k{i}")
            if not isinstance(built, Request):
                skipped += built is None
                continue
            resp = await client.post(built.path, data=built.body, headers=built.headers)
            assert resp.status < 500, (case.tag, resp.status, await resp.text())
            tried.append(case)
    return tried, skipped


def _serve_and_post(settings: Settings, cases: list[Case]) -> tuple[list[Case], int]:
    async def main() -> tuple[list[Case], int]:
        runner = web.AppRunner(create_app(settings, RuntimeBackend(KafkaRuntime(settings))))
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            return await _post_all(f"http://127.0.0.1:{port}", cases)
        finally:
            await runner.cleanup()

    return asyncio.run(main())


def _opened(bootstrap: str, topic: str) -> str:
    for _, _, value in consume_all(bootstrap, [topic])[topic]:
        for line in value.splitlines():  # an incident's events of one batch, in seq order
            event = json.loads(line)
            if event["kind"] == "opened":
                return str(event["incident_id"])
    raise AssertionError("no incident opened")


def test_no_planted_credential_survives_the_cluster_runtime(kafka_broker: str, chdb_path: Path,
                                                            tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    prefix, app_id = f"k{tag}.", f"cred-{tag}"
    # the API's store in this process: the session's chDB engine path, a database of its own
    # (chDB binds one path per process; another path here would fail every later test)
    settings = Settings(kafka=kafka_broker, topic_prefix=prefix, home=tmp_path / "api",
                        clickhouse_dsn=f"chdb://{chdb_path}", database=f"api_{tag}")
    cases = corpus()
    tried, skipped = _serve_and_post(settings, cases)
    home = tmp_path / "worker"
    worker = Worker(kafka_broker, home, prefix, app_id)
    worker.start()
    topics = {n: settings.topic(n) for n in ("events", "dlq", "incident-events",
                                              "incident-commands")}
    try:
        wait_caught_up(kafka_broker, app_id, [topics["events"], topics["dlq"]], worker)
        incident = _opened(kafka_broker, topics["incident-events"])
        # bypassing ingest: commands and events straight onto the topics, and garbage
        commands, raw_events, foreign = [], [], []
        for i, case in enumerate(cases):
            built = case.placement.build(case.secret, f"b{i}")
            if isinstance(built, dict):
                commands.append(json.dumps({
                    "command_id": built["command_id"], "incident_id": incident,
                    "command": built["command"], "time": datetime.now(UTC).isoformat(),
                    "actor": {"kind": "person", "name": built.get("by", "alice")},
                    "data": built["data"]}).encode())
                tried.append(case)
            elif case.placement.name in ("event.message", "event.attribute", "event.entity",
                                         "dead.broken-json") and isinstance(built, Request):
                raw_events.append(built.body)
                foreign.append(b"not a dead letter " + case.secret.value.encode())
        produce_raw(kafka_broker, topics["incident-commands"], commands,
                    key=incident.encode())
        produce_raw(kafka_broker, topics["events"], raw_events, key=b"cluster-a")
        produce_raw(kafka_broker, topics["dlq"], foreign, key=b"x")
        wait_caught_up(kafka_broker, app_id,
                       [topics["events"], topics["dlq"], topics["incident-commands"]], worker)
    finally:
        worker.stop()
    ours = {topics["incident-commands"]}  # only what the test itself produced
    messages = consume_all(kafka_broker, list(topics.values()))
    direct = set(raw_events) | set(foreign)
    blobs = [dump_tables(home), worker.log.read_text(errors="replace")]
    for topic, rows in messages.items():
        if topic in ours:
            continue
        blobs.extend(value.decode("utf-8", "replace") for _, _, value in rows
                     if value not in direct)
    for snap in home.rglob("*.snap"):
        blobs.append(snap.read_bytes().decode("utf-8", "replace"))
    leaks = leaked("\n".join(blobs), tried)
    summary = report(tried, leaks, skipped)
    print(summary)
    assert len(tried) >= 13 * 27
    assert not leaks, summary + "\n" + "\n".join(c.tag for c in leaks)
