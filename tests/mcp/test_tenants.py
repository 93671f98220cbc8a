"""Two tenants (tests/tenants_kit.py: A and B on one leaf switch, a shared incident): A's
agent, through the SDK's client over streamable HTTP with A's token, sees exactly what A's
token sees through the HTTP API (the same rows, incidents, attempts and events, the shared
incident narrowed the same way), and nothing of B's in any tool's answer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from jobtrail.mcp.evidence import Evidence
from jobtrail.store.queries import wiring
from processors.topology import Topology
from schemas.topology import TopologyFile
from tests import tenants_kit as tk
from tests.mcp import kit
from tests.test_trust_tenants import AT, Server, World, leaks, world  # noqa: F401


@pytest.fixture(scope="module")
def api(world: World) -> Iterator[Server]:  # noqa: F811
    s = Server(world).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def mcp_url(world: World) -> Iterator[str]:  # noqa: F811
    evidence = Evidence(world.store, world.settings, lambda: wiring(
        world.store, Topology.from_file(TopologyFile.model_validate(tk.topology()))))
    with kit.HttpServer(evidence, world.settings) as server:
        yield server.url


def _answers(url: str, token: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    async def main() -> list[Any]:
        out = []
        async with kit.client("http", url=url, token=token) as c:
            for name, args in calls:
                if name == "job_timeline":
                    ok, rows = True, await kit.pages(c, name, args, "rows")
                    out.append((ok, {"rows": rows}))
                else:
                    out.append(await kit.call(c, name, args))
        return out
    return anyio.run(main)


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


@pytest.mark.parametrize("token", tk.A_TOKENS)
def test_a_s_agent_sees_what_a_s_token_sees_over_http(token: str, world: World,  # noqa: F811
                                                      api: Server, mcp_url: str) -> None:
    shared, a_only = world.ids["shared"], world.ids["a_only"]
    calls = [
        ("job_timeline", {"project": tk.A, "job_id": tk.A_JOB, "limit": 7}),
        ("list_incidents", {}),
        ("incident", {"incident_id": shared, "limit": 500}),
        ("incident", {"incident_id": a_only, "limit": 500}),
        ("where", {"at": AT, "switch": "leaf-01"}),
        ("entity_history", {"entity": "leaf-01", "limit": 500}),
        ("entity_history", {"entity": "node-005", "limit": 500}),
    ]
    answers = _answers(mcp_url, token, calls)
    assert all(ok for ok, _ in answers), [a for ok, a in answers if not ok]
    (_, timeline), (_, listed), (_, inc_shared), (_, inc_a), (_, where), (_, leaf), \
        (_, node) = answers

    status, rows = api.get(f"/v1/jobs/{tk.A_JOB}/timeline?project={tk.A}", token)
    assert status == 200 and timeline["rows"] == rows["rows"] != []
    status, incidents = api.get("/v1/incidents", token)
    assert [i["incident_id"] for i in listed["incidents"]] == [
        i["incident_id"] for i in incidents["incidents"]] and {
        i["incident_id"] for i in incidents["incidents"]} == {shared, a_only}
    for mine, incident_id in ((inc_shared, shared), (inc_a, a_only)):
        status, shown = api.get(f"/v1/incidents/{incident_id}", token)
        assert status == 200
        assert mine["cause"]["explanation"] == shown["explanation"]
        assert mine["cause"]["event_id"] == shown["cause_event"]
        assert {k: mine["impact"][k] for k in ("impacted_jobs", "impacted_gpus",
                                               "lost_gpu_hours", "lost_steps", "recovery")} \
            == {k: shown[k] for k in ("impacted_jobs", "impacted_gpus", "lost_gpu_hours",
                                      "lost_steps", "recovery")}
        assert mine["impact"]["jobs"] == shown["jobs"]
        assert [{k: v for k, v in e.items() if k != "seq"} for e in mine["evidence"]] == \
            shown["evidence"]
        assert (mine["projects"], mine["other_projects"]) == (shown["projects"],
                                                              shown["other_projects"])
        assert set(mine["cites"]["event_ids"]) >= {e["event_id"] for e in shown["evidence"]}
    assert inc_shared["other_projects"] == 1 and inc_shared["impact"]["impacted_gpus"] == \
        tk.A_GPUS
    status, placed = api.get(f"/v1/where?switch=leaf-01&at={AT}&project={tk.A}", token)
    assert where["attempts"] == placed["attempts"] != []
    for name, mine in (("leaf-01", leaf), ("node-005", node)):
        status, events = api.get(f"/v1/entities/{name}/timeline?project={tk.A}", token)
        assert status == 200 and mine["events"] == events["rows"] != []
    assert {a["project"] for a in node["served"]} == {tk.A}


@pytest.mark.parametrize("token", tk.A_TOKENS)
def test_a_s_agent_is_refused_b_s_names_as_unknown_ones(token: str, world: World,  # noqa: F811
                                                        api: Server, mcp_url: str) -> None:
    b_only = world.ids["b_only"]
    calls = [
        ("job_timeline", {"project": tk.B, "job_id": tk.B_JOB}),
        ("incident", {"incident_id": b_only}),
        ("incident", {"incident_id": world.ids["shared"], "projects": [tk.B]}),
        ("similar_incidents", {"incident_id": b_only}),
        ("proposed_actions", {"incident_id": b_only}),
        ("completeness", {"project": tk.B, "job_id": tk.B_JOB}),
        ("incident", {"incident_id": "inc-0000000000000000"}),
    ]
    answers = _answers(mcp_url, token, calls[1:])
    async def timeline() -> Any:
        async with kit.client("http", url=mcp_url, token=token) as c:
            return await kit.call(c, *calls[0])
    answers.insert(0, anyio.run(timeline))
    texts = [text for ok, text in answers]
    assert not any(ok for ok, _ in answers), answers
    assert texts[0].startswith("project: no such job") and texts[5].startswith(
        "project: no such job")
    assert texts[1] == texts[2] == texts[3] == texts[4] == texts[6] == \
        "incident_id: no such incident"
    assert api.get(f"/v1/incidents/{b_only}", token)[0] == 404
    assert api.get(f"/v1/jobs/{tk.B_JOB}/timeline?project={tk.B}", token)[0] == 404


def test_no_tool_answer_of_a_s_names_anything_of_b(world: World,  # noqa: F811
                                                   mcp_url: str) -> None:
    shared, a_only = world.ids["shared"], world.ids["a_only"]
    calls = [(n, a) for n, a in [
        ("list_incidents", {}),
        ("incident", {"incident_id": shared, "limit": 500}),
        ("incident", {"incident_id": a_only, "limit": 500}),
        ("similar_incidents", {"incident_id": a_only}),
        ("proposed_actions", {"incident_id": shared}),
        ("where", {"at": AT, "switch": "leaf-01"}),
        ("where", {"at": AT, "node": "node-003"}),
        ("where", {"at": AT, "filesystem": "lustre-scratch"}),
        *[("entity_history", {"entity": e, "limit": 500})
          for e in ("leaf-01", "node-003", "node-005", "node-005/gpu3", "lustre-scratch")],
        ("completeness", {"project": tk.A, "job_id": tk.A_JOB}),
        ("completeness", {"project": tk.A, "job_id": tk.A_EVAL}),
        ("job_timeline", {"project": tk.A, "job_id": tk.NIGHTLY, "limit": 500}),
    ]]
    found = []
    for token in tk.A_TOKENS:
        for (name, args), (ok, answer) in zip(calls, _answers(mcp_url, token, calls),
                                              strict=True):
            assert ok, (name, args, answer)
            found += [f"{token} {name} {args}: {leak}" for leak in leaks(world, _json(answer))]
    assert not found, "\n".join(found)
    # the similar incident on node-005/gpu3 is B's: an operator sees it, A does not
    (ok, mine), = _answers(mcp_url, "tok-a-viewer", [("similar_incidents",
                                                      {"incident_id": a_only})])
    (ok2, ops), = _answers(mcp_url, "tok-ops", [("similar_incidents",
                                                 {"incident_id": a_only})])
    assert ok and ok2 and mine["similar"] == []
    (top,) = [s for s in ops["similar"] if s["incident_id"] == world.ids["b_only"]]
    assert top["score"] == 5 and top["why"] == ["the same entity (node-005/gpu3)",
                                                "the same class (gpu_hardware)"], top
