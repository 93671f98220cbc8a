"""Hostlists are expanded within limits wherever they are read (issue 40, finding 2):
`Nodes=n[0-99999999]` grew `jobtrail topology import --slurm` to 3 GB before it was killed.
Each reader (the Slurm JSON, squeue, sinfo and slurmctld adapters, HTTP ingest, the
collector, the topology import) is given a list past the limit and must refuse the one record
naming the field and the limit, keep the rest, and stay small: the peak allocation is
measured (tracemalloc), which is a count of bytes, not a time."""

from __future__ import annotations

import asyncio
import json
import socket
import tracemalloc
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from click.testing import CliRunner

from ingest import hostlist
from ingest.adapters import Context, registry, run
from ingest.canonical import Decoded
from ingest.hostlist import HostlistError, expand, expand_indices
from jobtrail.cli.main import main as cli
from jobtrail.collect.slurm import SlurmCollector
from jobtrail.config import Settings
from jobtrail.http import RuntimeBackend, create_app
from jobtrail.runtime.embedded import EmbeddedRuntime
from jobtrail.store import Store
from jobtrail.topology_import import slurm as topology_conf
from schemas.dead_letters import DeadLetter
from schemas.events import Event

HUGE = "n[0-99999999]"  # a hundred million names in 13 characters
CTX = Context(producer="test", observed_at=datetime(2026, 12, 7, tzinfo=UTC), project="p",
              cluster="dev")
PEAK_BYTES = 64 << 20
"""What reading any of these inputs may allocate at its peak; 100 M names would be ~10 GB."""


@pytest.fixture
def small_peak() -> Iterator[Callable[[], int]]:
    tracemalloc.start()
    try:
        yield lambda: tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_expansion_is_slurm_s() -> None:
    assert expand("node-[001-003,010],gpu7") == ["node-001", "node-002", "node-003",
                                                 "node-010", "gpu7"]
    assert expand("rack[1-2]-n[01-02]") == ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]
    assert expand("n[8-12]") == ["n8", "n9", "n10", "n11", "n12"]
    assert expand("") == [] and expand("n1") == ["n1"]
    assert expand_indices("0-3,6") == [0, 1, 2, 3, 6]


@pytest.mark.parametrize("text, says", [
    (HUGE, "names 100,000,000 nodes; the limit is 100,000 per hostlist"),
    ("a[0-99999]b[0-99999]", "names 10,000,000,000 nodes"),
    (",".join(["a[0-99999]"] * 1000), "names 200,000 nodes"),
    ("n[0-9999]" + "x" * 500, "spells 5,050,000 characters; the limit is 4,000,000"),
    ("n[5-1]", "runs backwards"),
    ("n[1" + "0" * 5000 + "]", "is not a number or a range of numbers"),
    ("n[1-2", "'[' without ']'"),
    ("n]", "']' without '['"),
    ("n[[1-2]]", "nested brackets"),
    ("n[]", "an empty '[]'"),
    ("n[a-b]", "is not a number"),
])
def test_a_hostlist_past_a_limit_or_malformed_is_refused_naming_it(
        text: str, says: str, small_peak: Callable[[], int]) -> None:
    with pytest.raises(HostlistError) as caught:
        expand(text, field="NodeList")
    assert caught.value.field == "NodeList" and says in caught.value.reason
    assert isinstance(caught.value, ValueError)  # a command line prints it
    assert small_peak() < PEAK_BYTES


