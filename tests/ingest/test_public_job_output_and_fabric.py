"""Public copies (tests/ingest/fixtures/public/SOURCES.md) of what Slurm writes into a job's
output (`ingest/slurm_output.py`: one event per ending, at the time the line states, the cause
kept apart from its consequences) and of InfiniBand state tools in every shape."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from ingest.adapters import Context, registry, run
from schemas.dead_letters import DeadLetter
from schemas.events import Event
from tests.ingest.public_corpus import PUBLIC, READ_AT, Outcome, Sample, read, samples

SAMPLES = {s.file: s for s in samples()}


def _read(file: str) -> Outcome:
    return read(SAMPLES[file])


def _what(e: Event) -> tuple[Any, ...]:
    return e.type, e.time, e.node, e.entity, e.attributes.get("reason")


def _at(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc,arg-type]


def test_a_time_limit_is_one_timeout_at_the_time_slurm_states() -> None:
    (ended,) = _read("slurm-output/srun_job_and_step_cancelled_time_limit.txt").events
    assert _what(ended) == ("job.timeout", _at(2024, 4, 20, 9, 9, 37), "gpu-node-1", None,
                            "TIMEOUT")  # the JOB and the STEP line: one ending
    assert ended.attributes["slurm_job_id"] == "494583" and ended.job_id == "job-1"
    assert "reported_on" not in ended.attributes  # `ON ...`: the author left the node out
    # every task of the cancelled step is Terminated: consequences, not events
    (step,) = _read("slurm-output/srun_force_terminated_step_time_limit_tasks.txt").events
    assert _what(step)[:2] == ("job.timeout", _at(2020, 7, 3, 2, 59, 56))
    assert (step.attributes["slurm_step"], step.attributes["reported_on"]) == ("0", "nid01934")


def test_an_oom_kill_is_one_event_on_the_task_s_node_at_the_step_s_end() -> None:
    (oom,) = _read("slurm-output/srun_oom_kill_step_cancelled.txt").events
    assert _what(oom) == ("job.oom", _at(2021, 10, 27, 19, 35, 36), "Orion-01-01", "rank-4",
                          None)
    assert (oom.attributes["kind"], oom.attributes["oom_kills"], oom.attributes["rank"],
            oom.attributes["slurm_step"]) == ("host", 1, 4, "3495064.0")
    assert oom.attributes["time_source"] == "next_line"  # the CANCELLED AT line's time
    # Slurm 23's wording, inside another tool's output: the time of the line before it
    (newer,) = _read("slurm-output/snakemake_oom_kill_events_stepid.txt").events
    assert (newer.type, newer.time, newer.attributes["oom_kills"], newer.attributes["rank"]) \
        == ("job.oom", _at(2025, 11, 12, 11, 41), 2, 0)


def test_a_task_that_died_is_the_event_not_the_step_srun_cancelled_after_it() -> None:
    (died,) = _read("slurm-output/srun_bus_error_step_cancelled.txt").events
    assert _what(died) == ("job.worker_exited", _at(2021, 10, 27, 20, 22, 22), "Orion-18-69",
                           "rank-289", None)
    assert died.attributes["signal"] == "SIGBUS"


def test_legacy_cancel_and_a_prolog_failure() -> None:
    (cancelled,) = _read("slurm-output/slurmstepd_legacy_cancelled_on_suffix_cgroup.txt").events
    assert _what(cancelled) == ("job.cancelled", _at(2015, 2, 4, 6, 33, 25), "gpu-node-1", None,
                                "cancelled")
    assert cancelled.attributes["reported_on"] == "sh-2-3"
    (prolog,) = _read("slurm-output/salloc_prolog_failure_revoked.txt").events
    assert (prolog.type, prolog.node, prolog.attributes["reason"],
            prolog.attributes["failed_nodes"]) == ("job.failed", "k003-006", "Prolog failure",
                                                   ["k003-006"])


def test_nccl_warn_lines_with_a_source_location_keep_their_host_and_device() -> None:
    two = _read("training/nccl_warn_net_ib_error4_vendor81_multi_host.txt").events
    assert [(e.type, e.node, e.attributes["device"], e.attributes["pid"]) for e in two] == [
        ("comm.nccl_error", "H100-1", "1", 9821), ("comm.nccl_error", "H100-5", "3", 68738)]
    proxy = _read("training/nccl_warn_net_ib_status12_vendor129_proxy.txt").events
    assert {(e.node, e.attributes["device"]) for e in proxy} == {("kp-ddp-worker-0", "4")}
    assert len(proxy) == 3


def test_a_job_s_output_pasted_without_its_job_names_the_missing_field() -> None:
    text = (PUBLIC / "slurm-output" / "srun_oom_kill_step_cancelled.txt").read_text()
    ctx = Context(producer="public", observed_at=READ_AT, cluster="c", origin="paste")
    out = run(registry()["auto"], text, ctx)
    assert not [o for o in out if isinstance(o, Event)]
    (letter,) = [o for o in out if isinstance(o, DeadLetter)]
    assert letter.field == "job_id" and "--project/--job" in letter.reason
    assert "Out Of Memory" in str(letter.payload)


def test_every_slurm_output_sample_is_listed() -> None:
    assert {s.file for s in SAMPLES.values() if s.family == "slurm-output"} == {
        f"slurm-output/{p.name}" for p in (PUBLIC / "slurm-output").iterdir()}
    assert all(isinstance(s, Sample) for s in SAMPLES.values())


def test_infiniband_state_in_every_shape_and_auto_routes_it_to_ibstat() -> None:
    """`State: Down` looks like kubectl's describe: auto used to hand these to the kubernetes
    adapter, which read nothing and said nothing."""
    def downs(file: str, fmt: str | None = None) -> list[tuple[str, Any]]:
        return [(e.entity, e.attributes.get("reason")) for e in read(SAMPLES[file], fmt).events
                if e.type == "network.port_down"]

    for fmt in (None, "auto"):
        assert downs("ib/ibstat_mlx5_7_state_down_physical_linkup.txt", fmt) == [
            ("gpu-node-1/mlx5_7/1", None)]
        assert downs("ib/ibstat_multi_ca_roce_active_and_ib_down.txt", fmt) == [
            ("gpu-node-1/mlx5_10/1", None)]  # the two Active RoCE ports are no event
        assert downs("ib/ibv_devinfo_port_down.txt", fmt) == [("gpu-node-1/mlx5_0/1", None)]
        assert downs("ib/ibstat_active_then_ibpanic_missing_device.txt", fmt) == [
            ("gpu-node-1/mlx5_8", "missing: No such file or directory")]
        # a healthy pure-IB host: "up/down here is ... about the IP / ethernet side of
        # things" (the sample's author); no IPoIB, and the CX-6s' second ports uncabled
        assert downs("ib/ibdev2netdev_column_commented.txt", fmt) == []


def test_the_time_inside_what_was_put_before_a_line() -> None:
    """A Markdown quote, a launcher's `[pid] `, a collector's minute-resolution date: the
    line inside keeps its own time (they were stamped with the time they were read)."""
    quoted = _read("kernel/dmesg_ctime_xid13_109_md_quoted.txt").events
    assert [(e.attributes["xid"], e.time) for e in quoted] == [
        (13, _at(2024, 8, 30, 11, 43, 9))] * 3 + [(109, _at(2024, 8, 30, 11, 43, 14))]
    pid = _read("training/watchdog_timeout_pid_prefixed_ranks.txt").events
    assert [(e.entity, e.time.strftime("%m-%d %H:%M:%S"), e.attributes["time_source"])
            for e in pid] == [("rank-0", "03-21 02:07:08", "line_year"),
                              ("rank-4", "03-21 02:07:08", "line_year")]
    # the collector's date gives the glog time its year; `[rank13]:` is the global rank,
    # `[Rank 1]` the rank in process group 11
    dated = _read("training/watchdog_alltoall_dated_prefix_socket_info.txt").events
    assert [(e.entity, e.attributes["pg_rank"], e.time.year, e.attributes["time_source"])
            for e in dated] == [("rank-13", 1, 2025, "line"), ("rank-15", 1, 2025, "line")]


def test_repeated_prefixes_are_read_once_not_recursed_into() -> None:
    """`<3><3><3>...` or `kern:err:kern:err:...` over a whole line: read as one line (it was
    a RecursionError, which dead-lettered the whole paste as "nested too deep")."""
    for junk in ("<3>" * 5000, "kern:err:" * 1800, "> " * 8000, " 2025-02-18 12:54" * 900):
        text = f"{junk}x\nDec  1 10:00:00 gpu-node-07 kernel: nfs: server fs01 not responding"
        ctx = Context(producer="t", observed_at=READ_AT, cluster="c", origin="x")
        out = run(registry()["node-log"], text, ctx)
        assert [(type(o).__name__, getattr(o, "entity", None)) for o in out] == [
            ("Event", "fs01")]


def test_scontrol_show_node_says_what_is_wrong_and_since_when() -> None:
    for fmt in (None, "auto"):
        (drained,) = read(SAMPLES["slurm-text/scontrol_show_node_idle_drain_gres_gpu_count.txt"],
                          fmt).events
        assert _what(drained) == ("node.drained", _at(2024, 12, 19, 11, 3, 34),
                                  "yigou-dev-102-68", "yigou-dev-102-68",
                                  "gres/gpu count reported lower than configured (0 < 1)")
        assert (drained.attributes["set_by"], drained.attributes["state"]) == ("slurm",
                                                                               "IDLE+DRAIN")
        (down,) = read(SAMPLES["slurm-text/scontrol_show_node_down_not_responding.txt"],
                       fmt).events
        assert _what(down) == ("node.not_ready", READ_AT, "gpu02", "gpu02", "not responding")
        assert down.attributes["time_source"] == "observed"  # the record says no time


def test_a_job_record_pasted_without_its_first_line_is_the_shipper_s_job() -> None:
    """The JobId line cut off and the state in Markdown bold, as pasted in an issue."""
    for fmt in (None, "auto"):
        events = read(SAMPLES["slurm-text/scontrol_show_job_failed_md_bold.txt"], fmt).events
        assert [(e.type, e.job_id, e.time) for e in events] == [
            ("job.submitted", "job-1", _at(2018, 11, 1, 14, 54, 2)),
            ("job.started", "job-1", _at(2018, 11, 1, 14, 54, 3)),
            ("job.failed", "job-1", _at(2018, 11, 1, 14, 54, 3))]
        assert events[-1].attributes["reason"] == "NonZeroExitCode"


def test_sinfo_long_listings_keep_the_state_and_the_time_above_the_table() -> None:
    """`sinfo -lNe` has a REASON and a STATE: `down*` is not a drain; the date line sinfo -l
    prints above its table is when the listing was taken."""
    for fmt in (None, "auto"):
        down = read(SAMPLES["slurm-text/sinfo_lNe_down_not_responding.txt"], fmt).events
        assert [_what(e) for e in down] == [
            ("node.not_ready", _at(2016, 6, 9, 22, 22, 36), f"compute00{i}", f"compute00{i}",
             "Not responding") for i in range(1, 5)]
        (drained,) = read(SAMPLES["slurm-text/sinfo_node_long_drained_low_realmemory.txt"],
                          fmt).events
        assert _what(drained) == ("node.drained", _at(2022, 2, 3, 22, 23, 32), "ip-172-31-79-91",
                                  "ip-172-31-79-91", "Low RealMemory")
    table = _read("slurm-text/sinfo_partitions_drng_fail_maint.txt").events
    kinds = {(e.type, e.attributes["reason"]) for e in table}
    assert kinds == {("node.drained", "drng@"), ("node.not_ready", "fail*")}
    assert len([e for e in table if e.type == "node.not_ready"]) == 4  # f005, c[020-022]


def test_a_gpu_lost_without_an_xid_is_xid_79_or_119_once() -> None:
    for fmt in (None, "node-log", "auto"):
        (multi,) = read(SAMPLES["kernel/fallen_off_bus_multiline_dmesg.txt"], fmt).events
        (legacy,) = read(SAMPLES["kernel/dmesg_gpu_at_fallen_off_bus_legacy.txt"], fmt).events
        assert [(e.attributes["xid"], e.entity, e.attributes["xid_less"])
                for e in (multi, legacy)] == [(79, "gpu-node-1/pci-0000:b3:00", True),
                                              (79, "gpu-node-1/pci-0000:01:00", True)]
        (gsp,) = read(SAMPLES["kernel/dmesg_gsp_heartbeat_timeout_h100.txt"], fmt).events
        assert (gsp.attributes["xid"], gsp.entity, gsp.attributes["class"]) == (
            119, "gpu-node-1/gpu6", "gpu_hardware")
        # with the Xid line printed, the banner and the GSP lines are its company, not
        # events or dead letters of their own
        named = read(SAMPLES["kernel/journalctl_xid119_gsp_timeout.txt"], fmt)
        assert [(e.attributes["xid"], e.node) for e in named.events] == [(119, "banana")]
        assert not named.letters


def test_hung_tasks_say_what_they_wait_in() -> None:
    for fmt in (None, "auto"):
        (uvm,) = read(SAMPLES["kernel/hung_task_nvc_driver_uvm_mutex.txt"], fmt).events
        assert (uvm.type, uvm.attributes["check"], uvm.attributes["process"],
                uvm.attributes["blocked_s"], uvm.attributes["waits_in"]) == (
            "node.health", "hung_task", "nvc:[driver]", 120, "nvidia_uvm")
        # `grep -r`'s file name before the syslog line: the host and time are the line's
        (nfs,) = read(SAMPLES["kernel/grep_messages_hung_task_nfs_flush.txt"], fmt).events
        assert (nfs.node, nfs.time.strftime("%m-%d %H:%M:%S"), nfs.attributes["pid"]) == (
            "ip-172-31-27-211", "06-17 20:18:09", 80601)


def test_pdsh_output_names_each_line_s_host() -> None:
    text = ("gpu03: [Mon Dec  1 10:00:00 2025] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU "
            "has fallen off the bus.\n"
            "gpu04: [Mon Dec  1 10:00:01 2025] NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE\n")
    ctx = Context(producer="t", observed_at=READ_AT, cluster="c", origin="x")
    events = [o for o in run(registry()["auto"], text, ctx) if isinstance(o, Event)]
    assert [(e.node, e.attributes["xid"], e.time) for e in events] == [
        ("gpu03", 79, _at(2025, 12, 1, 10, 0, 0)), ("gpu04", 48, _at(2025, 12, 1, 10, 0, 1))]


def test_dcgmi_diag_says_the_fabric_is_down_and_reads_error_rows() -> None:
    """All GPUs 'failing' memory because CUDA cannot start (`system not yet initialized`) is
    the NVSwitch fabric not up, not eight bad GPUs; a DCGM 3 `Error` row is its GPU's event;
    a word DCGM cut at the cell's end is whole again."""
    for fmt in (None, "auto"):
        (fabric,) = read(SAMPLES["gpu-health/dcgmi_diag_r3_fail_early_cuinit.txt"], fmt).events
        assert (fabric.entity, fabric.attributes["system"], fabric.attributes["class"],
                fabric.attributes["failed_test"]) == ("gpu-node-1", "fabric_manager", "nvlink",
                                                      "gpu_memory")
        assert "Restart DCGM" in fabric.message and "initialize CUDA" in fabric.message
        (remap,) = read(SAMPLES["gpu-health/dcgmi_diag_uncorrectable_row_remap_pending.txt"],
                        fmt).events
        assert (remap.entity, remap.attributes["system"], remap.message) == (
            "gpu-node-1/gpu3", "row_remap",
            "GPU 3 has uncorrectable memory errors and row remappings are pending")


