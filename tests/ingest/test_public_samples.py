"""Public samples (tests/ingest/fixtures/SOURCES.md), read field by field, the event time
first: a line that says when it happened is stamped with that time, never the read time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ingest.adapters import Context, registry, run_report
from ingest.timestamps import boot_time_from_proc_stat, read
from schemas.dead_letters import DeadLetter
from schemas.events import Event

FIXTURES = Path(__file__).parent / "fixtures"
READ_AT = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
BOOT = datetime(2025, 1, 25, 10, 0, tzinfo=UTC)


def _run(fmt: str, name: str, **context: Any) -> tuple[list[Event], list[DeadLetter], Any]:
    ctx = Context(producer="public", observed_at=READ_AT, cluster="c", origin=name,
                  **{"node": "gpu-node-1", **context})
    out, report = run_report(registry()[fmt], (FIXTURES / fmt / name).read_text(), ctx)
    return ([e for e in out if isinstance(e, Event)],
            [d for d in out if isinstance(d, DeadLetter)], report)


def _at(*parts: int, micro: int = 0) -> datetime:
    return datetime(*parts, micro, tzinfo=UTC)  # type: ignore[misc]


def test_dmesg_ctime_lines_keep_their_time() -> None:
    events, letters, report = _run("xid", "public_dmesg_ctime.log")
    assert not letters
    assert [(e.type, e.time, e.attributes["xid"], e.entity) for e in events] == [
        ("node.xid", _at(2024, 8, 30, 11, 43, 9), 13, "gpu-node-1/pci-0000:cb:00"),
        ("node.xid", _at(2024, 8, 30, 11, 43, 14), 109, "gpu-node-1/pci-0000:cb:00")]
    assert {e.attributes["time_source"] for e in events} == {"line"}
    assert events[1].attributes["class"] == "application"
    assert (report.lines, report.skipped, report.untimed) == (3, 1, 0)
    # dmesg -T is local time: in another zone the instant moves
    berlin, _, _ = _run("xid", "public_dmesg_ctime.log", tz="Europe/Berlin")
    assert berlin[0].time == _at(2024, 8, 30, 9, 43, 9)


def test_dmesg_iso_with_facility_and_level() -> None:
    events, letters, _ = _run("xid", "public_dmesg_iso_levels.log")
    assert not letters
    gsp, nvlink = events
    assert gsp.time == _at(2025, 1, 25, 10, 34, 54, micro=859000)
    assert (gsp.attributes["xid"], gsp.attributes["class"], gsp.severity) == (
        119, "gpu_hardware", "critical")
    assert nvlink.attributes["xid"] == 145 and nvlink.attributes["class"] == "nvlink"
    assert nvlink.severity == "critical"  # the line says Fatal
    assert nvlink.time == _at(2025, 1, 25, 10, 36, 10)


def test_seconds_since_boot_need_the_boot_time_and_say_so_without_it() -> None:
    events, letters, report = _run("xid", "public_dmesg_uptime.log", boot_time=BOOT)
    assert not letters
    block, xid = events
    assert block.time == BOOT + timedelta(seconds=1843.308)
    assert (block.attributes["xid"], block.attributes["xid_less"]) == (79, True)
    assert block.entity == "gpu-node-1/pci-0000:b3:00"
    assert block.attributes["time_source"] == "boot"
    assert xid.time == BOOT + timedelta(seconds=1900)
    assert xid.entity == "gpu-node-1/pci-0000:44:00"
    blind, _, blind_report = _run("xid", "public_dmesg_uptime.log")
    assert {e.attributes["time_source"] for e in blind} == {"observed"}
    assert {e.time for e in blind} == {READ_AT}
    assert blind_report.untimed == 2 and "--boot-time" in blind_report.summary()
    assert report.untimed == 0


def test_kmsg_records() -> None:
    events, letters, report = _run("xid", "public_kmsg.log", boot_time=BOOT)
    assert not letters
    (xid,) = events
    assert xid.time == BOOT + timedelta(milliseconds=1843308)  # events keep milliseconds
    assert xid.attributes["xid"] == 79 and xid.attributes["time_source"] == "boot"
    assert report.skipped == 3  # the peermem line and the two continuation lines


def test_journalctl_mlx5_port_states() -> None:
    events, letters, report = _run("node-log", "public_journal_mlx5.log", node="")
    assert not letters
    assert [(e.type, e.time, e.entity, e.attributes["state"]) for e in events] == [
        ("network.port_up", _at(2026, 2, 14, 5, 3, 41), "gpu-node-1/mlx5_5", "ACTIVE"),
        ("network.port_down", _at(2026, 2, 14, 5, 9, 12), "gpu-node-1/mlx5_5", "DOWN")]
    assert {e.attributes["time_source"] for e in events} == {"line_year"}
    assert report.skipped == 2  # Link INIT and the workqueue line
    later, _, _ = _run("node-log", "public_journal_mlx5.log", node="", year=2025)
    assert later[0].time == _at(2025, 2, 14, 5, 3, 41)


def test_pytorch_per_rank_glog_prefix() -> None:
    events, letters, _ = _run("training-log", "public_pytorch_watchdog.log", project="llm",
                              job_id="j1", attempt=1)
    assert not letters
    assert [(e.type, e.entity, e.time) for e in events] == [
        ("comm.nccl_timeout", "rank-1", _at(2026, 6, 26, 6, 24, 44, micro=903000)),
        ("comm.nccl_timeout", "rank-0", _at(2026, 6, 26, 6, 24, 44, micro=159000))]
    assert {e.attributes["time_source"] for e in events} == {"line_year"}


@pytest.mark.parametrize(("line", "when", "source"), [
    ("2025-01-21T04:41:44,283302+00:00 NVRM: x", _at(2025, 1, 21, 4, 41, 44, micro=283302),
     "line"),
    ("kern  :warn  : 2025-01-21T04:41:44,283302+00:00 x",
     _at(2025, 1, 21, 4, 41, 44, micro=283302), "line"),
    ("2026-11-30T08:57:34+0000 host kernel: x", _at(2026, 11, 30, 8, 57, 34), "line"),
    ("2026-11-30 08:57:34,120 INFO x", _at(2026, 11, 30, 8, 57, 34, micro=120000), "line"),
    ("<13>1 2026-11-30T09:57:34.120+01:00 host app 12 ID47 - x",
     _at(2026, 11, 30, 8, 57, 34, micro=120000), "line"),
    ("<34>Nov 30 08:57:34 host su: x", _at(2026, 11, 30, 8, 57, 34), "line_year"),
    ("Nov 30 08:57:34.123456 host kernel: x", _at(2026, 11, 30, 8, 57, 34, micro=123456),
     "line_year"),
    ("Dec 31 23:59:59 host kernel: x", _at(2025, 12, 31, 23, 59, 59), "line_year"),
    ("E1206 18:44:12.123456 12345 file.cc:42] x", _at(2025, 12, 6, 18, 44, 12, micro=123456),
     "line_year"),
    ("I0502 10:31:12.345000 140245 torch/api.py:826] x",
     _at(2026, 5, 2, 10, 31, 12, micro=345000), "line_year"),
    ("1764496654.5 host kernel: x", _at(2025, 11, 30, 9, 57, 34, micro=500000), "line"),
    ("[Sun Feb 23 16:24:18 2025] x", _at(2025, 2, 23, 16, 24, 18), "line"),
    ("[  12.5] x", READ_AT, "observed"),
    ("6,1,12500000,-;x", READ_AT, "observed"),
    ("no time at all", READ_AT, "observed"),
])
def test_every_prefix(line: str, when: datetime, source: str) -> None:
    stamp = read(line, Context(producer="t", observed_at=READ_AT))
    assert (datetime.fromisoformat(stamp.time), stamp.source) == (when, source)


def test_boot_time_from_proc_stat() -> None:
    assert boot_time_from_proc_stat("cpu  1 2 3\nbtime 1735120800\nprocesses 9\n") == \
        datetime(2024, 12, 25, 10, 0, tzinfo=UTC)
    assert boot_time_from_proc_stat("cpu 1\n") is None


def test_every_rank_of_a_child_failed_error_and_the_agents_line() -> None:
    events, letters, report = _run("training-log", "public_child_failed.log", project="cv",
                                   job_id="seg-1", attempt=1, tz="Europe/Berlin")
    assert not letters
    agent, *ranks = events
    assert (agent.type, agent.attributes["local_rank"], agent.attributes["exit_code"],
            agent.attributes["signal"], agent.attributes["pid"]) == (
        "job.worker_exited", 3, -6, "SIGABRT", 3139623)
    assert agent.time == _at(2026, 11, 28, 20, 12, 50, micro=390000)  # glog, Berlin time
    assert [(e.entity, e.node, e.attributes["root_cause"], e.attributes["signal"])
            for e in ranks] == [("rank-1", "gpu-node-7", False, "SIGABRT"),
                                ("rank-2", "gpu-node-7", False, "SIGABRT"),
                                ("rank-0", "gpu-node-7", True, "SIGABRT")]
    assert {e.time for e in ranks} == {_at(2023, 6, 14, 20, 36, 10)}  # the node's local time
    assert report.skipped == 2  # the SIGTERM notice and the Traceback header


def _one(fmt: str, text: str, **context: Any) -> list[Any]:
    ctx = Context(producer="t", observed_at=READ_AT, cluster="c", **context)
    return run_report(registry()[fmt], text, ctx)[0]


def test_a_cloudevent_without_time_takes_the_receive_time_and_says_so() -> None:
    import json

    ce = {"specversion": "1.0", "id": "e1", "source": "/nodes/n1", "type": "node.xid",
          "data": {"node": "n1", "scope": "gpu", "entity": "n1/gpu0",
                   "attributes": {"xid": 79}}}
    (event,) = _one("cloudevents", json.dumps(ce))
    assert isinstance(event, Event) and event.time == READ_AT
    assert event.attributes["time_source"] == "observed"
    (timed,) = _one("cloudevents", json.dumps({**ce, "time": "2026-11-30T08:00:00Z"}))
    assert timed.time == _at(2026, 11, 30, 8, 0, 0)
    assert timed.attributes["time_source"] == "line"


def test_alerts_without_fingerprints_stay_distinct() -> None:
    import json

    def alert(port: str) -> dict[str, Any]:
        return {"status": "firing", "labels": {"alertname": "IBPortDown", "switch": "leaf-1",
                                               "port": port},
                "annotations": {}, "startsAt": "2026-11-30T08:00:00Z"}

    body = {"version": "4", "status": "firing", "receiver": "jobtrail",
            "alerts": [alert("p1"), alert("p2"), alert("p1")]}
    events = [e for e in _one("alertmanager", json.dumps(body)) if isinstance(e, Event)]
    assert len(events) == 3 and len({e.id for e in events}) == 2  # the repeat is one event


def test_nfs_servers_are_the_entity_by_address_or_name() -> None:
    text = ("Nov 30 08:00:00 gpu-node-1 kernel: nfs: server 10.20.30.40 not responding, "
            "still trying\n"
            "Nov 30 08:01:00 gpu-node-1 kernel: nfs: server filer-2.storage.example OK\n")
    down, up = _one("node-log", text)
    assert (down.type, down.entity, down.attributes["server"]) == (
        "storage.unavailable", "10.20.30.40", "10.20.30.40")
    assert (up.type, up.entity) == ("storage.available", "filer-2")


def test_kubectl_describe_events_table() -> None:
    events, letters, _ = _run("kubernetes", "public_describe_pod.txt", node="")
    assert not letters
    first, second = events
    assert (first.type, first.project, first.job_id) == (
        "job.pending", "default", "triton-inference-server-5b6c7f889c-f54c6")
    assert first.time == READ_AT - timedelta(hours=9)  # the latest of "9h (x108 over 18h)"
    assert second.time == READ_AT - timedelta(seconds=6)
    assert second.attributes["reason"] == "Insufficient nvidia.com/gpu"
    assert {e.attributes["time_source"] for e in events} == {"relative"}


def test_kubectl_get_yaml_lists_and_batch_jobs() -> None:
    events, letters, _ = _run("kubernetes", "public_get_yaml.yaml", node="")
    assert not letters
    assert [(e.type, e.job_id, e.time) for e in events] == [
        ("job.pending", "resource-test-bdfcd9f5-g8jq5", _at(2019, 1, 28, 14, 45, 34)),
        ("job.started", "pretrain-eval", _at(2026, 11, 30, 7, 0, 0)),
        ("job.completed", "pretrain-eval", _at(2026, 11, 30, 7, 45, 10)),  # completionTime
        ("job.started", "data-prep", _at(2026, 11, 30, 6, 0, 0)),
        ("job.failed", "data-prep", _at(2026, 11, 30, 6, 20, 1))]
    assert events[-1].attributes["reason"] == "BackoffLimitExceeded"
    assert events[0].attributes["reason"] == "Insufficient cpu; Insufficient memory"


def test_a_watch_stream_a_named_fragment_and_no_alias_bombs() -> None:
    import json

    event = json.loads((FIXTURES / "kubernetes" / "event_list_scheduling_preemption.json")
                       .read_text())["items"][0]
    stream = "\n".join(json.dumps({"type": "ADDED", "object": event}, indent=2)
                       for _ in range(2))  # `kubectl get events -w -o json`: pretty, back to back
    watched = [e for e in _one("kubernetes", stream) if isinstance(e, Event)]
    assert len(watched) == 2 and watched[0].id == watched[1].id
    fragment = json.dumps({"conditions": [{"type": "Running", "status": "True",
                                           "lastTransitionTime": "2026-11-30T08:00:00Z"}]})
    (started,) = _one("kubernetes", fragment, kind="PyTorchJob", project="llm",
                      job_id="pretrain-7b")
    assert (started.type, started.job_id, started.time) == (
        "job.started", "pretrain-7b", _at(2026, 11, 30, 8, 0, 0))
    bomb = "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n"
    (letter,) = _one("kubernetes", bomb)
    assert isinstance(letter, DeadLetter) and "aliases" in letter.reason


def test_squeue_sacct_and_sinfo_text() -> None:
    queue, letters, _ = _run("squeue", "public_default.txt", project="llm", node="")
    assert not letters
    assert [(e.type, e.job_id, e.attributes.get("reason"), e.attributes["time_source"])
            for e in queue] == [("job.pending", "21+1", "None", "observed"),
                                ("job.started", "21+0", None, "relative"),
                                ("job.pending", "880201", "Resources", "observed"),
                                ("job.started", "880202", None, "relative")]
    assert queue[1].time == READ_AT - timedelta(seconds=46)
    assert queue[3].time == READ_AT - timedelta(days=1, hours=2, minutes=3, seconds=4)
    assert queue[3].attributes["nodes"] == ["node-041", "node-042"]
    again, _, _ = _run("squeue", "public_default.txt", project="llm", node="")
    assert [e.id for e in again] == [e.id for e in queue]  # a snapshot read twice: once

    jobs, letters, report = _run("sacct", "parsable2.txt", node="")
    assert not letters and report.skipped == 2  # the header and the .batch step
    final = {e.job_id: e for e in jobs if e.type in ("job.completed", "job.failed",
                                                     "job.cancelled")}
    assert (final["880301"].type, final["880301"].time) == ("job.completed",
                                                            _at(2026, 11, 30, 7, 0, 0))
    assert (final["880302"].attributes["reason"], final["880302"].time) == (
        "NODE_FAIL", _at(2026, 11, 30, 8, 1, 0))  # no end time: stamped at its start
    assert final["880303"].attributes["reason"] == "cancelled by uid 1000"
    assert final["880301"].id == "slurm-c-880301-1-job.completed"  # as from sacct --json

    drained, _, _ = _run("sinfo", "reasons.txt", node="")
    assert [(e.entity, e.attributes["reason"], e.time) for e in drained] == [
        ("node-041", "Xid 79 GPU fell off", _at(2026, 11, 30, 9, 5, 0)),
        ("node-043", "IB link flapping", _at(2026, 11, 30, 9, 40, 12)),
        ("node-044", "IB link flapping", _at(2026, 11, 30, 9, 40, 12))]
    states, _, _ = _run("sinfo", "default.txt", node="")
    assert [(e.type, e.entity) for e in states] == [
        ("node.not_ready", "node-045"), ("node.not_ready", "node-046"),
        ("node.drained", "node-047")]


def test_framework_progress_and_checkpoints() -> None:
    events, letters, _ = _run("training-log", "frameworks.log", project="p", job_id="j",
                              attempt=1, node="n1")
    assert not letters
    steps = [(e.attributes["step"], e.attributes.get("loss"), e.attributes.get("step_time_s"))
             for e in events if e.type == "job.step"]
    # the Lightning bar's rate is its step time; DeepSpeed's step 100 a month after Megatron's
    # is another run's; a bar counting to a smaller total than the training bar's in the same
    # file is an evaluation's (issue 44)
    assert steps == [(100, 7.123456, 1.2345), (32000, 2.59, 0.729927), (100, None, None)]
    checkpoints = [(e.type, e.attributes["step"], e.attributes["path"]) for e in events
                   if e.type.startswith("checkpoint.")]
    # Megatron said its save finished; the Trainer's save of checkpoint-500 only started (no
    # `Model weights saved in` follows it in the file): not a checkpoint until a rerun loads it
    assert checkpoints == [("checkpoint.saved", 200, "/ckpt/megatron"),
                           ("checkpoint.started", 500, "/out/checkpoint-500"),
                           ("checkpoint.restored", 200, "/ckpt/megatron")]
    (ib,) = [e for e in events if e.type == "comm.nccl_error"]
    assert (ib.node, ib.attributes["pid"], ib.attributes["ib_device"]) == ("node-041", 2231,
                                                                           "mlx5_2")


def test_object_store_throttling_in_each_vendors_words() -> None:
    events, letters, report = _run("node-log", "object_store_throttling.log", node="n1")
    assert not letters and report.skipped == 0
    assert [(e.type, e.entity) for e in events] == [
        ("storage.throttled", "ckpt-llm"), ("storage.throttled", "ckpt-minio"),
        ("storage.throttled", "ckpt-ceph"), ("storage.throttled", "ckpt-gcs")]
    assert (events[0].attributes["op"], events[0].attributes["exhausted"]) == ("PutObject",
                                                                               True)


def test_nvswitch_errors_host_oom_segfault_and_panic() -> None:
    events, letters, _ = _run("node-log", "public_nvswitch_and_host.log", node="gpu-node-1")
    assert not letters
    assert [(e.type, e.entity, e.severity.value) for e in events] == [
        ("node.health", "gpu-node-1/nvswitch-0000:84:00.0", "warning"),
        ("node.health", "gpu-node-1/nvswitch-0000:85:00.0", "critical"),
        ("node.health", "gpu-node-1", "warning"),
        ("node.health", "gpu-node-1", "warning"),
        ("node.not_ready", "gpu-node-1", "critical")]
    sxid, fatal, oom, segv, panic = events
    assert (sxid.attributes["sxid"], sxid.attributes["port"], sxid.time) == (
        12028, 41, _at(2025, 1, 25, 10, 34, 54, micro=859000))
    assert (fatal.attributes["status"], fatal.attributes["port"], fatal.time) == (
        "failure", 17, _at(2026, 11, 30, 8, 57, 34))  # Fabric Manager's own prefix
    assert oom.attributes["system"] == "host_memory" and oom.attributes["pid"] == 44123
    assert segv.attributes["library"] == "libcuda.so.1"
    assert panic.attributes["reason"] == "kernel panic: Fatal exception in interrupt"
    # within a job's log the OOM kill and the segfault are the job's
    job, _, _ = _run("node-log", "public_nvswitch_and_host.log", node="gpu-node-1",
                     project="p", job_id="j", attempt=1)
    assert [e.type for e in job][2:4] == ["job.oom", "job.worker_exited"]
    xid, xid_letters, _ = _run("xid", "../node-log/public_nvswitch_and_host.log")
    assert xid == [] and xid_letters == []  # an SXid is not an Xid: node-log reads it


def test_ibstat_snapshots_give_state_and_rate_changes() -> None:
    events, letters, _ = _run("ibstat", "watch.txt", node="")
    assert not letters
    assert [(e.type, e.entity, e.time) for e in events] == [
        ("network.port_down", "gpu-node-1/mlx5_0/1", _at(2026, 11, 30, 8, 0, 2)),
        ("node.link_degraded", "gpu-node-1/mlx5_1/1", _at(2026, 11, 30, 8, 0, 2)),
        ("network.port_up", "gpu-node-1/mlx5_0/1", _at(2026, 11, 30, 8, 0, 4))]
    assert (events[1].attributes["speed"], events[1].attributes["expected_speed"]) == (
        "100 Gb/s", "200 Gb/s")
    netdev, _, _ = _run("ibstat", "ibdev2netdev.txt", node="gpu-node-2")
    assert [(e.type, e.entity, e.time) for e in netdev] == [
        ("network.port_down", "gpu-node-2/mlx5_1/1", _at(2026, 11, 30, 8, 10, 0)),
        ("network.port_up", "gpu-node-2/mlx5_1/1", _at(2026, 11, 30, 8, 12, 0))]


def test_dcgm_exporter_samples() -> None:
    events, letters, _ = _run("dcgm-exporter", "public_metrics.prom", node="")
    assert not letters
    assert [(e.type, e.entity) for e in events] == [
        ("node.xid", "gpu-node-3/gpu1"), ("node.xid", "workstation/gpu0"),
        ("node.thermal", "gpu-node-3/gpu2"), ("node.throttled", "gpu-node-3/gpu3"),
        ("node.ecc", "gpu-node-3/gpu4")]
    off_bus, count, hot, throttled, dbe = events
    assert (off_bus.attributes["xid"], off_bus.attributes["class"], off_bus.severity.value) == (
        79, "gpu_hardware", "critical")
    assert count.attributes["xid"] == 42
    assert hot.attributes["temperature_c"] == 91
    assert throttled.attributes["reason"] == "hw_slowdown,hw_thermal"  # 72 = 0x08 | 0x40
    assert (dbe.attributes["count"], dbe.time) == (2, _at(2025, 11, 30, 8, 40, 0))
    assert off_bus.time == READ_AT and off_bus.attributes["time_source"] == "observed"


def test_lustre_servers_naming_clients_and_lnet_wordings() -> None:
    events, letters, report = _run("node-log", "lustre_server.log", node="")
    assert not letters and report.skipped == 0
    dead, noconn, *lnet = events
    assert (dead.type, dead.entity, dead.attributes["client"]) == (
        "storage.io_error", "scratch-MDT0000", "10.1.2.3@o2ib")
    assert dead.attributes["error"] == "client evicted after 227 s silent"
    assert (noconn.type, noconn.entity, noconn.attributes["client"],
            noconn.attributes["reason"]) == ("storage.unavailable", "scratch-OST0003",
                                             "10.1.2.4@o2ib", "no target")
    assert [(e.entity, e.attributes["error"], e.attributes["server"]) for e in lnet] == [
        ("gpu-node-1", "timed out", ""), ("gpu-node-1", "timed out", "10.0.0.14@o2ib"),
        ("gpu-node-1", "peer recovery failed", "10.0.0.14@o2ib"),
        ("gpu-node-1", "send failed", "10.0.0.14@o2ib")]


def test_dcgm_diag_table_and_health_json() -> None:
    events, letters, _ = _run("node-log", "public_dcgm_diag.txt", node="gpu-node-9")
    assert not letters
    assert [(e.entity, e.attributes["system"], e.attributes["status"]) for e in events] == [
        ("gpu-node-9/gpu0", "page_retirement_row_remap", "failure"),
        ("gpu-node-9/gpu0", "gpu_memory", "failure"),
        ("gpu-node-9/gpu1", "gpu_memory", "failure"),
        ("gpu-node-9/GPU-64c6592e-0317-762b-fb32-0d561ed649ae", "software", "warning"),
        ("gpu-node-9/GPU-64c6592e-0317-762b-fb32-0d561ed649ae", "memory", "failure")]
    assert events[0].message.startswith("GPU 0 Row remapping failure: a pending remap could")
    assert events[2].message == "GPU 0 DBE errors detected"  # the row's note, for each GPU
    assert events[4].time == _at(2026, 2, 4, 5, 19, 41, micro=100000)
    assert events[0].attributes["time_source"] == "observed"


def test_sinfo_json() -> None:
    events, letters, report = _run("sinfo", "sinfo.json", node="")
    assert not letters and report.lines == 0
    assert [(e.type, e.entity, e.time, e.attributes["reason"]) for e in events] == [
        ("node.not_ready", "node-045", _at(2025, 11, 30, 9, 15, 0), "Not responding"),
        ("node.not_ready", "node-046", _at(2025, 11, 30, 9, 15, 0), "Not responding"),
        ("node.drained", "node-047", _at(2025, 11, 30, 9, 20, 0), "Xid 79")]


def test_megatron_lines_without_a_time_take_the_time_of_their_timed_neighbours() -> None:
    """Issue 27: Megatron prints its checkpoint save/load lines without a time; they take
    the time of the nearest timed line of the same file and say so, never the read time."""
    events, letters, _ = _run("training-log", "megatron_untimed.log", project="p",
                              job_id="j", attempt=1, node="n1")
    assert not letters
    got = [(e.type, e.attributes["step"], e.time, e.attributes["time_source"],
            e.attributes.get("time_from_line")) for e in events]
    assert got == [
        ("job.step", 100, _at(2026, 11, 30, 10, 10, 0), "line", None),
        ("checkpoint.saved", 100, _at(2026, 11, 30, 10, 10, 0), "previous_line", 1),
        ("job.step", 200, _at(2026, 11, 30, 10, 12, 0), "line", None),
        ("checkpoint.restored", 100, _at(2026, 11, 30, 10, 12, 0), "previous_line", 4)]
    assert all(e.time != READ_AT for e in events)
