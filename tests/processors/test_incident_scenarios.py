"""Incident scenarios (issue 5): class, entity, owner, impacted jobs, lost GPU-hours (exact),
recovery, and that the same input gives the same log however it is batched."""

from __future__ import annotations

import pytest

from processors.incidents.model import IncidentEvent
from tests.processors.incident_kit import (
    at,
    ev,
    incidents,
    nodes,
    only,
    run,
    started,
    step,
)


def _shape(log: list[IncidentEvent]) -> list[tuple[str, str, int, str]]:
    return [(e.id, e.incident_id, e.seq, e.kind) for e in log]


def _jobs(inc: object) -> set[str]:
    return set(inc.jobs)  # type: ignore[attr-defined]


def ib_flap() -> list:  # type: ignore[type-arg]
    """A leaf port flaps under a 64-node job; NCCL's watchdog fires 10 min later on every
    node; the job restarts from its step-1000 checkpoint and passes its failure point."""
    everyone = nodes(1, 64)
    out = [started("pretrain", 1, at(0), everyone)]
    out += [step("pretrain", 1, at(m), 20 * m) for m in range(5, 50, 5)]
    out += [ev("checkpoint.saved", at(50), job="pretrain", attempt=1,
               attributes={"step": 1000, "path": "/ckpt/step-1000"}),
           step("pretrain", 1, at(55), 1100),
           step("pretrain", 1, at(60), 1200),
           ev("network.port_down", at(60, 10), scope="port", entity="leaf-01/p2"),
           ev("network.port_up", at(60, 15), scope="port", entity="leaf-01/p2"),
           ev("network.port_down", at(61), scope="port", entity="leaf-01/p2")]
    for i, node in enumerate(everyone):
        out.append(ev("comm.nccl_timeout", at(71, i * 0.05), job="pretrain", attempt=1,
                      node=node, entity=f"rank-{8 * i}",
                      attributes={"rank": 8 * i, "seq_num": 88121, "op_type": "ALLREDUCE",
                                  "timeout_ms": 600000}))
    out += [ev("job.failed", at(72), job="pretrain", attempt=1,
               attributes={"exit_code": 1, "reason": "NCCL timeout"}),
            ev("job.requeued", at(72, 10), job="pretrain", attempt=1),
            started("pretrain", 2, at(80), everyone),
            ev("checkpoint.restored", at(82), job="pretrain", attempt=2,
               attributes={"step": 1000, "path": "/ckpt/step-1000"}),
            step("pretrain", 2, at(85), 1001),
            step("pretrain", 2, at(92), 1120),
            step("pretrain", 2, at(100), 1250)]
    return out


def test_ib_flap_kills_a_64_node_job_that_restarts_from_checkpoint() -> None:
    log, _ = run(ib_flap())
    (inc,) = incidents(log)  # 64 ranks timing out and two flaps are one incident
    assert (inc.klass, inc.entity, inc.owner) == ("network", "leaf-01/p2", "network")
    assert inc.key == "network:leaf-01" and inc.signals == 2
    assert _jobs(inc) == {"llm-pretrain/pretrain/1"}
    job = inc.jobs["llm-pretrain/pretrain/1"]
    assert job.gpus == 512 and job.failure_step == 1200 and job.last_checkpoint_step == 1000
    # 512 GPUs x (checkpoint at +50 min -> progress resumed at +85 min) = 512 x 35 min
    assert inc.lost_gpu_hours == pytest.approx(512 * 35 / 60, abs=1e-6) == 298.666667
    assert inc.lost_steps == 200
    assert job.restarted_attempt == 2 and job.restored_step == 1000
    assert inc.recovery == "verified" and job.verified_at == at(100)
    assert inc.severity == "sev1"  # 512 GPUs
    assert inc.cause_entity == "leaf-01/p2" and inc.confidence == pytest.approx(0.75)
    assert inc.explanation.startswith(
        "leaf-01/p2 reported network.port_down (switch or NIC port went down) 650 s before "
        "the first comm.nccl_timeout of llm-pretrain/pretrain/1")
    assert "node-002, one of the attempt's own, is cabled to it (path leaf-01/p2 → node-002)" \
        in inc.explanation
    symptoms = [e for e in inc.evidence.values() if e.role == "symptom"]
    assert len(symptoms) == 65  # every rank's timeout and the failure, each once
    assert {e.role for e in inc.evidence.values()} == {"signal", "symptom", "recovery"}
    assert inc.evidence[inc.cause_event].type == "network.port_down"


