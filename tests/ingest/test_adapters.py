"""Adapters, field by field, on fixtures written from the formats' documentation."""

from __future__ import annotations

import json
from pathlib import Path

from ingest.adapters import Context, registry, run
from schemas.dead_letters import DeadLetter
from schemas.events import Event
from tests.conftest import OBSERVED

FIXTURES = Path(__file__).parent / "fixtures"


def _run(adapter: str, fixture: str, **ctx: object) -> tuple[list[Event], list[DeadLetter]]:
    context = Context(producer=f"{adapter}@test", observed_at=OBSERVED, origin=fixture,
                      **ctx)  # type: ignore[arg-type]
    results = run(registry()[adapter], (FIXTURES / adapter / fixture).read_text(), context)
    events = [r for r in results if isinstance(r, Event)]
    dead = [r for r in results if isinstance(r, DeadLetter)]
    return events, dead


def test_alertmanager_firing_resolved_and_partial_payload() -> None:
    events, dead = _run("alertmanager", "ib_port_down_firing_and_resolved.json")
    assert [(e.type, e.entity, e.severity.value, e.cluster) for e in events] == [
        ("network.port_down", "leaf-05/p9", "critical", "cluster-a"),
        ("network.port_up", "leaf-05/p3", "info", "cluster-a")]
    down, up = events
    assert down.time.isoformat() == "2026-11-30T08:57:28.123000+00:00"
    assert up.time.isoformat() == "2026-11-30T07:04:10+00:00"  # a resolution is its end
    assert down.attributes["switch"] == "leaf-05" and down.attributes["port"] == "p9"
    assert down.id == "am-c0ffee01-2026-11-30T08:57:28.123Z-firing"
    assert down.message == "leaf-05 port p9 is down"
    assert '"fingerprint": "c0ffee01"' in down.attributes["raw"]
    # the unknown alert and the alert missing a label are dead-lettered, named
    assert [(d.field, d.stage) for d in dead] == [
        ("alerts[2].labels.alertname", "adapter.alertmanager"),
        ("alerts[3].labels.port", "adapter.alertmanager")]
    assert "FanSpeedLow" in dead[0].reason and "hunter2pw" not in dead[0].payload
    again, _ = _run("alertmanager", "ib_port_down_firing_and_resolved.json")
    assert [e.id for e in again] == [e.id for e in events]


def test_xid_lines_with_catalog_and_awkward_prefixes() -> None:
    events, dead = _run("xid", "kernel_mixed.log", cluster="cluster-a", node="node-shipper")
    assert [(e.attributes["xid"], e.node, e.attributes["class"], e.severity.value)
            for e in events] == [(79, "node-041", "gpu_hardware", "critical"),
                                 (48, "node-017", "gpu_hardware", "critical"),
                                 (94, "node-shipper", "gpu_hardware", "error")]
    xid79, xid48, xid94 = events
    assert xid79.time.isoformat() == "2026-11-30T08:57:34+00:00"  # syslog: no year, no zone
    assert xid79.entity == "node-041/pci-0000:9b:00" and xid79.scope.value == "gpu"
    assert "drain the node" in xid79.attributes["action"]
    assert xid48.time.isoformat() == "2026-11-30T09:12:01.500000+00:00"
    assert xid94.attributes["time_source"] == "observed" and xid94.time == OBSERVED
    assert [(d.field, d.event_ref) for d in dead] == [("line", "kernel_mixed.log:5")]


def test_training_log_lines() -> None:
    events, dead = _run("training-log", "rank_failure.log", cluster="cluster-a",
                        project="llm-pretrain", job_id="job-7b-001", attempt=1, node="node-041")
    got = [(e.type, e.attributes.get("rank"), e.attributes.get("step")) for e in events]
    assert got == [
        ("job.step", None, 2200),
        ("comm.nccl_timeout", 320, None),
        ("comm.nccl_timeout", 8, None),
        ("comm.nccl_timeout", 16, None),
        ("comm.nccl_error", None, None),
        ("comm.nccl_error", None, None),
        ("job.worker_exited", 320, None),
        # Lightning's `saving model to` and DeepSpeed's `Saving model checkpoint:` start one
        # save of step 2000 that the file never says finished: a save that started
        ("checkpoint.started", None, 2000),
        ("checkpoint.restored", None, 2000),
        ("job.oom", None, None),
    ]
    step, new, old, truncated, ib, system, exited, started, restored, oom = events
    assert step.attributes["loss"] == 2.761 and step.attributes["step_time_s"] == 1.21
    assert step.time.isoformat() == "2026-11-30T08:56:10.001000+00:00"
    assert (new.attributes["seq_num"], new.attributes["op_type"], new.attributes["timeout_ms"],
            new.attributes["ran_ms"]) == (88121, "ALLREDUCE", 600000, 600041)
    assert "seq_num" not in old.attributes and old.attributes["timeout_ms"] == 1800000
    assert truncated.attributes["seq_num"] == 88121 and "ran_ms" not in truncated.attributes
    assert ib.attributes["error"] == "NET/IB" and "error 12" in ib.attributes["detail"]
    assert system.attributes["error"] == "ncclSystemError"
    assert exited.node == "node-041" and exited.attributes["exit_code"] == 1
    assert exited.attributes["root_cause"] is True
    assert exited.time.isoformat() == "2026-11-30T08:57:50+00:00"
    assert started.attributes["path"].endswith("step-2000.ckpt")
    assert started.time.isoformat() == "2026-11-30T08:40:20+00:00"
    assert restored.attributes["path"].endswith("mp_rank_00_model_states.pt")
    assert oom.attributes["requested"] == "2.00 GiB" and oom.attributes["gpu"] == "3"
    assert all(e.project == "llm-pretrain" and e.attempt == 1 for e in events)
    # a checkpoint line without a step is dead-lettered, not guessed
    assert [d.field for d in dead] == ["attributes.step"]
    assert "abcdefghijklmnop1234" not in "".join(e.to_json() for e in events)


