"""`jobtrail mcp` through the SDK's own client, over stdio (the command spawned as a
subprocess) and streamable HTTP (on 127.0.0.1), on the demo's store: the tools and their
schemas, the demo's incident with cited event ids and incident-log seqs that exist in the
store, a timeline paged to its end, and refusals that name the field."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
import yaml

from jobtrail.config import Settings
from jobtrail.learn import sample
from jobtrail.mcp.evidence import Evidence
from jobtrail.store import Store
from jobtrail.store.queries import wiring
from processors.topology import Topology
from schemas.topology import TopologyFile
from tests.mcp import kit

TOOLS = {"list_incidents", "job_timeline", "incident", "entity_history", "where",
         "similar_incidents", "proposed_actions", "completeness"}
REQUIRED = {"list_incidents": [], "job_timeline": ["job_id", "project"],
            "incident": ["incident_id"], "entity_history": ["entity"], "where": ["at"],
            "similar_incidents": ["incident_id"], "proposed_actions": ["incident_id"],
            "completeness": ["job_id", "project"]}
TOKENS = {"tok-llm": ("llm-pretrain", "user:ana", "role:viewer"),
          "tok-other": ("vision", "user:vic", "role:viewer")}


@dataclass
class Demo:
    store: Store
    settings: Settings
    env: dict[str, str]
    evidence: Evidence


def _topology() -> Topology:
    return Topology.from_file(TopologyFile.model_validate(sample.topology()))


@pytest.fixture(scope="module")
def demo(clickhouse_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    from jobtrail.cli.ingest import _ingest_text

    home = tmp_path_factory.mktemp("mcp-demo")
    topology = home / "topology.yaml"
    topology.write_text(yaml.safe_dump(sample.topology()))
    database = f"t_{uuid.uuid4().hex[:12]}"
    settings = Settings(home=home, clickhouse_dsn=clickhouse_server, database=database,
                        topology_file=topology, grafana_url="http://grafana.test",
                        public_url="http://api.test", api_tokens=dict(TOKENS))
    _ingest_text(settings, sample.jsonl(), producer="sample", origin="sample",
                 topology=_topology())
    store = Store.connect(clickhouse_server, database)
    env = kit.stdio_env(clickhouse_server, database, home / "stdio", topology, {
        "JOBTRAIL_API_TOKENS": ";".join(f"{k}={','.join(v)}" for k, v in TOKENS.items()),
        "JOBTRAIL_MCP_TOKEN": "tok-llm", "JOBTRAIL_GRAFANA_URL": "http://grafana.test",
        "JOBTRAIL_PUBLIC_URL": "http://api.test"})
    yield Demo(store, settings, env, Evidence(store, settings, lambda: wiring(
        store, _topology())))
    store.client.command(f"DROP DATABASE IF EXISTS {database}")


@pytest.fixture(scope="module")
def http(demo: Demo) -> Iterator[kit.HttpServer]:
    with kit.HttpServer(demo.evidence, demo.settings) as server:
        yield server


@pytest.fixture(params=["stdio", "http"])
def session(request: pytest.FixtureRequest, demo: Demo) -> dict[str, Any]:
    if request.param == "http":
        return {"transport": "http", "url": request.getfixturevalue("http").url,
                "token": "tok-llm"}
    return {"transport": "stdio", "env": demo.env}


def _run(session: dict[str, Any], body: Any) -> Any:
    async def main() -> Any:
        async with kit.client(**session) as c:
            return await body(c)
    return anyio.run(main)


def test_tools_are_listed_read_only_with_strict_schemas(session: dict[str, Any]) -> None:
    async def body(c: Any) -> Any:
        return (await c.list_tools()).tools

    tools = {t.name: t for t in _run(session, body)}
    assert set(tools) == TOOLS
    for name, tool in tools.items():
        schema = tool.input_schema
        assert schema["type"] == "object" and schema["additionalProperties"] is False, name
        assert sorted(schema.get("required", [])) == REQUIRED[name], name
        assert tool.annotations.read_only_hint is True, name
        assert tool.annotations.destructive_hint is False, name
        assert tool.description
    timeline = tools["job_timeline"].input_schema["properties"]
    assert timeline["limit"]["maximum"] == 500 and timeline["since"]["anyOf"][0]["format"] == \
        "date-time"
    assert set(timeline["source"]["anyOf"][0]["enum"]) >= {"scheduler", "network", "node"}


def test_the_demo_incident_is_answered_with_citations_that_exist(session: dict[str, Any],
                                                                demo: Demo) -> None:
    async def body(c: Any) -> Any:
        ok, listed = await kit.call(c, "list_incidents", {})
        assert ok, listed
        (row,) = listed["incidents"]
        ok, answer = await kit.call(c, "incident", {"incident_id": row["incident_id"],
                                                    "limit": 500})
        assert ok, answer
        return answer

    answer = _run(session, body)
    full = demo.store.incident(answer["incident_id"], None)
    assert full is not None
    # the cause is the one the store holds: leaf-05/p9's link errors, cited by event id
    cause = answer["cause"]
    assert (cause["entity"], cause["class"], cause["event_id"]) == (
        "leaf-05/p9", "network", full["cause_event"])
    stored = demo.store.events_by_id([full["cause_event"]])[full["cause_event"]]
    assert (stored.type, stored.entity) == ("network.link_errors", "leaf-05/p9")
    assert cause["explanation"] == full["explanation"] and not cause[
        "rests_on_incomplete_evidence"]
    assert answer["candidates"][0] == {"entity": "leaf-05/p9", "type": "network.link_errors",
                                       "chosen": True, "confidence": 0.85,
                                       "event_ids": [full["cause_event"]]}
    # every cited event id is a stored event, every cited seq an entry of its log
    ids = answer["cites"]["event_ids"]
    assert len(ids) == len({e["event_id"] for e in full["evidence"]}) == 74
    assert set(demo.store.events_by_id(ids)) == set(ids)
    (log,) = answer["cites"]["incident_log"]
    seqs = {e.seq: e for e in demo.store.incident_log(answer["incident_id"])}
    assert set(log["seqs"]) <= set(seqs) and log["incident_id"] == answer["incident_id"]
    attached = {seqs[s].data.get("event_id") for s in log["seqs"]
                if seqs[s].kind == "evidence_attached"}
    assert attached == set(ids)
    assert [e["seq"] for e in answer["evidence"]] == [
        next(s for s, e in seqs.items() if e.kind == "evidence_attached"
             and e.data.get("event_id") == ev["event_id"]) for ev in answer["evidence"]]
    assert answer["impact"]["lost_gpu_hours"] == pytest.approx(full["lost_gpu_hours"])
    assert answer["links"]["dashboard"] == ("http://grafana.test/d/jobtrail-incident?"
                                            f"var-incident={answer['incident_id']}")
    assert answer["links"]["api"] == f"http://api.test/v1/incidents/{answer['incident_id']}"
    assert answer["completeness"][0]["complete"] is True


def test_the_timeline_pages_to_its_end_in_the_store_s_order(session: dict[str, Any],
                                                             demo: Demo) -> None:
    args = {"project": sample.PROJECT, "job_id": sample.JOB, "limit": 37}

    async def body(c: Any) -> Any:
        rows = await kit.pages(c, "job_timeline", args, "rows")
        only = await kit.pages(c, "job_timeline", {**args, "source": "network",
                                                   "limit": 1}, "rows")
        return rows, only

    rows, network = _run(session, body)
    stored = demo.store.timeline(sample.PROJECT, sample.JOB)
    assert [(r["event_id"], r["attempt"]) for r in rows] == [
        (r["event_id"], r["attempt"]) for r in stored]
    assert len(rows) == 164
    assert [r["type"] for r in network] == [r["type"] for r in stored
                                            if r["source"] == "network"] != []


REFUSALS = [
    ("job_timeline", {"project": sample.PROJECT, "job_id": sample.JOB, "atempt": 1},
     "atempt: not a field of this tool"),
    ("job_timeline", {"project": sample.PROJECT, "job_id": sample.JOB,
                      "since": "2026-11-30T08:00:00"}, "since: Input should have timezone"),
    ("job_timeline", {"project": sample.PROJECT, "job_id": sample.JOB, "limit": 0},
     "limit: Input should be greater than or equal to 1"),
    ("job_timeline", {"project": sample.PROJECT, "job_id": sample.JOB, "cursor": "nope"},
     "cursor: not a cursor this server gave"),
    ("job_timeline", {"project": "vision", "job_id": sample.JOB}, "project: no such job"),
    ("job_timeline", {"project": sample.PROJECT}, "job_id: Field required"),
    ("incident", {"incident_id": "inc-0000000000000000"}, "incident_id: no such incident"),
    ("where", {"at": "2026-11-30T08:30:00Z"}, "node: give exactly one of node, switch or "
                                              "filesystem"),
    ("where", {"at": "2026-11-30T08:30:00Z", "node": "node-001", "switch": "leaf-01"},
     "node: give exactly one of node, switch or filesystem (got node, switch)"),
    ("completeness", {"project": sample.PROJECT, "job_id": sample.JOB, "attempt": 9},
     "attempt: no such attempt of this job"),
    ("job_timeline", {"project": sample.PROJECT, "job_id": sample.JOB, "source": "kafka"},
     "source: Input should be"),
]


def test_refusals_name_the_field(session: dict[str, Any]) -> None:
    async def body(c: Any) -> Any:
        out = []
        for name, args, _ in REFUSALS:
            out.append(await kit.call(c, name, args))
        ok, first = await kit.call(c, "job_timeline", {"project": sample.PROJECT,
                                                       "job_id": sample.JOB, "limit": 5})
        assert ok
        out.append(await kit.call(c, "job_timeline", {
            "project": sample.PROJECT, "job_id": sample.JOB, "attempt": 2,
            "cursor": first["page"]["next_cursor"]}))
        return out

    answers = _run(session, body)
    for (name, args, expected), (ok, text) in zip(REFUSALS, answers, strict=False):
        assert not ok and text.startswith(expected), (name, args, text)
    ok, text = answers[-1]
    assert not ok and text.startswith("cursor: it belongs to another question"), text


def test_an_http_request_without_a_known_token_is_401(http: kit.HttpServer) -> None:
    import httpx2

    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic tok-llm"}):
        response = httpx2.post(http.url, headers={**headers, "Content-Type": "application/json",
                                                  "Accept": "application/json, "
                                                            "text/event-stream"},
                               json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert response.status_code == 401, (headers, response.status_code)
        assert response.headers["www-authenticate"].startswith("Bearer")


def test_stdio_with_credentials_configured_and_no_token_does_not_start(demo: Demo) -> None:
    env = {k: v for k, v in demo.env.items() if k != "JOBTRAIL_MCP_TOKEN"}
    done = subprocess.run([sys.executable, "-m", "jobtrail.cli", "mcp"], env=env,
                          cwd=str(kit.ROOT), capture_output=True, text=True, timeout=120,
                          input="")
    assert done.returncode == 2, done
    assert "give the agent's token with --token or JOBTRAIL_MCP_TOKEN" in done.stderr
    wrong = subprocess.run([sys.executable, "-m", "jobtrail.cli", "mcp", "--token", "tok-x"],
                           env=env, cwd=str(kit.ROOT), capture_output=True, text=True,
                           timeout=120, input="")
    assert wrong.returncode == 2 and "is not one of JOBTRAIL_API_TOKENS" in wrong.stderr


def test_a_token_of_another_project_sees_nothing_of_the_demo(demo: Demo,
                                                            http: kit.HttpServer) -> None:
    async def body(c: Any) -> Any:
        return [await kit.call(c, "list_incidents", {}),
                await kit.call(c, "job_timeline", {"project": sample.PROJECT,
                                                   "job_id": sample.JOB}),
                await kit.call(c, "entity_history", {"entity": "node-041"})]

    (ok, listed), (ok2, timeline), (ok3, entity) = _run(
        {"transport": "http", "url": http.url, "token": "tok-other"}, body)
    assert ok and listed["incidents"] == []
    assert not ok2 and timeline.startswith("project: no such job")
    assert ok3 and entity["served"] == [] and entity["incidents"] == []
    assert all(not e["job_id"] for e in entity["events"])