def test_the_same_input_gives_the_same_log_however_batched() -> None:
    one_by_one, _ = run(ib_flap(), batch=1)
    big, _ = run(ib_flap(), batch=500)
    assert _shape(one_by_one) == _shape(big)
    again, _ = run(ib_flap(), batch=7)
    assert _shape(again) == _shape(one_by_one)


def test_a_leaf_switch_that_breaks_five_jobs_is_one_incident_with_five_jobs() -> None:
    events = [started(f"j{k}", 1, at(0), nodes(17 + 3 * k, 19 + 3 * k)) for k in range(5)]
    events.append(ev("network.port_down", at(30), scope="port", entity="leaf-03/p40"))
    for k in range(5):
        events.append(ev("comm.nccl_timeout", at(40, k), job=f"j{k}", attempt=1,
                         node=f"node-{17 + 3 * k:03d}", attributes={"rank": 0}))
    log, _ = run(events)
    inc = only(log, klass="network")
    assert len(incidents(log)) == 1 and inc.entity == "leaf-03/p40"
    assert _jobs(inc) == {f"llm-pretrain/j{k}/1" for k in range(5)}
    assert "sits under that switch" in inc.explanation


def test_uncorrectable_ecc_on_one_gpu() -> None:
    events = [started("ft", 1, at(0), nodes(41, 48)),
              ev("checkpoint.saved", at(30), job="ft", attempt=1,
                 attributes={"step": 300, "path": "/ckpt/300"}),
              step("ft", 1, at(40), 400),
              ev("node.ecc", at(41), scope="gpu", entity="node-041/gpu3", node="node-041",
                 attributes={"gpu": "3", "kind": "dbe", "count": 1}),
              ev("node.xid", at(41, 1), scope="gpu", entity="node-041/gpu3", node="node-041",
                 attributes={"xid": 48}),
              ev("job.worker_exited", at(41, 20), job="ft", attempt=1, node="node-041",
                 attributes={"rank": 3, "exit_code": 1}),
              ev("job.failed", at(42), job="ft", attempt=1, attributes={"exit_code": 1}),
              ev("job.requeued", at(42, 5), job="ft", attempt=1),
              started("ft", 2, at(50), nodes(49, 56)),
              ev("checkpoint.restored", at(52), job="ft", attempt=2, attributes={"step": 300}),
              step("ft", 2, at(55), 301),
              step("ft", 2, at(70), 450)]
    log, _ = run(events)
    (inc,) = incidents(log)
    assert (inc.klass, inc.entity, inc.owner) == ("gpu_hardware", "node-041/gpu3",
                                                  "hardware-ops")
    assert inc.key == "node:node-041" and inc.signals == 2
    assert _jobs(inc) == {"llm-pretrain/ft/1"}
    # 64 GPUs x (checkpoint at +30 min -> resumed at +55 min)
    assert inc.lost_gpu_hours == pytest.approx(64 * 25 / 60, abs=1e-6)
    assert inc.lost_steps == 100 and inc.recovery == "verified"
    assert inc.severity == "sev3"
    assert "holds that GPU" in inc.explanation and inc.confidence == pytest.approx(0.9)


def test_checkpoint_out_of_space_then_a_gpu_crash_hours_later() -> None:
    events = [started("ck", 1, at(0), nodes(17, 24))]
    for minute in range(5, 240, 5):  # progress every 5 min, step = 5 x minute
        events.append(step("ck", 1, at(minute), 5 * minute))
        if minute == 60:
            events.append(ev("checkpoint.saved", at(60, 1), job="ck", attempt=1,
                             attributes={"step": 300, "path": "/ckpt/300"}))
        if minute == 120:
            events += [ev("storage.io_error", at(120, 1), scope="target",
                          entity="scratch-OST0003",
                          attributes={"target": "OST0003", "error": "ENOSPC (rc=-28)"}),
                       ev("checkpoint.failed", at(120, 3), job="ck", attempt=1,
                          attributes={"step": 600, "reason": "No space left on device"})]
    events += [ev("node.xid", at(240), scope="gpu", entity="node-020/gpu0", node="node-020",
                  attributes={"xid": 79}),
               ev("job.worker_exited", at(240, 10), job="ck", attempt=1, node="node-020",
                  attributes={"rank": 24, "exit_code": 1}),
               ev("job.failed", at(241), job="ck", attempt=1),
               ev("job.requeued", at(241, 5), job="ck", attempt=1),
               started("ck", 2, at(260), nodes(25, 32)),
               ev("checkpoint.restored", at(262), job="ck", attempt=2, attributes={"step": 300})]
    events += [step("ck", 2, at(minute), 300 + 30 * (minute - 264))
               for minute in range(265, 305, 5)]
    log, _ = run(events)
    storage = only(log, klass="storage_capacity")
    gpu = only(log, klass="gpu_hardware")
    assert len(incidents(log)) == 2
    assert (storage.entity, storage.owner, storage.key) == ("scratch-OST0003", "storage",
                                                            "storage:lustre-scratch")
    assert storage.jobs["llm-pretrain/ck/1"].role == "degraded"
    assert (gpu.entity, gpu.owner) == ("node-020/gpu0", "hardware-ops")
    # total: 64 GPUs x (good checkpoint at 60:01 -> progress resumed at 265:00) = 12299 s;
    # the failed checkpoint (120:03) would have saved 3602 s of that: charged to storage
    assert storage.lost_gpu_hours == pytest.approx(64 * 3602 / 3600, abs=1e-5)
    assert gpu.lost_gpu_hours == pytest.approx(64 * (12299 - 3602) / 3600, abs=1e-5)
    assert storage.lost_gpu_hours + gpu.lost_gpu_hours == pytest.approx(64 * 12299 / 3600,
                                                                        abs=1e-5)
    assert gpu.lost_steps == 1175 - 300 and gpu.recovery == "verified"
    assert storage.recovery == ""  # the job did not die of it


