"""The Slurm collector without a scheduler: real 22.05.8 outputs (fixtures/slurm, recorded on
the cluster tests/integration/slurm_kit.py starts) through a recorded `tool`, the log followed
across rotation and truncation, and a crash between send and cursor that re-sends the same ids.
The live behaviour is tests/integration/test_slurm_live.py."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from ingest.canonical import Decoded
from jobtrail.collect.slurm import SlurmCollector, wait_status
from jobtrail.collect.slurm_cursor import Cursor, LogFollower
from schemas.events import Event

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"


class Recorder:
    def __init__(self, fail_after: int | None = None) -> None:
        self.events: list[Event] = []
        self.fail_after = fail_after

    def submit(self, records: Sequence[Decoded]) -> int:
        self.events += [r for r in records if isinstance(r, Event)]
        if self.fail_after is not None and len(self.events) >= self.fail_after:
            raise KeyboardInterrupt("killed after the send, before the cursor")
        return len(records)


def _tool(squeue: str = "squeue.json") -> object:
    def run(argv: list[str]) -> str:
        if argv[:2] == ["squeue", "--json"]:
            return (FIXTURES / squeue).read_text()
        if argv[:2] == ["sinfo", "--json"]:
            return (FIXTURES / "sinfo.json").read_text()
        if argv[:3] == ["scontrol", "show", "config"]:
            return "ClusterName             = dev\n"
        if argv[:3] == ["scontrol", "show", "job"]:
            return "JobId=9 JobName=x\n   Account=root QOS=normal\n   TRES=cpu=1,gres/gpu=2\n"
        raise AssertionError(argv)
    return run


def _collector(tmp_path: Path, sink: Recorder, log: Path | None = None,
               squeue: str = "squeue.json") -> SlurmCollector:
    return SlurmCollector(sink, tmp_path / "cursor.json", log_path=log,
                          tool=_tool(squeue))  # type: ignore[arg-type]


def test_wait_status_of_22_05() -> None:
    assert wait_status(256) == (1, None)
    assert wait_status(15) == (143, 15)
    assert wait_status(0) == (0, None)
    assert wait_status({"return_code": 2, "signal": {"signal_id": 9}}) == (2, 9)


def test_squeue_gives_each_job_its_attempt_outcome_and_reason(tmp_path: Path) -> None:
    sink = Recorder()
    _collector(tmp_path, sink).step()
    got = {(e.job_id, e.attempt, e.type): e for e in sink.events}
    assert got[("1", 1, "job.completed")].attributes["exit_code"] == 0
    failed = got[("2", 1, "job.failed")].attributes
    assert failed["exit_code"] == 1  # 22.05 prints the wait status: 256
    assert got[("3", 1, "job.cancelled")].attributes["signal"] == "SIGTERM"
    assert got[("5", 2, "job.pending")].attributes["reason"] == "ReqNodeNotAvail"
    assert ("4", 2, "job.started") in got  # restart_cnt 1: the second attempt
    assert {e.cluster for e in sink.events} == {"dev"}
    assert {e.project for e in sink.events if e.job_id} == {"root"}  # the account
    nodes = {(e.type, e.node) for e in sink.events if not e.job_id}  # no log: sinfo --json
    assert {("node.drained", "n2"), ("node.not_ready", "n3"), ("node.not_ready", "n4")} <= nodes


def test_a_second_poll_sends_nothing_new(tmp_path: Path) -> None:
    sink = Recorder()
    collector = _collector(tmp_path, sink)
    collector.step()
    first = len(sink.events)
    assert collector.step() == 0 and len(sink.events) == first


def test_the_log_gives_starts_requeues_and_node_states(tmp_path: Path) -> None:
    log = tmp_path / "slurmctld.log"
    log.write_text((FIXTURES / "slurmctld.log").read_text())
    sink = Recorder()
    _collector(tmp_path, sink, log).step()
    by = {(e.type, e.job_id, e.attempt): e for e in sink.events if e.job_id}
    assert by[("job.started", "4", 1)].attributes["nodes"] == ["n2"]
    assert by[("job.requeued", "4", 1)].attributes["reason"] == "REQUEUED"
    assert by[("job.started", "4", 2)].attributes["nodes"] == ["n1"]  # the backfill restart
    node_fail = by[("job.requeued", "5", 1)].attributes
    assert (node_fail["reason"], node_fail["failed_nodes"]) == ("NODE_FAIL", ["n4"])
    nodes = [(e.type, e.node, e.attributes["reason"]) for e in sink.events if not e.job_id]
    assert ("node.drained", "n2", "XID 79: GPU fell off the bus") in nodes
    assert ("node.not_ready", "n3", "IB link down mlx5_0") in nodes
    assert any(t == "node.ready" and n == "n4" for t, n, _ in nodes)
    assert not any(e.type == "job.started" and e.attributes.get("time_source") != "line"
                   for e in sink.events)  # starts come from the log when it is followed


def test_log_followed_across_rotation_and_truncation(tmp_path: Path) -> None:
    log = tmp_path / "ctld.log"
    log.write_text("[2026-12-06T01:00:00.000] a\n[2026-12-06T01:00:01.000] b\n[partial")
    follower, cursor = LogFollower(log), Cursor()
    lines, cursor = follower.read(cursor)
    assert [x[-1] for x in lines] == ["a", "b"]
    with log.open("a") as f:
        f.write(" c]\n[2026-12-06T01:00:03.000] d\n")
    log.rename(log.with_name("ctld.log.1"))  # logrotate: rename, then a new file
    log.write_text("[2026-12-06T01:00:04.000] e\n")
    lines, cursor = follower.read(cursor)
    assert [x[-1] for x in lines] == ["]", "d", "e"]
    log.write_text("[2026-12-06T01:00:05] f\n")  # copytruncate: same inode, shorter
    lines, cursor = follower.read(cursor)
    assert [x[-1] for x in lines] == ["f"]


def test_a_crash_between_send_and_cursor_resends_the_same_ids(tmp_path: Path) -> None:
    log = tmp_path / "slurmctld.log"
    log.write_text((FIXTURES / "slurmctld.log").read_text())
    crashed = Recorder(fail_after=1)
    with pytest.raises(KeyboardInterrupt):
        _collector(tmp_path, crashed, log).step()
    assert not (tmp_path / "cursor.json").exists()
    again = Recorder()
    _collector(tmp_path, again, log).step()
    reference = Recorder()
    _collector(tmp_path / "ref", reference, log).step()
    assert {e.id for e in crashed.events} <= {e.id for e in again.events}
    assert sorted(e.id for e in again.events) == sorted(e.id for e in reference.events)
    assert len({e.id for e in again.events}) == len(again.events)
    os.sync()


def test_to_http_ingest_with_a_token(tmp_path: Path) -> None:
    """`collect slurm --to URL`: authenticated like any producer; a token without the
    project (or without @infra for node events) is refused and the cursor does not move."""
    import urllib.error

    from jobtrail.collect.sinks import HttpSink
    from tests.trust_kit import http, serve

    tokens = {"JOBTRAIL_API_TOKENS": "coll=root,@infra;tenant=root"}
    with serve(tmp_path / "home", env=tokens) as server:
        refused = SlurmCollector(HttpSink(server.url, "tenant"), tmp_path / "c1.json",
                                 tool=_tool())  # type: ignore[arg-type]
        with pytest.raises(urllib.error.HTTPError) as exc:
            refused.step()  # sinfo's node events need @infra
        assert exc.value.code == 403 and not (tmp_path / "c1.json").exists()
        collector = SlurmCollector(HttpSink(server.url, "coll"), tmp_path / "c2.json",
                                   tool=_tool())  # type: ignore[arg-type]
        assert collector.step() > 0
        rows = http("GET", f"{server.url}/v1/jobs/2/timeline?project=root",
                    token="coll").body["rows"]
        assert [(r["attempt"], r["type"]) for r in rows if r["type"] == "job.failed"] == \
            [(1, "job.failed")]


def test_a_reason_line_waits_for_its_state_line(tmp_path: Path) -> None:
    log = tmp_path / "slurmctld.log"
    log.write_text("[2026-12-06T01:06:03.640] update_node: node n3 reason set to: IB down\n")
    sink = Recorder()
    collector = _collector(tmp_path, sink, log)
    collector.step()
    assert not [e for e in sink.events if not e.job_id]
    with log.open("a") as f:
        f.write("[2026-12-06T01:06:03.640] update_node: node n3 state set to DOWN\n")
    collector.step()
    (down,) = [e for e in sink.events if not e.job_id]
    assert (down.type, down.node, down.attributes["reason"]) == ("node.not_ready", "n3",
                                                                "IB down")


def test_a_start_the_controller_no_longer_holds_takes_its_gpus_from_sacct(
        tmp_path: Path) -> None:
    """The log's allocation line for a job squeue and scontrol no longer know (it ended
    longer than MinJobAge ago, or the collector was down): its account and GPUs come from
    sacct's record of the attempt that started then (the recorded sacct.json, job 5)."""
    log = tmp_path / "slurmctld.log"
    log.write_text("[2026-12-06T01:05:58.120] sched: Allocate JobId=5 NodeList=n4 #CPUs=1 "
                   "Partition=gpu\n")
    asked: list[list[str]] = []

    def run(argv: list[str]) -> str:
        asked.append(argv)
        if argv[:2] == ["squeue", "--json"]:
            return '{"jobs": []}'
        if argv[:3] == ["scontrol", "show", "config"]:
            return "ClusterName             = dev\n"
        if argv[:3] == ["scontrol", "show", "job"]:
            raise RuntimeError("scontrol exited 1: slurm_load_jobs error: Invalid job id")
        if argv[:3] == ["sacct", "--json", "-j"]:
            return (FIXTURES / "sacct.json").read_text()
        raise AssertionError(argv)

    sink = Recorder()
    SlurmCollector(sink, tmp_path / "cursor.json", log_path=log,
                   tool=run).step()  # type: ignore[arg-type]
    [started] = [e for e in sink.events if e.type == "job.started"]
    assert (started.job_id, started.project, started.attributes["gpus"]) == ("5", "root", 2)
    assert ["sacct", "--json", "-j", "5"] in asked


