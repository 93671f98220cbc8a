"""The HTTP API on a real loopback socket, embedded backend (chDB through the test store)."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from jobtrail.config import Settings
from jobtrail.http import RuntimeBackend, create_app
from jobtrail.learn import sample
from jobtrail.runtime.embedded import EmbeddedRuntime
from jobtrail.store import Store
from processors.topology import Topology
from schemas.topology import TopologyFile


def _Backend(store: Store, home: Path) -> RuntimeBackend:
    """The embedded runtime behind the API, on the per-test store (one chDB engine per
    process) and the sample cluster's wiring."""
    wiring = Topology.from_file(TopologyFile.model_validate(sample.topology()))
    return RuntimeBackend(EmbeddedRuntime(Settings(home=home), topology=wiring, store=store))


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(settings: Settings, backend: _Backend, scenario: Any) -> None:
    async def main() -> None:
        runner = web.AppRunner(create_app(settings, backend))
        await runner.setup()
        port = _port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as client:
                await asyncio.wait_for(scenario(client), timeout=60)
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_ingest_single_batch_and_lines_then_read_timeline(store: Store, tmp_path: Path) -> None:
    backend = _Backend(store, tmp_path)
    lines = sample.jsonl().splitlines()

    async def scenario(client: aiohttp.ClientSession) -> None:
        one = await client.post("/v1/events", data=lines[0])
        assert one.status == 202
        assert (await one.json()) == {"accepted": 1, "dead_lettered": 0, "rejected": []}
        batch = "[" + ",".join(lines[1:50]) + "]"
        resp = await client.post("/v1/events", data=batch)
        assert (await resp.json())["accepted"] == 49
        rest = await client.post("/v1/events", data="\n".join(lines[50:]))
        body = await rest.json()
        assert rest.status == 202 and body["dead_lettered"] == 1
        assert body["rejected"][0]["field"] == "attributes.step"
        bad = await client.post("/v1/events",
                                data='{"type": "job.step", "attributes": {"step": 1}}')
        assert bad.status == 422
        assert (await bad.json())["rejected"][0]["field"] == "job_id"
        tl = await client.get(f"/v1/jobs/{sample.JOB}/timeline",
                              params={"project": sample.PROJECT, "attempt": "2"})
        rows = (await tl.json())["rows"]
        assert rows and {r["attempt"] for r in rows} == {2}
        missing = await client.get(f"/v1/jobs/{sample.JOB}/timeline")
        assert missing.status == 400
        metrics = await (await client.get("/metrics")).text()
        assert "jobtrail_events_received_total" in metrics

    _serve(Settings(home=tmp_path), backend, scenario)
    assert store.count("events") == 167 - 1
    assert store.count("dead_letters") == 2


def test_tokens_bind_reads_to_their_projects(store: Store, tmp_path: Path) -> None:
    backend = _Backend(store, tmp_path)
    settings = Settings(home=tmp_path, api_tokens={"tok-a": (sample.PROJECT, "@infra"),
                                                   "tok-b": ("other",)})

    async def scenario(client: aiohttp.ClientSession) -> None:
        anonymous = await client.post("/v1/events", data=sample.jsonl())
        assert anonymous.status == 401
        ok = await client.post("/v1/events", data=sample.jsonl(),
                               headers={"Authorization": "Bearer tok-a"})
        assert ok.status == 202
        path = f"/v1/jobs/{sample.JOB}/timeline"
        params = {"project": sample.PROJECT}
        mine = await client.get(path, params=params, headers={"Authorization": "Bearer tok-a"})
        assert len((await mine.json())["rows"]) > 100
        theirs = await client.get(path, params=params,
                                  headers={"Authorization": "Bearer tok-b"})
        assert theirs.status == 404
        wrong = await client.get(path, params=params, headers={"Authorization": "Bearer nope"})
        assert wrong.status == 401

    _serve(settings, backend, scenario)


