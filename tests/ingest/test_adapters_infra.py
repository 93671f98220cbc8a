"""Grafana, Kubernetes conditions, Slurm text, node/infra logs and CloudEvents, field by field."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ingest.adapters import AdapterConfig, Context, registry, run
from ingest.cloudevents import ce_id, from_binary
from schemas.dead_letters import DeadLetter
from schemas.events import Event
from tests.conftest import OBSERVED
from tests.ingest.test_adapters import FIXTURES, _run


def _attrs(event: Event) -> dict[str, object]:
    return {k: v for k, v in event.attributes.items() if k != "raw"}


def test_grafana_unified_reads_alerts_through_the_alert_mapping() -> None:
    events, dead = _run("grafana", "unified_firing_and_resolved.json")
    down, latency = events
    assert (down.type, down.entity, down.scope and down.scope.value, down.severity.value) == (
        "network.port_down", "leaf-07/12", "port", "critical")
    assert down.attributes["port"] == "12" and down.attributes["switch"] == "leaf-07"
    assert down.id == "grafana-a1b2c3d4e5f60718-2026-11-30T08:57:30Z-firing"
    assert down.time.isoformat() == "2026-11-30T08:57:30+00:00"
    assert down.cluster == "cluster-a" and down.attributes["org_id"] == 1
    # resolved: the end time, the mapping's value from Grafana's `values`
    assert latency.type == "storage.latency" and latency.attributes["resolved"] is True
    assert latency.time.isoformat() == "2026-11-30T07:40:00+00:00"
    assert latency.attributes["latency_ms"] == 850.0
    assert [(d.field, d.stage) for d in dead] == [("alerts[2].labels.alertname",
                                                    "adapter.grafana")]
    assert "DatasourceNoData" in dead[0].reason


def test_grafana_legacy_one_event_per_match_time_is_receipt() -> None:
    events, dead = _run("grafana", "legacy_alerting.json")
    assert [(e.type, e.entity) for e in events] == [("network.port_down", "leaf-03/7"),
                                                     ("network.port_down", "leaf-03/8")]
    assert all(e.time == OBSERVED and e.attributes["time_source"] == "observed" for e in events)
    assert events[0].id != events[1].id and events[0].id.startswith("grafana-legacy-")
    assert events[0].attributes["rule_id"] == 31
    assert [d.field for d in dead] == ["alerts[2].labels.port"]
    # a retry a few seconds later is the same event; the next minute is a new notification
    again, _ = _run("grafana", "legacy_alerting.json")
    assert [e.id for e in again] == [e.id for e in events]
    later = Context(producer="t", observed_at=OBSERVED.replace(minute=(OBSERVED.minute + 1) % 60),
                    origin="x")
    text = (FIXTURES / "grafana" / "legacy_alerting.json").read_text()
    moved = [r for r in run(registry()["grafana"], text, later) if isinstance(r, Event)]
    assert moved[0].id != events[0].id


def test_grafana_legacy_ok_resolves_and_no_data_is_named() -> None:
    ok = json.dumps({"ruleId": 31, "ruleName": "IBPortDown", "state": "ok", "evalMatches": [],
                     "tags": {"switch": "leaf-03", "port": "7"}})
    ctx = Context(producer="t", observed_at=OBSERVED, origin="body")
    (event,) = run(registry()["grafana"], ok, ctx)
    assert isinstance(event, Event) and event.type == "network.port_up"
    (letter,) = run(registry()["grafana"], ok.replace('"ok"', '"no_data"'), ctx)
    assert isinstance(letter, DeadLetter) and letter.field == "state"


def test_kueue_workload_conditions() -> None:
    events, dead = _run("kubernetes", "kueue_workloads.json")
    pretrain = [e for e in events if e.job_id == "pretrain-7b"]
    assert [(e.type, e.attributes.get("stage") or e.attributes.get("reason")) for e in pretrain] \
        == [("job.admitted", "quota_reserved"), ("job.admitted", "admitted"),
            ("job.started", None), ("job.preempted", "Preempted"), ("job.requeued", "Preempted")]
    assert {e.project for e in pretrain} == {"llm-pretrain"}
    assert {e.attempt for e in pretrain} == {2}  # requeueState.count + 1
    preempted = pretrain[3]
    assert preempted.attributes["preemption_reason"] == "InClusterQueue"  # merged condition
    assert preempted.id == "k8s-wl-3f2a1-Evicted-True-2026-11-30T11:00:00Z"
    assert pretrain[0].attributes["queue"] == "team-llm"
    (pending,) = [e for e in events if e.job_id == "eval-13b"]
    assert pending.type == "job.pending"
    assert pending.attributes["reason"] == "insufficient quota: nvidia.com/gpu (h100)"
    assert [d.field for d in dead] == ["items[1].status.conditions[1].type"]
    assert "Deactivated=True" in dead[0].reason


def test_kubeflow_and_volcano_conditions() -> None:
    events, dead = _run("kubernetes", "kubeflow_and_volcano.json")
    assert [(e.project, e.job_id, e.type) for e in events] == [
        ("llm-finetune", "finetune-13b", "job.submitted"),
        ("llm-finetune", "finetune-13b", "job.requeued"),
        ("vision", "resnet-dist", "job.pending"),
        ("vision", "resnet-dist", "job.admitted")]
    assert events[1].attributes["reason"] == "PyTorchJobRestarting"
    assert events[2].attributes["reason"] == "gang unschedulable: 3/4 tasks"
    assert events[3].attributes["queue"] == "vision-q"
    assert dead == []


def test_scontrol_reads_like_sacct_and_names_the_broken_record() -> None:
    events, dead = _run("scontrol", "show_job.txt", cluster="cluster-a")
    pending = [e for e in events if e.job_id == "881234"]
    assert [(e.type, e.attributes.get("reason")) for e in pending] == [
        ("job.submitted", None), ("job.pending", "QOSMaxGRESPerUser")]
    assert pending[0].attributes["gpus"] == 512 and pending[0].project == "llm-pretrain"
    assert pending[0].time.isoformat() == "2026-11-30T06:00:00+00:00"  # zone-less: UTC
    failed = [e for e in events if e.job_id == "880001"]
    assert [e.type for e in failed] == ["job.submitted", "job.started", "job.failed"]
    assert {e.attempt for e in failed} == {2}  # Restarts=1
    assert failed[1].attributes["nodes"] == ["node-041", "node-042"]
    assert failed[2].attributes["reason"] == "NODE_FAIL"
    assert failed[2].id == "slurm-cluster-a-880001-2-job.failed"  # same id as from sacct
    assert [(d.field, d.event_ref) for d in dead] == [("JobState", "show_job.txt:32")]


def test_slurmctld_lines() -> None:
    events, dead = _run("slurmctld", "slurmctld.log", cluster="cluster-a",
                        project="llm-finetune")
    assert [(e.type, e.entity or e.job_id, e.attributes.get("reason")) for e in events] == [
        ("job.started", "880001", None),
        ("node.not_ready", "node-041", "not responding"),
        ("node.not_ready", "node-042", "not responding"),
        ("job.requeued", "880001", "NODE_FAIL"),
        # the WTERMSIG 9 that follows the requeue is that attempt's end: not a second failure
        ("node.drained", "node-041", "Xid 79 GPU fell off the bus"),
        ("node.ready", "node-042", "responding")]
    assert events[0].attributes["nodes"] == ["node-041", "node-042"]
    requeued = events[3]
    assert requeued.attributes["failed_nodes"] == ["node-041"] and requeued.attempt is None
    assert requeued.time.isoformat() == "2026-11-30T08:57:30.004000+00:00"
    assert [(d.field, d.event_ref) for d in dead] == [("state", "slurmctld.log:8"),
                                                       ("line", "slurmctld.log:9")]
    again, _ = _run("slurmctld", "slurmctld.log", cluster="cluster-a", project="llm-finetune")
    assert [e.id for e in again] == [e.id for e in events]


@pytest.mark.parametrize("shape", ["journal", "iso-host"])
def test_slurmctld_lines_through_syslog_read_as_its_own_log(shape: str) -> None:
    """What rsyslog or journald write (`time host slurmctld[pid]: ...`) reads like
    slurmctld's own log: a hostlist's `] ` is not where the prefix ends."""
    own = (FIXTURES / "slurmctld" / "slurmctld.log").read_text().splitlines()
    lines = []
    for line in own:
        stamp, body = line[1:].split("] ", 1)
        lines.append(f"Nov 30 {stamp[11:19]} head slurmctld[4021]: {body}" if shape == "journal"
                     else f"{stamp}+00:00 head slurmctld[4021]: {body}")
    context = Context(producer="t", observed_at=OBSERVED, origin="x", cluster="cluster-a",
                      project="llm-finetune")
    shipped = [r for r in run(registry()["slurmctld"], "\n".join(lines), context)]
    events, _ = _run("slurmctld", "slurmctld.log", cluster="cluster-a", project="llm-finetune")

    def what(e: Event) -> tuple[object, ...]:
        at = e.time.replace(microsecond=0) if shape == "journal" else e.time
        return e.type, e.entity or e.job_id, at, e.attributes.get("reason")

    assert [what(e) for e in shipped if isinstance(e, Event)] == [what(e) for e in events]
    assert ("node.not_ready", "node-042") in {(e.type, e.entity) for e in shipped
                                              if isinstance(e, Event)}
    assert [d.field for d in shipped if isinstance(d, DeadLetter)] == ["state", "line"]


def test_slurmctld_job_lifecycle() -> None:
    events, dead = _run("slurmctld", "job_lifecycle.log", cluster="cluster-a",
                        project="llm-pretrain")
    assert not dead
    assert [(e.type, e.job_id, e.time.strftime("%H:%M:%S.%f")[:12]) for e in events] == [
        ("job.submitted", "880100", "07:00:00.001"), ("job.started", "880100", "07:00:05.120"),
        ("job.completed", "880100", "07:40:00.000"), ("job.submitted", "880101", "08:00:00.000"),
        ("job.started", "880101", "08:00:02.000"), ("job.failed", "880101", "08:30:00.000"),
        ("job.started", "880102", "09:00:00.000"), ("job.failed", "880102", "09:10:00.000"),
        ("job.started", "880103", "09:20:00.000"), ("job.cancelled", "880103", "09:25:00.000"),
        ("job.timeout", "880104", "09:30:00.000")]
    by = {(e.type, e.job_id): e for e in events}
    assert by[("job.started", "880100")].attributes["nodes"] == [
        "node-001", "node-002", "node-003", "node-004"]
    assert by[("job.completed", "880100")].attributes["exit_code"] == 0
    killed = by[("job.failed", "880101")]
    assert (killed.attributes["exit_code"], killed.attributes["reason"]) == (
        137, "WTERMSIG 9 (SIGKILL)")
    assert by[("job.failed", "880102")].attributes["failed_nodes"] == ["node-007"]
    assert by[("job.cancelled", "880103")].attributes["reason"] == "cancelled by uid 1000"
    assert by[("job.submitted", "880100")].attributes["priority"] == 4294901759


def test_slurmctld_requeue_needs_a_project() -> None:
    _, dead = _run("slurmctld", "slurmctld.log", cluster="cluster-a")
    assert "project" in [d.field for d in dead]


def test_node_log_kernel_lines() -> None:
    events, dead = _run("node-log", "kernel_infra.log")
    got = [(e.type, e.scope and e.scope.value, e.entity, e.node) for e in events]
    assert got[:5] == [
        ("network.port_down", "nic", "node-041/ibp59s0", "node-041"),
        ("network.port_down", "nic", "node-041/module0", "node-041"),
        ("network.link_errors", "nic", "node-041/module0", "node-041"),
        ("node.xid", "gpu", "node-041/pci-0000:9b:00", "node-041"),
        ("network.port_up", "nic", "node-041/ibp59s0", "node-041")]
    assert events[1].attributes["pci"] == "0000:3b:00.0"
    assert events[2].attributes["reason"] == "Cable error"
    by_type = [(e.type, e.entity, _attrs(e).get("target"), _attrs(e).get("error")) for e in
               events[5:]]
    assert by_type == [
        ("storage.unavailable", "scratch-OST0003", "OST0003", None),
        ("storage.latency", "scratch-OST0003", "OST0003", None),
        ("storage.available", "scratch-OST0003", "OST0003", None),
        ("storage.io_error", "scratch-OST0005", "OST0005", "ENOSPC (rc=-28)"),
        ("storage.io_error", "scratch-OST0005", "OST0005", "evicted"),
        ("storage.io_error", "node-012", None, "timed out"),
        ("storage.io_error", "node-012", None, "timed out"),
        ("storage.unavailable", "home01", "home01", None),
        ("storage.available", "home01", "home01", None)]
    assert events[6].attributes["latency_ms"] == 45000.0  # dl - sent
    assert events[5].attributes["server"] == "10.0.0.12@o2ib"
    assert events[10].attributes["server"] == "" and events[11].attributes["layer"] == "lnet"
    assert events[12].attributes["server"] == "home01.example.com"
    assert events[12].time.isoformat() == "2026-11-30T12:00:01+00:00"
    assert [d.field for d in dead] == ["line"]  # the truncated Xid line


def test_mlx5_module_events_with_the_function_prefix_of_newer_kernels() -> None:
    """`mlx5_core_info` prints `function:line:(pid N): ` before the message since 5.x."""
    text = ("Dec  1 10:00:00 gpu-node-07 kernel: mlx5_core 0000:17:00.0: "
            "mlx5_port_module_event:1170:(pid 0): Port module event: module 0, Cable unplugged\n"
            "Dec  1 10:00:09 gpu-node-07 kernel: mlx5_core 0000:17:00.0: "
            "mlx5_port_module_event:1170:(pid 0): Port module event: module 0, Cable plugged")
    context = Context(producer="t", observed_at=OBSERVED, origin="x", cluster="c")
    events = [r for r in run(registry()["node-log"], text, context) if isinstance(r, Event)]
    assert [(e.type, e.entity, e.attributes["pci"]) for e in events] == [
        ("network.port_down", "gpu-node-07/module0", "0000:17:00.0"),
        ("network.port_up", "gpu-node-07/module0", "0000:17:00.0")]


def test_node_log_gpfs_needs_the_shipper_node() -> None:
    events, dead = _run("node-log", "mmfs.log", node="node-041")
    assert [(e.type, e.entity, e.time.isoformat()) for e in events] == [
        ("storage.io_error", "gpfs01", "2026-11-30T10:15:42.560000+00:00"),
        ("storage.unavailable", "node-041", "2026-11-30T10:16:02+00:00"),
        ("storage.io_error", "gpfs01", "2026-11-30T10:16:30+00:00")]
    assert events[0].attributes["filesystem"] == "gpfs01" and not dead
    _, dead = _run("node-log", "mmfs.log")
    assert [d.field for d in dead] == ["node"] * 3


def test_node_log_slowdown_carries_the_job() -> None:
    events, _ = _run("node-log", "uploader.log", node="node-041", project="llm-pretrain",
                     job_id="job-7b-001", attempt=1)
    assert [(e.type, e.job_id, e.attempt, _attrs(e)["op"], _attrs(e)["exhausted"],
             e.entity) for e in events] == [
        ("storage.throttled", "job-7b-001", 1, "UploadPart", False, None),
        ("storage.throttled", "job-7b-001", 1, "PutObject", True, "bucket-ckpt")]


def test_dcgm_health_table_is_one_record_per_subsystem() -> None:
    events, dead = _run("node-log", "dcgm_health.txt", node="node-041")
    assert [(e.type, e.entity, _attrs(e)["system"], _attrs(e)["status"], e.severity.value)
            for e in events] == [
        ("node.health", "node-041/gpu3", "memory", "failure", "critical"),
        ("node.health", "node-041/gpu5", "pcie", "warning", "warning")]
    assert events[0].message == "A double-bit ECC error has occurred on GPU 3."
    assert events[1].message.startswith("Detected more than 8 PCIe replays per minute for "
                                         "GPU 5: 12. Reconnect PCIe card.")
    assert events[1].message.endswith("continues")  # the wrapped rows are joined
    assert not dead


def test_cloudevents_structured_batch_and_mapping(tmp_path: Path) -> None:
    (step,), _ = _run("cloudevents", "structured.json")
    assert (step.type, step.project, step.job_id, step.attempt, step.attributes["step"]) == (
        "job.step", "llm-pretrain", "job-7b-001", 1, 12450)
    assert step.id == ce_id("urn:trainer:llm-pretrain/job-7b-001",
                            "7d0c7a58-3f1b-4f0e-9a56-0c9f0e2b7d11")
    assert step.attributes["ce_subject"] == "rank-0"
    events, dead = _run("cloudevents", "batch.json")
    assert [(e.type, e.attributes.get("step")) for e in events] == [
        ("checkpoint.saved", 12000), ("job.step", 12460)]  # the second from data_base64
    assert [d.field for d in dead] == ["[1].type", "[2].specversion", "[3].type"]
    mapping = tmp_path / "ce.yaml"
    mapping.write_text("com.example.ufm.port.down:\n  type: network.port_down\n"
                       "  scope: port\n  entity: '{switch}/{port}'\n"
                       "  attributes: {switch: '{switch}', port: '{port}'}\n")
    config = AdapterConfig.load(cloudevents_mapping=str(mapping))
    ctx = Context(producer="t", observed_at=OBSERVED, origin="batch.json")
    results = run(registry(config)["cloudevents"],
                  (FIXTURES / "cloudevents" / "batch.json").read_text(), ctx)
    mapped = [r for r in results if isinstance(r, Event) and r.type == "network.port_down"]
    assert [(e.entity, e.attributes["port"]) for e in mapped] == [("leaf-07/12", "12")]


def test_cloudevents_binary_mode_headers() -> None:
    headers = {"ce-specversion": "1.0", "ce-id": "x1", "ce-source": "/trainer",
               "ce-type": "job.step", "ce-time": "2026-11-30T08:00:00Z",
               "Content-Type": "application/json"}
    body = b'{"project": "p", "job_id": "j", "attributes": {"step": 3}}'
    ctx = Context(producer="t", observed_at=OBSERVED, origin="body")
    (event,) = run(registry()["cloudevents"], from_binary(headers, body), ctx)
    assert isinstance(event, Event) and event.attributes["step"] == 3


def test_mapping_files_are_validated_at_load(tmp_path: Path) -> None:
    bad = tmp_path / "am.yaml"
    bad.write_text("IBPortDown:\n  type: network.down\n")
    with pytest.raises(ValueError, match="IBPortDown: `type` must be a jobtrail event type"):
        AdapterConfig.load(alert_mapping=str(bad))
    good = tmp_path / "good.yaml"
    good.write_text("PDULost:\n  type: node.not_ready\n  scope: node\n  entity: '{node}'\n")
    config = AdapterConfig.load(alert_mapping=str(good))
    assert config.alert_mapping is not None and "IBPortDown" in config.alert_mapping
    payload = json.dumps({"version": "4", "status": "firing", "alerts": [
        {"status": "firing", "labels": {"alertname": "PDULost", "node": "node-009"},
         "startsAt": "2026-11-30T08:00:00Z", "fingerprint": "f1"}]})
    ctx = replace(Context(producer="t", observed_at=OBSERVED), origin="body")
    (event,) = run(registry(config)["alertmanager"], payload, ctx)
    assert isinstance(event, Event) and (event.type, event.entity) == ("node.not_ready",
                                                                        "node-009")


def test_example_mapping_files_load() -> None:
    root = Path(__file__).parents[2] / "examples"
    config = AdapterConfig.load(str(root / "alert-mapping.yaml"),
                                str(root / "cloudevents-mapping.yaml"))
    assert config.alert_mapping and "PDUPowerLost" in config.alert_mapping
    assert config.cloudevents_mapping and "com.example.ufm.port.up" in config.cloudevents_mapping


def test_slurmctld_requeue_per_request_starts_a_new_attempt_on_the_new_nodes() -> None:
    """Issue 27 (scheduler truth): `_job_complete: requeue JobId=N per user/system request`
    then a new `sched: Allocate JobId=N` is attempt 2 on the new node list; the NHC drain
    reason names the Xid it saw."""
    from processors.attempts import evolve

    events, dead = _run("slurmctld", "requeue_new_allocation.log", cluster="cluster-a",
                        project="llm-pretrain")
    assert not dead
    assert [(e.type, e.job_id or e.entity) for e in events] == [
        ("job.submitted", "880200"), ("job.started", "880200"), ("node.drained", "node-012"),
        ("job.failed", "880200"), ("job.requeued", "880200"), ("job.started", "880200"),
        ("job.completed", "880200")]  # the new attempt's exit is its own, not skipped
    drained = events[2]
    assert drained.attributes["xid"] == 79 and "NHC" in drained.attributes["reason"]
    assert events[4].attributes["detail"] == "user/system request"
    job = None
    for event in events:
        job, _ = evolve(job, event)
    assert job is not None
    first, second = job.attempts[1], job.attempts[2]
    assert (first.nodes, first.outcome) == (("node-011", "node-012"), "failed")
    assert (second.nodes, second.outcome) == (("node-011", "node-013"), "completed")
    assert second.started_at is not None and second.started_at.isoformat() == \
        "2026-11-30T10:41:00+00:00"


def _ports(text: str) -> list[tuple[str, str]]:
    ctx = Context(producer="test", observed_at=OBSERVED, node="gpu-node-3")
    return [(e.type, e.entity) for e in run(registry()["ibstat"], text, ctx)
            if isinstance(e, Event)]


def test_ibdev2netdev_down_is_a_port_down_only_when_it_says_so() -> None:
    """Plain ibdev2netdev prints its netdev's state: `(Down)` on a host without IPoIB is no
    port event; among IPoIB netdevs that are up, or after `(Up)`, it is; `-v` prints the
    port's own state, which is read as ibstat's."""
    no_ipoib = "mlx5_0 port 1 ==> ib0 (Down)\nmlx5_1 port 1 ==> ib1 (Down)\n"
    assert _ports(no_ipoib) == []
    one_of_four = "".join(f"mlx5_{i} port 1 ==> ib{i} ({'Down' if i == 2 else 'Up'})\n"
                          for i in range(4))
    assert _ports(one_of_four) == [("network.port_down", "gpu-node-3/mlx5_2/1")]
    roce_second_port = "mlx5_0 port 1 ==> ens1f0np0 (Up)\nmlx5_1 port 1 ==> ens1f1np1 (Down)\n"
    assert _ports(roce_second_port) == []
    went_down = ("2026-11-30T08:10:00+00:00\nmlx5_1 port 1 ==> ens1f1np1 (Up)\n"
                 "2026-11-30T08:11:00+00:00\nmlx5_1 port 1 ==> ens1f1np1 (Down)\n")
    assert _ports(went_down) == [("network.port_down", "gpu-node-3/mlx5_1/1")]
    verbose = ("0000:3b:00.0 mlx5_0 (MT4123 - MCX653105A-HDAT) CX653105A fw 20.28.1002 port 1 "
               "(ACTIVE) ==> ib0 (Down)\n"
               "0000:86:00.0 mlx5_1 (MT4123 - MCX653105A-HDAT) CX653105A fw 20.28.1002 port 1 "
               "(DOWN) ==> ib1 (Down)\n")
    assert _ports(verbose) == [("network.port_down", "gpu-node-3/mlx5_1/1")]


def test_the_cluster_s_own_pods_are_not_training_jobs() -> None:
    """`kubectl get pods -n gpu-operator` (the namespace read from the pasted command), a
    NAMESPACE column of kube-system / gpu-operator, or a driver daemonset in `default`: their
    CrashLoopBackOff is not a training job's worker exit; a training pod's still is."""
    ctx = Context(producer="test", observed_at=OBSERVED)
    table = ("NAME                           READY   STATUS             RESTARTS   AGE\n"
             "{pod:<31}0/1     CrashLoopBackOff   12         67m\n")

    def exits(command: str, pod: str) -> list[tuple[str, str, str]]:
        got = run(registry()["kubernetes"], f"$ {command}\n" + table.format(pod=pod), ctx)
        assert not [r for r in got if isinstance(r, DeadLetter)]
        return [(e.type, e.project, e.job_id or "") for e in got if isinstance(e, Event)]

    assert exits("kubectl get pods -n gpu-operator", "gpu-operator-657c5b798d-xgvgc") == []
    assert exits("kubectl get pods --namespace=kube-system", "calico-node-cs2dp") == []
    assert exits("kubectl get pods -n default", "nvidia-driver-daemonset-8r8s6") == []
    assert exits("kubectl get pods -n research", "llama-train-worker-3") == [
        ("job.worker_exited", "research", "llama-train")]
