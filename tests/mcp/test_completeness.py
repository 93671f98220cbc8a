"""Completeness shown for a story with a missing node log and a silent rank
(tests/completeness_kit.py), run through the embedded pipeline into the store: the gaps are
measured from the stored events (the quiet node's last event is the story's), and shown on
the timeline (`jobtrail timeline`), in `jobtrail incident show`, and through the MCP tools,
where the incident's cause says it rests on incomplete evidence."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from click.testing import CliRunner

from jobtrail.config import Settings
from jobtrail.identity import LOCAL
from jobtrail.learn import sample
from jobtrail.mcp.evidence import Evidence
from jobtrail.mcp.server import build
from jobtrail.store import Store
from processors.topology import Topology
from schemas.topology import TopologyFile
from tests import completeness_kit as ck


@dataclass
class Story:
    store: Store
    dsn: str
    home: Path
    topology: Path
    quiet_last: str
    """The id of node-003's last stored event."""


def _wiring() -> Topology:
    return Topology.from_file(TopologyFile.model_validate(sample.topology()))


@pytest.fixture(scope="module")
def story(chdb_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Story]:
    from ingest.canonical import decode
    from jobtrail.runtime.embedded import EmbeddedRuntime

    database = f"t_{uuid.uuid4().hex[:12]}"
    dsn = f"chdb://{chdb_path}"
    store = Store.connect(dsn, database)
    store.migrate()
    home = tmp_path_factory.mktemp("gaps")
    topology = home / "topology.yaml"
    topology.write_text(yaml.safe_dump(sample.topology()))
    runtime = EmbeddedRuntime(Settings(home=home), topology=_wiring(), store=store)
    runtime.submit(list(decode(ck.jsonl(), producer="story", observed_at=datetime.now(UTC))))
    runtime.drain()
    runtime.close()
    quiet = [e for e in store.entity_timeline([ck.PROJECT], ck.QUIET_NODE)
             if e["type"] == "node.ready"]
    assert quiet[-1]["time"] == ck.last_quiet_node_time()
    yield Story(store, dsn, home, topology, str(quiet[-1]["id"]))
    store.client.command(f"DROP DATABASE IF EXISTS {database}")


def _cli(s: Story, *args: str) -> str:
    from jobtrail.cli.main import main

    env = {"JOBTRAIL_CLICKHOUSE": s.dsn, "JOBTRAIL_DATABASE": s.store.database,
           "JOBTRAIL_TOPOLOGY": str(s.topology), "JOBTRAIL_HOME": str(s.home / "cli")}
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _mcp(s: Story, name: str, args: dict[str, Any]) -> Any:
    from mcp import Client

    settings = Settings(home=s.home)
    server = build(Evidence(s.store, settings, _wiring), lambda ctx: LOCAL)

    async def main() -> Any:
        async with Client(server) as c:
            result = await c.call_tool(name, args)
            assert not result.is_error, result.content
            return result.structured_content
    return anyio.run(main)


def test_the_gaps_are_measured_from_the_stored_events(story: Story) -> None:
    answer = _mcp(story, "completeness", {"project": ck.PROJECT, "job_id": ck.JOB})
    (attempt,) = answer["attempts"]
    assert attempt["complete"] is False
    assert attempt["expected"] == {"scheduler": 1, "rank log": 4, "node log": 4}
    assert attempt["reported"] == {"scheduler": 1, "rank log": 3, "node log": 4}
    gaps = {(g["kind"], g["key"]): g for g in attempt["gaps"]}
    assert set(gaps) == {("rank log", ck.SILENT_RANK), ("node log", ck.QUIET_NODE)}
    quiet = gaps[("node log", ck.QUIET_NODE)]
    assert quiet["status"] == "stopped" and quiet["last_event"] == story.quiet_last
    assert quiet["last"] == ck.last_quiet_node_time().isoformat()
    assert "stopped 26 min before the attempt's end" in quiet["why"]
    assert gaps[("rank log", ck.SILENT_RANK)]["status"] == "never"
    assert gaps[("rank log", ck.SILENT_RANK)]["events"] == 0
    assert story.quiet_last in answer["cites"]["event_ids"]
    assert set(story.store.events_by_id(answer["cites"]["event_ids"])) == set(
        answer["cites"]["event_ids"])


def test_the_incident_s_cause_says_it_rests_on_incomplete_evidence(story: Story) -> None:
    (row,) = story.store.incidents(None)
    answer = _mcp(story, "incident", {"incident_id": row["incident_id"]})
    cause = answer["cause"]
    assert cause["rests_on_incomplete_evidence"] is True
    assert cause["caveat"].startswith("The cause rests on incomplete evidence: ")
    assert f"rank log of {ck.SILENT_RANK} never reported" in cause["caveat"]
    assert f"the node log of {ck.QUIET_NODE} stopped 26 min" in cause["caveat"]
    shown = _cli(story, "incident", "show", row["incident_id"])
    assert f"evidence of {ck.PROJECT}/{ck.JOB} attempt 1: sources: scheduler 1/1, rank log " \
           "3/4, node log 4/4; 2 gap(s)" in shown
    assert "caveat: The cause rests on incomplete evidence" in shown


def test_the_timeline_shows_what_it_lacks(story: Story) -> None:
    out = _cli(story, "timeline", ck.JOB, "--project", ck.PROJECT, "--no-colour")
    (line,) = [x for x in out.splitlines() if x.strip().startswith("sources:")]
    assert line.strip().startswith("sources: scheduler 1/1, rank log 3/4, node log 4/4; "
                                   "2 gap(s): rank log of rank-2 never reported")
    assert f"the node log of {ck.QUIET_NODE} stopped 26 min" in line