def test_training_log_without_job_context_is_rejected_whole() -> None:
    events, dead = _run("training-log", "rank_failure.log")
    assert events == [] and [d.field for d in dead] == ["job_id"]


def test_slurm_sacct_node_fail_requeue_and_versions() -> None:
    from ingest.slurm import expand_hostlist

    assert expand_hostlist("node-[001-003,010],gpu7") == [
        "node-001", "node-002", "node-003", "node-010", "gpu7"]
    events, dead = _run("slurm", "sacct_node_fail_requeue.json", cluster="fallback")
    assert [(e.job_id, e.type, e.attempt, e.project) for e in events] == [
        ("4242", "job.submitted", 2, "llm-pretrain"),
        ("4242", "job.started", 2, "llm-pretrain"),
        ("4242", "job.failed", 2, "llm-pretrain"),
        ("4243", "job.submitted", 1, "llm-eval"),
        ("4243", "job.started", 1, "llm-eval"),
        ("4243", "job.completed", 1, "llm-eval"),
        ("4244", "job.submitted", 1, "llm-eval"),
    ]
    submitted, started, failed = events[:3]
    assert submitted.attributes["gpus"] == 32 and submitted.attributes["queue"] == "gpu-large"
    assert started.attributes["nodes"] == ["node-001", "node-002", "node-003", "node-010"]
    assert started.time.isoformat() == "2026-11-30T08:12:00+00:00"
    assert (failed.attributes["exit_code"], failed.attributes["reason"]) == (1, "NODE_FAIL")
    assert failed.cluster == "cluster-a" and failed.id == "slurm-cluster-a-4242-2-job.failed"
    assert events[5].attributes["exit_code"] == 0 and events[5].cluster == "fallback"
    assert [(d.field, d.reason) for d in dead] == [
        ("jobs[2].state", "slurm: unknown Slurm state 'WEIRD_STATE'")]


def test_squeue_pending_reasons() -> None:
    events, dead = _run("slurm", "squeue_pending_reasons.json", cluster="cluster-a")
    pending = [(e.job_id, e.attributes["reason"]) for e in events if e.type == "job.pending"]
    assert pending == [("5001", "QOSMaxGRESPerUser"),
                       ("5002", "ReqNodeNotAvail, UnavailableNodes:node-041")]
    # 5003 has no account and no project from the shipper: rejected, named
    assert [d.field for d in dead] == ["jobs[2].account"]
    events, dead = _run("slurm", "squeue_pending_reasons.json", project="shared")
    assert {e.project for e in events} == {"shared"} and dead == []
    assert [e.attributes["nodes"] for e in events if e.type == "job.started"] == [
        ["node-030", "node-031"]]


def test_kubernetes_events_both_apis() -> None:
    from ingest.kubernetes_objects import job_of_pod

    assert job_of_pod("pretrain-7b-worker-3") == "pretrain-7b"
    assert job_of_pod("pretrain-7b-master-0") == "pretrain-7b"
    events, dead = _run("kubernetes", "event_list_scheduling_preemption.json",
                        cluster="cluster-a")
    assert [(e.type, e.project, e.job_id, e.entity) for e in events] == [
        ("job.pending", "llm-pretrain", "pretrain-7b", "pretrain-7b-worker-3"),
        ("job.preempted", "llm-pretrain", "pretrain-7b", "pretrain-7b-worker-3"),
        ("node.not_ready", "", None, "node-041")]
    pending, preempted, not_ready = events
    assert pending.attributes["reason"] == "Insufficient nvidia.com/gpu; untolerated taint"
    assert pending.time.isoformat() == "2026-11-30T08:03:05+00:00" and pending.id == "k8s-u-1-3"
    assert preempted.node == "node-041" and preempted.attributes["reason"] == "Preempted"
    assert not_ready.time.isoformat() == "2026-11-30T08:58:00+00:00"
    assert [(d.field, d.reason) for d in dead] == [
        ("items[3].reason", "kubernetes: no mapping for reason 'Pulled'")]


def test_kubernetes_watch_lines() -> None:
    from ingest.adapters import Context, registry, run

    event = json.loads((FIXTURES / "kubernetes/event_list_scheduling_preemption.json")
                       .read_text())["items"][2]
    lines = "\n".join(json.dumps({"type": t, "object": event}) for t in ("ADDED", "MODIFIED"))
    results = run(registry()["kubernetes"], lines,
                  Context(producer="k", observed_at=OBSERVED, cluster="c"))
    assert [type(r).__name__ for r in results] == ["Event", "Event"]
    assert results[0].id == results[1].id  # the same event seen twice: one id