def test_crash_loop_on_one_bad_node_across_requeues() -> None:
    bad = nodes(50, 53)
    events = [started("loop", 1, at(0), bad), step("loop", 1, at(5), 10)]
    for attempt, t in ((1, 10), (2, 20), (3, 30)):
        if attempt > 1:
            events += [started("loop", attempt, at(t - 5), bad),
                       step("loop", attempt, at(t - 3), 10 + attempt - 1)]
        events += [ev("node.xid", at(t), scope="gpu", entity="node-052/gpu1", node="node-052",
                      attributes={"xid": 79}),
                   ev("job.worker_exited", at(t, 5), job="loop", attempt=attempt,
                      node="node-052", attributes={"rank": 16, "exit_code": 1}),
                   ev("job.failed", at(t, 30), job="loop", attempt=attempt),
                   ev("job.requeued", at(t, 40), job="loop", attempt=attempt)]
    events.append(step("other", 1, at(61), 1))  # time passes: the restart deadline expires
    log, _ = run(events)
    (inc,) = incidents(log)
    assert (inc.klass, inc.entity, inc.owner) == ("gpu_hardware", "node-052/gpu1",
                                                  "hardware-ops")
    assert _jobs(inc) == {"llm-pretrain/loop/1", "llm-pretrain/loop/2", "llm-pretrain/loop/3"}
    assert inc.flags == {"repeat", "no_restart"} and inc.active
    # 96 GPUs -> sev3; a repeat and no restart within 30 min raise it twice
    assert inc.severity == "sev1" and "repeated on the same entity" in inc.severity_why
    # attempt 1: 32 GPUs x (no checkpoint: its start at 0 -> resumed at +17 min); attempt 2:
    # 32 x (+15 -> +27 min); attempt 3 never restarted
    assert inc.lost_gpu_hours == pytest.approx(32 * 17 / 60 + 32 * 12 / 60, abs=1e-5)
    assert inc.recovery == "awaiting_restart"


def test_a_node_behind_failures_across_jobs_gets_a_standing_incident() -> None:
    events = []
    for k, t in enumerate((0, 180, 360)):
        job = f"x{k}"
        events += [started(job, 1, at(t), nodes(57, 60)),
                   ev("node.xid", at(t + 10), scope="gpu", entity="node-060/gpu7",
                      node="node-060", attributes={"xid": 79}),
                   ev("job.worker_exited", at(t + 10, 5), job=job, attempt=1, node="node-060",
                      attributes={"rank": 24, "exit_code": 1})]
    log, _ = run(events)
    gpu = [i for i in incidents(log) if i.klass == "gpu_hardware"]
    lemon = only(log, klass="repeat_offender")
    assert len(gpu) == 3 and {len(i.jobs) for i in gpu} == {1}
    assert (lemon.entity, lemon.owner, lemon.key) == ("node-060", "hardware-ops",
                                                      "lemon:node-060")
    assert set(lemon.linked) == {i.id for i in gpu}
    assert _jobs(lemon) == {"llm-pretrain/x0/1", "llm-pretrain/x1/1", "llm-pretrain/x2/1"}
    assert lemon.lost_gpu_hours == 0  # linked, not charged twice


def _slow(with_storage: bool) -> list:  # type: ignore[type-arg]
    events = [started("slow", 1, at(0), nodes(33, 34))]
    for minute in range(1, 21):
        events.append(step("slow", 1, at(minute), minute * 10,
                           step_time_s=1.0 if minute <= 5 else 1.5))
        if with_storage and minute == 5:
            events.append(ev("storage.latency", at(5, 30), scope="target", entity="OST0005",
                             attributes={"target": "OST0005", "latency_ms": 3000}))
    return events