def test_a_start_read_before_squeue_names_its_gpu_ids_asks_the_controller(
        tmp_path: Path) -> None:
    """squeue read the instant job 4 started (a loaded controller, CI): RUNNING with its
    gres/gpu=2 but no `gres_detail` yet. The start keeps the GPU ids scontrol -d names
    (`GRES=gpu:2(IDX:0-1)`), not an empty list; sabotage: without the controller's answer the
    ids are empty and this fails."""
    import json
    record = json.loads((FIXTURES / "squeue.json").read_text())
    job = next(j for j in record["jobs"] if j["job_id"] == 4)
    job = {**job, "gres_detail": []}
    log = tmp_path / "slurmctld.log"
    log.write_text("[2026-12-06T01:05:58.120] sched: Allocate JobId=4 NodeList=n1 #CPUs=1 "
                   "Partition=gpu\n")
    asked: list[list[str]] = []

    def run(argv: list[str]) -> str:
        asked.append(argv)
        if argv[:2] == ["squeue", "--json"]:
            return json.dumps({"jobs": [job]})
        if argv[:3] == ["scontrol", "show", "config"]:
            return "ClusterName             = dev\n"
        if argv[:3] == ["scontrol", "show", "job"]:
            return ("JobId=4 JobName=x\n   Account=root QOS=normal\n"
                    "   TRES=cpu=1,node=1,billing=1,gres/gpu=2\n"
                    "     Nodes=n1 CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:0-1)\n")
        raise AssertionError(argv)

    sink = Recorder()
    SlurmCollector(sink, tmp_path / "cursor.json", log_path=log,
                   tool=run).step()  # type: ignore[arg-type]
    [started] = [e for e in sink.events if e.type == "job.started"]
    assert (started.job_id, started.attributes["gpus"]) == ("4", 2)
    assert started.attributes["gpu_ids"] == ["0", "1"]
    assert ["scontrol", "show", "job", "-d", "4"] in asked