def test_a_fabric_manager_failure_is_an_nvlink_signal_not_a_gpu_one() -> None:
    from processors.incidents.rules import load_rules

    rules = load_rules()
    fabric = rules.signal_rule("node.health", {"system": "fabric_manager", "status": "failure"},
                               "")
    assert fabric is not None and fabric.klass == "nvlink"
    hung = {"system": "kernel", "status": "warning", "check": "hung_task"}
    assert rules.signal_rule("node.health", hung, "") is None  # evidence, not a fault


@pytest.mark.parametrize(("line", "type_", "error"), [
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "job.worker_exited",
     "ecc"),
    ("[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered",
     "job.worker_exited", "illegal_memory"),
    ("OSError: [Errno 28] No space left on device: '/ckpt/step_1000/model.pt'",
     "job.worker_exited", "enospc"),
    ("OSError: [Errno 5] Input/output error: '/lustre/data/shard_0001.bin'",
     "job.worker_exited", "io_error"),
    ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
     "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for "
     "details), NCCL version 2.19.3", "comm.nccl_error", "unhandled system error"),
])
def test_the_exception_that_ended_a_rank_is_an_event_the_detector_classifies(
        line: str, type_: str, error: str) -> None:
    """The last line of a traceback is often all a job's log says about why it died."""
    ctx = Context(producer="t", observed_at=READ_AT, cluster="c", origin="x", project="llm",
                  job_id="job-1", attempt=1, node="gpu-node-1")
    (event,) = [o for o in run(registry()["training-log"], line, ctx) if isinstance(o, Event)]
    assert (event.type, event.attributes["error"]) == (type_, error)
    if "[rank3]" in line:
        assert event.attributes["rank"] == 3
    from processors.incidents.rules import load_rules

    rule = load_rules().symptom_rule(event.type, event.attributes, event.message)
    expected = {"ecc": "gpu_hardware", "illegal_memory": "code_error",
                "enospc": "storage_capacity", "io_error": "storage_io"}
    if type_ == "job.worker_exited":
        assert rule is not None and rule.klass == expected[error]


def test_an_exception_that_names_no_known_failure_is_not_an_event() -> None:
    ctx = Context(producer="t", observed_at=READ_AT, cluster="c", origin="x", project="llm",
                  job_id="job-1", attempt=1)
    text = "ValueError: shapes (3,) and (4,) not aligned\nKeyError: 'input_ids'\n"
    assert not [o for o in run(registry()["training-log"], text, ctx) if isinstance(o, Event)]