def test_fail_slow_with_no_error_anywhere() -> None:
    log, _ = run(_slow(with_storage=False))
    (inc,) = incidents(log)
    assert (inc.klass, inc.owner, inc.key) == ("fail_slow", "training-infra",
                                               "job:llm-pretrain/slow/1")
    assert inc.opened_at == at(16)  # slow from +6 min, for 10 min
    assert inc.explanation.startswith("No hardware, network, storage or scheduler signal")
    assert inc.confidence == pytest.approx(0.5) and inc.jobs["llm-pretrain/slow/1"].role == \
        "degraded"


def test_fail_slow_is_localised_to_a_storage_signal_in_its_fault_domain() -> None:
    log, _ = run(_slow(with_storage=True))
    (inc,) = incidents(log)
    assert (inc.klass, inc.entity, inc.owner) == ("storage_latency", "OST0005", "storage")
    assert "mounts the filesystem it serves" in inc.explanation


def test_user_code_oom_with_no_infrastructure_signal() -> None:
    on = nodes(5, 6)
    events = [started("oom", 1, at(0), on), step("oom", 1, at(19), 90),
              ev("job.oom", at(20), job="oom", attempt=1, node="node-005",
                 attributes={"rank": 3}),
              ev("job.worker_exited", at(20, 1), job="oom", attempt=1, node="node-005",
                 attributes={"rank": 3, "exit_code": 1})]
    events += [ev("comm.nccl_timeout", at(30, r), job="oom", attempt=1, node=on[r // 8],
                  attributes={"rank": r}) for r in range(16) if r != 3]
    events += [ev("job.failed", at(31), job="oom", attempt=1, attributes={"exit_code": 1}),
               step("other", 1, at(62), 1)]
    log, _ = run(events)
    (inc,) = incidents(log)
    assert (inc.klass, inc.entity, inc.owner) == ("oom", "llm-pretrain/oom/1",
                                                  "project:llm-pretrain")
    assert inc.explanation.startswith(
        "No hardware, network, storage or scheduler signal reached llm-pretrain/oom/1")
    assert "classified from the job's own evidence: the job ran out of GPU or host memory" \
        in inc.explanation
    assert _jobs(inc) == {"llm-pretrain/oom/1"} and inc.recovery == "awaiting_restart"
    assert "no_restart" in inc.flags and inc.lost_gpu_hours == 0
    assert len([e for e in inc.evidence.values() if e.role == "symptom"]) == 18


def test_a_late_infrastructure_signal_updates_the_job_incident() -> None:
    """The port-down alert arrives (Alertmanager delay) after the job's NCCL errors."""
    events = [started("late", 1, at(0), nodes(9, 10)),
              ev("comm.nccl_timeout", at(20), job="late", attempt=1, node="node-009",
                 attributes={"rank": 0}),
              ev("network.port_down", at(10), scope="port", entity="leaf-01/p9")]
    log, _ = run(events)
    (inc,) = incidents(log)
    assert (inc.klass, inc.entity, inc.owner) == ("network", "leaf-01/p9", "network")
    assert [e.kind for e in log].count("owner_assigned") == 2  # training-infra, then network


def test_a_new_attempt_overlapping_the_old_one_is_a_duplicate_run() -> None:
    events = [started("dup", 1, at(0), nodes(1, 2)),
              ev("node.xid", at(10), scope="gpu", entity="node-001/gpu0", node="node-001",
                 attributes={"xid": 79}),
              ev("job.worker_exited", at(10, 5), job="dup", attempt=1, node="node-001",
                 attributes={"rank": 0, "exit_code": 1}),
              started("dup", 2, at(12), nodes(3, 4)),  # attempt 1 never ended
              ev("job.failed", at(14), job="dup", attempt=1)]
    log, _ = run(events)
    (inc,) = incidents(log)
    assert "duplicate_run" in inc.flags
    assert inc.jobs["llm-pretrain/dup/1"].duplicate_run is True


def test_a_rank_storm_is_capped_evidence_not_thousands_of_references() -> None:
    events = [started("big", 1, at(0), nodes(1, 64))]
    events += [ev("comm.nccl_timeout", at(10, r * 0.001), job="big", attempt=1,
                  node=f"node-{r // 8 + 1:03d}", attributes={"rank": r}) for r in range(512)]
    log, _ = run(events, batch=100)
    (inc,) = incidents(log)
    assert len([e for e in inc.evidence.values() if e.type == "comm.nccl_timeout"]) == 64