@pytest.mark.parametrize("payload", [b"", b"\x00\xff", b"[]", json.dumps([1, "x"]).encode()])
def test_garbage_bodies_are_dead_lettered_not_crashes(store: Store, tmp_path: Path,
                                                      payload: bytes) -> None:
    backend = _Backend(store, tmp_path)

    async def scenario(client: aiohttp.ClientSession) -> None:
        resp = await client.post("/v1/events", data=payload)
        assert resp.status == 422
        assert (await resp.json())["accepted"] == 0

    _serve(Settings(home=tmp_path), backend, scenario)
    assert store.count("dead_letters") >= 1


def test_membership_queries_over_http(store: Store, tmp_path: Path) -> None:
    backend = _Backend(store, tmp_path)
    auth = {"Authorization": "Bearer tok-a"}
    settings = Settings(home=tmp_path, api_tokens={"tok-a": (sample.PROJECT, "@infra")})

    async def scenario(client: aiohttp.ClientSession) -> None:
        assert (await client.post("/v1/events", data=sample.jsonl(), headers=auth)).status == 202
        at = "2026-11-30T08:30:00Z"
        under = await client.get("/v1/where", headers=auth, params={
            "switch": "leaf-05", "at": at, "project": sample.PROJECT})
        attempts = (await under.json())["attempts"]
        assert [(a["job_id"], a["attempt"]) for a in attempts] == [(sample.JOB, 1)]
        other = await client.get("/v1/where", headers=auth, params={
            "node": "node-041", "at": at, "project": "someone-else"})
        assert (await other.json())["attempts"] == []
        res = await client.get(f"/v1/jobs/{sample.JOB}/attempts/1", headers=auth,
                               params={"project": sample.PROJECT})
        body = await res.json()
        assert "node-041/mlx5_0 → leaf-05/p9" in body["links"]
        assert [c["step"] for c in body["checkpoints"]] == [500, 1000, 1500, 2000]
        hidden = await client.get(f"/v1/jobs/{sample.JOB}/attempts/1", headers=auth,
                                  params={"project": "someone-else"})
        assert hidden.status == 404
        ent = await client.get("/v1/entities/node-041/timeline", headers=auth,
                               params={"project": sample.PROJECT})
        assert "node.xid" in {r["type"] for r in (await ent.json())["rows"]}

    _serve(settings, backend, scenario)


def test_alertmanager_webhook_route(store: Store, tmp_path: Path) -> None:
    backend = _Backend(store, tmp_path)
    body = (Path(__file__).parent / "ingest/fixtures/alertmanager/"
            "ib_port_down_firing_and_resolved.json").read_bytes()

    async def scenario(client: aiohttp.ClientSession) -> None:
        resp = await client.post("/v1/ingest/alertmanager", data=body)
        assert resp.status == 202
        result = await resp.json()
        assert (result["accepted"], result["dead_lettered"]) == (2, 2)
        assert {r["field"] for r in result["rejected"]} == {"alerts[2].labels.alertname",
                                                            "alerts[3].labels.port"}
        assert (await client.post("/v1/ingest/nope", data=b"{}")).status == 404

    _serve(Settings(home=tmp_path), backend, scenario)
    assert store.count("events") == 2 and store.count("dead_letters") == 2


def test_cloudevents_routes_structured_batched_binary(store: Store, tmp_path: Path) -> None:
    backend = _Backend(store, tmp_path)
    fixtures = Path(__file__).parent / "ingest/fixtures/cloudevents"
    mapping = tmp_path / "ce.yaml"
    mapping.write_text("com.example.ufm.port.down:\n  type: network.port_down\n  scope: port\n"
                       "  entity: '{switch}/{port}'\n")

    async def scenario(client: aiohttp.ClientSession) -> None:
        structured = await client.post(
            "/v1/ingest/cloudevents", data=(fixtures / "structured.json").read_bytes(),
            headers={"Content-Type": "application/cloudevents+json"})
        assert (await structured.json())["accepted"] == 1
        batch = await (await client.post(
            "/v1/ingest/cloudevents", data=(fixtures / "batch.json").read_bytes(),
            headers={"Content-Type": "application/cloudevents-batch+json"})).json()
        # the mapping file turns the foreign type into an event; two stay rejected
        assert (batch["accepted"], batch["dead_lettered"]) == (3, 2)
        binary = await (await client.post(
            "/v1/ingest/cloudevents", data=b'{"project": "p", "job_id": "j", '
            b'"attributes": {"step": 7}}',
            headers={"ce-specversion": "1.0", "ce-id": "b1", "ce-source": "/t",
                     "ce-type": "job.step", "ce-time": "2026-11-30T08:00:00Z",
                     "Content-Type": "application/json"})).json()
        assert binary["accepted"] == 1
        bad = await client.post("/v1/ingest/cloudevents", data=b"{nope",
                                headers={"ce-specversion": "1.0",
                                         "Content-Type": "application/json"})
        assert bad.status == 400 and "data" in (await bad.json())["error"]

    _serve(Settings(home=tmp_path, cloudevents_mapping=str(mapping)), backend, scenario)
    assert store.count("events") == 5 and store.count("dead_letters") == 2