def test_the_lists_of_one_payload_share_one_budget() -> None:
    with hostlist.budget():
        for i in range(hostlist.PAYLOAD_NAMES // 100_000):
            assert len(expand(f"x{i}-[0-99999]")) == 100_000
        with pytest.raises(HostlistError, match="past 1,000,000 names in all"):
            expand("y[0-1]")
    assert len(expand("y[0-1]")) == 2  # outside the budget, only the per-list limit


def test_index_ranges_are_bounded() -> None:
    with pytest.raises(HostlistError, match="names 100,000,000 numbers"):
        expand_indices("0-99999999", field="gres_detail")


def _dead(records: list[Decoded]) -> list[DeadLetter]:
    return [r for r in records if isinstance(r, DeadLetter)]


def _events(records: list[Decoded]) -> list[Event]:
    return [r for r in records if isinstance(r, Event)]


def _slurm_json() -> str:
    job = {"job_id": 7, "account": "p", "job_state": "RUNNING", "restart_cnt": 0,
           "submit_time": 1_765_000_000, "start_time": 1_765_000_100}
    return json.dumps({"jobs": [{**job, "nodes": HUGE}, {**job, "job_id": 8, "nodes": "n[1-2]"}]})


SQUEUE = ("JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)\n"
          f"    7 gpu train alice R 1:00 100000000 {HUGE}\n"
          "    8 gpu train alice R 1:00 2 n[1-2]\n")
SINFO = ("PARTITION AVAIL TIMELIMIT NODES STATE NODELIST\n"
         f"gpu* up infinite 100000000 drain {HUGE}\n"
         "gpu* up infinite 2 down n[1-2]\n")
SINFO_R = ("REASON USER TIMESTAMP NODELIST\n"
           f"bad slurm 2026-12-07T01:00:00 {HUGE}\n"
           "Xid_79 slurm 2026-12-07T01:00:00 n[1-2]\n")
SLURMCTLD = ("[2026-12-07T01:00:00.000] sched: Allocate JobId=7 NodeList=" + HUGE +
             " #CPUs=2 Partition=gpu\n"
             "[2026-12-07T01:00:01.000] error: Nodes " + HUGE + " not responding\n"
             "[2026-12-07T01:00:02.000] sched: Allocate JobId=8 NodeList=n[1-2] #CPUs=2 "
             "Partition=gpu\n")


@pytest.mark.parametrize("adapter, text, field, kept", [
    ("slurm", _slurm_json(), "jobs[0].nodes",  # job 7's submission stands; not its start
     lambda e: e.job_id == "8" or e.type == "job.submitted"),
    ("squeue", SQUEUE, "NODELIST(REASON)", lambda e: e.job_id == "8"),
    ("sinfo", SINFO, "NODELIST", lambda e: e.node in ("n1", "n2")),
    ("sinfo", SINFO_R, "NODELIST", lambda e: e.node in ("n1", "n2")),
    ("slurmctld", SLURMCTLD, "nodes", lambda e: e.job_id == "8"),
    ("auto", SLURMCTLD, "nodes", lambda e: e.job_id == "8"),
])
def test_every_slurm_reader_refuses_the_record_and_keeps_the_rest(
        adapter: str, text: str, field: str, kept: Callable[[Event], bool],
        small_peak: Callable[[], int]) -> None:
    out = run(registry()[adapter], text, CTX)
    dead = _dead(out)
    assert dead and all(d.field == field for d in dead), [(d.field, d.reason) for d in dead]
    assert all("ingest.hostlist" in d.reason for d in dead)
    events = _events(out)
    assert events and all(kept(e) for e in events)
    assert all(len(e.attributes.get("nodes") or []) <= 2 for e in events)
    assert small_peak() < PEAK_BYTES


def test_http_ingest_answers_the_refusal(store: Store, tmp_path: Path) -> None:
    backend = RuntimeBackend(EmbeddedRuntime(Settings(home=tmp_path), store=store))

    async def main() -> dict[str, Any]:
        runner = web.AppRunner(create_app(Settings(home=tmp_path), backend))
        await runner.setup()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as client:
                resp = await client.post("/v1/ingest/slurm", data=_slurm_json(),
                                         headers={"X-Jobtrail-Cluster": "dev"})
                body: dict[str, Any] = await resp.json()
                body["status"] = resp.status
                return body
        finally:
            await runner.cleanup()

    body = asyncio.run(asyncio.wait_for(main(), 60))
    assert body["status"] == 202 and body["accepted"] >= 1
    assert [r["field"] for r in body["rejected"]] == ["jobs[0].nodes"]
    assert "limit is 100,000" in body["rejected"][0]["reason"]


class _Sink:
    def __init__(self) -> None:
        self.records: list[Decoded] = []

    def submit(self, records: list[Decoded]) -> int:
        self.records += records
        return len(records)


def test_the_collector_dead_letters_the_job_and_keeps_polling(tmp_path: Path,
                                                            small_peak: Callable[[], int]) -> None:
    squeue = json.loads(_slurm_json())
    squeue["jobs"][1]["gres_detail"] = ["gpu:8(IDX:0-99999999)"]
    squeue["jobs"].append({**squeue["jobs"][1], "job_id": 9, "gres_detail": ["gpu:2(IDX:0-1)"]})

    def tool(argv: list[str]) -> str:
        if argv[:2] == ["squeue", "--json"]:
            return json.dumps(squeue)
        if argv[:2] == ["sinfo", "--json"]:
            return json.dumps({"nodes": []})
        if argv[:3] == ["scontrol", "show", "config"]:
            return "ClusterName = dev\n"
        return ""

    sink = _Sink()
    collector = SlurmCollector(sink, tmp_path / "cursor.json", tool=tool)  # type: ignore[arg-type]
    collector.step()
    dead = {(d.field, d.reason.split(";")[-1].strip()) for d in _dead(sink.records)}
    assert {f for f, _ in dead} == {"jobs[0].nodes", "gres_detail"}, dead
    started = [e for e in _events(sink.records) if e.type == "job.started"]
    assert [(e.job_id, e.attributes["gpu_ids"]) for e in started] == [("9", ["0", "1"])]
    assert collector.step() == 0  # the next poll does not dead-letter them again
    assert small_peak() < PEAK_BYTES


def test_topology_import_refuses_the_line(tmp_path: Path, small_peak: Callable[[], int]) -> None:
    conf = tmp_path / "topology.conf"
    conf.write_text("SwitchName=s0 Nodes=n[1-4]\nSwitchName=s1 Nodes=" + HUGE + "\n")
    with pytest.raises(topology_conf.SlurmTopologyError, match=r"line 2: Nodes: .*100,000"):
        topology_conf.parse(conf.read_text())
    result = CliRunner().invoke(cli, ["--home", str(tmp_path / "home"), "topology", "import",
                                      "--cluster", "dev", "--out", str(tmp_path / "t.yaml"),
                                      "--slurm", str(conf)])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "line 2" in result.output and "limit is 100,000" in result.output
    assert not (tmp_path / "t.yaml").exists()
    assert small_peak() < PEAK_BYTES


def test_a_file_of_many_allowed_lists_is_bounded_in_all() -> None:
    conf = "\n".join(f"SwitchName=s{i} Nodes=r{i}n[0-99999]" for i in range(12))
    with pytest.raises(topology_conf.SlurmTopologyError, match=r"line 11: .*1,000,000 names"):
        topology_conf.parse(conf)
