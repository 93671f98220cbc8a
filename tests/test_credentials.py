"""Issue 11: no credential reaches storage, a log, the embedded log, the processor snapshot or
an export, whatever kind it is and wherever it is planted (tests/credentials.py), through the
HTTP API on the embedded runtime. The cluster runtime's twin is
tests/integration/test_credentials_kafka.py."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from jobtrail.config import Settings
from jobtrail.http import RuntimeBackend, create_app
from jobtrail.learn import sample
from jobtrail.runtime.embedded import EmbeddedRuntime
from jobtrail.store import Store
from processors.topology import Topology
from schemas.topology import TopologyFile
from tests.credentials import Case, Request, corpus, leaked, report
from tests.trust_kit import free_port


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def _incident_story() -> list[dict[str, Any]]:
    base = {"cluster": "cluster-a", "project": "llm-pretrain", "job_id": "job-cred",
            "attempt": 1}
    return [{**base, "type": "job.started", "time": "2026-11-30T08:59:00Z",
             "attributes": {"nodes": ["node-001"], "gpus": 8}},
            {"type": "node.xid", "time": "2026-11-30T08:59:30Z", "cluster": "cluster-a",
             "scope": "gpu", "entity": "node-001/gpu0", "node": "node-001",
             "attributes": {"xid": 79}},
            {**base, "type": "job.worker_exited", "time": "2026-11-30T08:59:33Z",
             "node": "node-001", "attributes": {"rank": 0, "exit_code": 1}}]


async def plant(client: aiohttp.ClientSession, cases: list[Case], incident: str,
                ) -> tuple[list[Case], int]:
    """Send every case; returns the cases tried and how many could not be expressed."""
    tried: list[Case] = []
    skipped = 0
    for case in cases:
        built = case.placement.build(case.secret, f"{len(tried)}")
        if built is None:
            skipped += 1
            continue
        if isinstance(built, Request):
            resp = await client.post(built.path, data=built.body, headers=built.headers)
        else:
            resp = await client.post(f"/v1/incidents/{incident}/commands", json=built)
        assert resp.status < 500, (case.tag, resp.status, await resp.text())
        tried.append(case)
    return tried, skipped


def dump_tables(store: Store) -> str:
    tables = [r[0] for r in store.client.query(
        "SELECT name FROM system.tables WHERE database = {db:String}",
        parameters={"db": store.database}).result_rows]
    parts = []
    for table in tables:
        result = store.client.query(f"SELECT * FROM {store.database}.{table}")
        parts.append(json.dumps(result.result_rows, default=str))
    return "\n".join(parts)


def test_no_planted_credential_is_stored_logged_or_exported(store: Store, tmp_path: Path,
                                                             ) -> None:
    wiring = Topology.from_file(TopologyFile.model_validate(sample.topology()))
    home = tmp_path / "home"
    runtime = EmbeddedRuntime(Settings(home=home), topology=wiring, store=store)
    backend = RuntimeBackend(runtime)
    capture = _Capture()
    logging.getLogger().addHandler(capture)
    logging.getLogger().setLevel(logging.DEBUG)
    cases = corpus()
    outcome: dict[str, Any] = {}

    async def main() -> None:
        app_runner = web.AppRunner(create_app(Settings(home=home), backend))
        await app_runner.setup()
        port = free_port()
        await web.TCPSite(app_runner, "127.0.0.1", port).start()
        try:
            async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as client:
                story = "\n".join(json.dumps(r) for r in _incident_story())
                assert (await client.post("/v1/events", data=story)).status == 202
                await backend.call(runtime.drain)
                listed = await (await client.get("/v1/incidents")).json()
                incident = listed["incidents"][0]["incident_id"]
                outcome["tried"], outcome["skipped"] = await plant(client, cases, incident)
                await backend.call(runtime.drain)
                shown = await (await client.get(f"/v1/incidents/{incident}")).text()
                timeline = await (await client.get(
                    "/v1/jobs/job-cred/timeline?project=llm-pretrain")).text()
                outcome["exports"] = shown + timeline
        finally:
            await app_runner.cleanup()  # drains and saves the snapshot

    try:
        asyncio.run(main())
    finally:
        logging.getLogger().removeHandler(capture)
    blobs = [dump_tables(store), outcome["exports"], "\n".join(capture.lines),
             json.dumps(store.dead_letters(10_000), default=str)]
    for path in [*sorted((home / "log").glob("*.seg")), home / "state" / "pipeline.snap"]:
        blobs.append(path.read_bytes().decode("utf-8", "replace"))
    tried: list[Case] = outcome["tried"]
    leaks = leaked("\n".join(blobs), tried)
    summary = report(tried, leaks, outcome["skipped"])
    print(summary)
    assert len(tried) >= 13 * 27
    assert not leaks, summary + "\n" + "\n".join(c.tag for c in leaks)
    # every placement reached the system: stored, dead-lettered or applied
    assert store.count("events") > 13 * 10 and store.count("dead_letters") >= 13 * 4