def test_a_bad_mapping_file_stops_the_server_at_start(tmp_path: Path) -> None:
    bad = tmp_path / "am.yaml"
    bad.write_text("- not a mapping\n")
    with pytest.raises(ValueError, match="keyed by alertname"):
        create_app(Settings(home=tmp_path, alert_mapping=str(bad)), object())


def test_incident_routes_are_bound_to_the_token_projects(store: Store, tmp_path: Path) -> None:
    from tests.processors.incident_kit import at, ev, started

    backend = _Backend(store, tmp_path)
    backend.runtime.submit([
        started("j", 1, at(0), ["node-001", "node-002"]),
        ev("node.xid", at(5), scope="gpu", entity="node-001/gpu0", node="node-001",
           attributes={"xid": 79}),
        ev("job.worker_exited", at(5, 3), job="j", attempt=1, node="node-001",
           attributes={"rank": 0, "exit_code": 1})])
    backend.runtime.drain()
    mine = {"Authorization": "Bearer tok-a"}
    theirs = {"Authorization": "Bearer tok-b"}

    async def scenario(client: aiohttp.ClientSession) -> None:
        listed = await (await client.get("/v1/incidents", headers=mine)).json()
        (inc,) = listed["incidents"]
        assert (inc["class"], inc["owner"], inc["impacted_jobs"]) == ("gpu_hardware",
                                                                      "hardware-ops", 1)
        assert (await (await client.get("/v1/incidents", headers=theirs)).json()) == {
            "incidents": []}
        url = f"/v1/incidents/{inc['incident_id']}"
        assert (await client.get(url, headers=theirs)).status == 404
        assert (await client.get(url)).status == 401
        shown = await (await client.get(url, headers=mine)).json()
        assert shown["jobs"][0]["job_id"] == "j" and shown["log"][0]["kind"] == "opened"
        claimed = await client.post(f"{url}/commands", headers=mine, json={
            "command": "ack", "by": "bob", "command_id": "http-0"})
        assert claimed.status == 422 and "taken from your credential" in (
            await claimed.json())["error"]
        ack = {"command": "ack", "command_id": "http-1"}
        first = await client.post(f"{url}/commands", json=ack, headers=mine)
        assert first.status == 200
        (acked,) = (await first.json())["events"]
        assert acked["kind"] == "acknowledged"
        assert acked["actor"] == {"kind": "person", "name": "alice", "rule": "",
                                  "credential": "token:alice-laptop"}
        again = await (await client.post(f"{url}/commands", json=ack, headers=mine)).json()
        assert again == {"events": []}  # idempotent by command id
        refused = await client.post(f"{url}/commands", headers=mine,
                                    json={"command": "close", "command_id": "http-2"})
        assert refused.status == 409
        assert "cannot go to closed from acknowledged" in (await refused.json())["error"]
        bad = await client.post(f"{url}/commands", headers=mine,
                                json={"command": "explode", "command_id": "x"})
        assert bad.status == 422 and (await bad.json())["error"].startswith("command:")
        assert (await client.post(f"{url}/commands", headers=theirs, json=ack)).status == 404

    settings = Settings(home=tmp_path, api_tokens={
        "tok-a": ("llm-pretrain", "user:alice", "label:alice-laptop"), "tok-b": ("other",)})
    _serve(settings, backend, scenario)
