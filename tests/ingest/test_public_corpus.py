"""Issue 30's public corpus (tests/ingest/fixtures/public/SOURCES.md), family by family,
field by field, the event time first; and `--format auto` reading each file at least as well
as the adapter named for it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ingest.adapters import Context, registry, run_report
from schemas.events import Event
from tests.ingest.public_corpus import PUBLIC, READ_AT, Outcome, Sample, read, samples

SAMPLES = {s.file: s for s in samples()}


def _read(file: str, fmt: str | None = None) -> Outcome:
    return read(SAMPLES[file], fmt)


def _at(*parts: int, micro: int = 0) -> datetime:
    return datetime(*parts, micro, tzinfo=UTC)  # type: ignore[misc,arg-type]


def _sig(e: Event) -> tuple[Any, ...]:
    attrs = {k: v for k, v in e.attributes.items() if k not in ("adapter", "raw")}
    return (e.type, e.time, e.job_id, e.entity, e.node,
            tuple(sorted((k, repr(v)) for k, v in attrs.items())))


def test_every_file_has_its_source_and_every_source_its_file() -> None:
    files = {str(p.relative_to(PUBLIC)) for p in PUBLIC.rglob("*") if p.is_file()}
    assert files - {"SOURCES.md"} == set(SAMPLES)
    assert all(s.path.exists() and s.format in registry() for s in SAMPLES.values())


@pytest.mark.parametrize("sample", list(SAMPLES.values()), ids=lambda s: s.file)
def test_auto_reads_every_file_as_well_as_its_adapter(sample: Sample) -> None:
    explicit, auto = read(sample), read(sample, "auto")
    assert {_sig(e) for e in auto.events} >= {_sig(e) for e in explicit.events}
    assert auto.stored >= explicit.stored
    assert explicit.understood or sample.file == "training/hf_trainer_loss_dicts.txt"
    if explicit.understood and not sample.quiet:
        assert auto.understood


# --- 1. Slurm text tools as people run them -------------------------------------------------

def test_sacct_format_without_times_says_which_are_missing() -> None:
    out = _read("slurm-text/sacct_format_no_times_prompt.txt")
    assert not out.letters and out.skipped == 7  # prompt, header, rule, four steps
    assert [(e.type, e.job_id) for e in out.events] == [
        ("job.failed", "20"), ("job.failed", "21"), ("job.completed", "22")]
    first = out.events[0]
    assert first.time == READ_AT and first.attributes["time_source"] == "observed"
    assert first.attributes["missing_times"] == ["Submit", "Start", "End"]
    assert first.id == "slurm-c-20-1-job.failed"  # the id sacct --json would give


def test_sacct_default_fixed_width_table_after_a_prompt() -> None:
    out = _read("slurm-text/sacct_default_prompt.txt")
    (done,) = out.events
    assert (done.type, done.job_id, done.attributes["exit_code"], done.time) == (
        "job.completed", "52222788", 0, READ_AT)


def test_sacct_brief_noheader_parsable() -> None:
    (failed,) = _read("slurm-text/sacct_brief_noheader_parsable.txt").events
    assert (failed.type, failed.job_id, failed.attributes["exit_code"]) == (
        "job.failed", "1655360", 127)


def test_sacct_parsable2_without_times_and_format_without_jobid() -> None:
    jobs = _read("slurm-text/sacct_parsable2_no_times.txt").events
    assert [(e.type, e.job_id) for e in jobs] == [("job.completed", "239023"),
                                                  ("job.completed", "239024")]
    (pending,) = _read("slurm-text/sacct_format_without_jobid.txt").events
    assert (pending.type, pending.job_id, pending.time) == ("job.pending", "1854938", READ_AT)


def test_sacct_custom_delimiter_from_the_command() -> None:
    text = ("$ sacct -X -n --delimiter=';' -P --format=JobID,State,End\n"
            "880301;COMPLETED;2026-11-30T07:00:00\n880302;FAILED;2026-11-30T08:00:00\n")
    ctx = Context(producer="t", observed_at=READ_AT, cluster="c", project="p")
    out, _ = run_report(registry()["auto"], text, ctx)
    assert [(e.type, e.job_id, e.time) for e in out if isinstance(e, Event)] == [
        ("job.completed", "880301", _at(2026, 11, 30, 7, 0, 0)),
        ("job.failed", "880302", _at(2026, 11, 30, 8, 0, 0))]


def test_sacct_parsable_from_slurm_22_05_8() -> None:
    out = _read("slurm-text/sacct_parsable_slurm_22.05.8.txt")
    final = {e.job_id: e for e in out.events if e.type != "job.started"}
    assert (final["2"].type, final["2"].time, final["2"].attributes["exit_code"]) == (
        "job.failed", _at(2026, 12, 6, 1, 6, 1), 1)
    assert final["3"].attributes["reason"] == "cancelled by uid 0"


def test_squeue_after_prompt_with_custom_format_array_and_without_header() -> None:
    me = _read("slurm-text/squeue_me_prompt.txt").events
    assert [(e.type, e.job_id) for e in me][:3] == [("job.started", "5521155"),
                                                    ("job.started", "5521149"),
                                                    ("job.pending", "5521160")]
    assert me[0].time == READ_AT - timedelta(seconds=38)
    assert me[2].attributes["reason"] == "Priority"
    (submitted,) = _read("slurm-text/squeue_format_submit_time.txt").events
    assert (submitted.type, submitted.time, submitted.attributes["time_source"]) == (
        "job.pending", _at(2025, 5, 1, 14, 9, 55), "line")
    (array,) = _read("slurm-text/squeue_pending_array.txt").events
    assert array.job_id == "31180452_[0-467]"
    pending, running = _read("slurm-text/squeue_grep_noheader.txt").events
    assert pending.attributes["reason"] == "AssocGrpJobsLimit"
    assert running.time == READ_AT - timedelta(hours=17, minutes=6, seconds=10)


def test_sinfo_list_reasons_in_every_shape() -> None:
    (prolog,) = _read("slurm-text/sinfo_R_prolog_error.txt").events
    assert (prolog.type, prolog.entity, prolog.attributes["reason"], prolog.time) == (
        "node.drained", "hpc", "Prolog error", _at(2018, 5, 17, 1, 5, 47))
    (inline,) = _read("slurm-text/sinfo_R_header_in_command.txt").events
    assert (inline.entity, inline.attributes["reason"], inline.attributes["user"]) == (
        "ip-10-0-1-23", "Kill task failed", "root")
    text = ("[ansible] => {\n    \"stdout_lines\": [\n"
            "        \"NODELIST            REASON                         TIMESTAMP\",\n"
            "        \"gpu-[07-08]         Xid 79 GPU fell off the bus    2026-11-30T09:05:00\"\n"
            "    ]\n}\n")
    ctx = Context(producer="t", observed_at=READ_AT, cluster="c")
    out, _ = run_report(registry()["sinfo"], text, ctx)
    assert [(e.entity, e.attributes["reason"], e.time) for e in out if isinstance(e, Event)] \
        == [("gpu-07", "Xid 79 GPU fell off the bus", _at(2026, 11, 30, 9, 5, 0)),
            ("gpu-08", "Xid 79 GPU fell off the bus", _at(2026, 11, 30, 9, 5, 0))]


# --- 2. kubectl's human output ---------------------------------------------------------------

def test_kubectl_get_kubeflow_jobs_and_the_sdk_watch_table() -> None:
    (created,) = _read("kubectl/get_pytorchjobs_prompt.txt").events
    assert (created.type, created.time, created.attributes["time_source"]) == (
        "job.submitted", READ_AT - timedelta(minutes=30), "relative")
    watch = _read("kubectl/pytorchjob_watch_sdk.txt").events
    assert [(e.type, e.time) for e in watch] == [
        ("job.started", _at(2022, 6, 20, 23, 23, 36)),
        ("job.completed", _at(2022, 6, 20, 23, 28, 35))]  # -w repeats: one event


def test_kueue_workload_table_and_describe_events() -> None:
    (pending,) = _read("kubectl/get_workloads.txt").events
    assert (pending.type, pending.attributes["queue"], pending.time) == (
        "job.pending", "main", READ_AT)
    events = _read("kubectl/describe_workload_events.txt").events
    assert [(e.type, e.attributes.get("stage") or e.attributes.get("reason"), e.time)
            for e in events] == [
        ("job.pending", "insufficient quota: cpu (on-demand)",
         READ_AT - timedelta(minutes=3, seconds=5)),
        ("job.admitted", "quota_reserved", READ_AT - timedelta(minutes=3, seconds=5)),
        ("job.preempted", "EvictedDueToPodsReadyTimeout",
         READ_AT - timedelta(minutes=2, seconds=5)),
        ("job.admitted", "admitted", READ_AT - timedelta(seconds=65))]


def test_describe_container_states_and_an_evicted_status_fragment() -> None:
    (oom,) = _read("kubectl/describe_pod_oomkilled_state.txt").events
    assert (oom.type, oom.time, oom.attributes["exit_code"]) == (
        "job.oom", _at(2025, 4, 29, 6, 10, 51), 0)  # Finished, +0800
    (last,) = _read("kubectl/describe_pod_crashloop_last_state.txt").events
    assert (last.type, last.attributes["state"], last.time) == ("job.oom", "Last State",
                                                                READ_AT)
    (evicted,) = _read("kubectl/pod_status_evicted_fragment.yaml").events
    assert (evicted.type, evicted.attributes["reason"]) == ("job.preempted", "Evicted")
    assert evicted.attributes["detail"].startswith("The node was low on resource: memory")


def test_a_rollout_is_not_a_training_job() -> None:
    for quiet in ("kubectl/get_events_deployment_noheader.txt",
                  "kubectl/get_events_legacy_columns.txt"):
        out = _read(quiet)
        assert not out.events and not out.letters
    text = ("Name:         nginx-deployment-7759cfdc55-2xczh\nNamespace:    default\n"
            "Events:\n  Type    Reason   Age   From     Message\n"
            "  ----    ------   ----  ----     -------\n"
            "  Normal  Killing  12s   kubelet  Stopping container nginx\n")
    ctx = Context(producer="t", observed_at=READ_AT, cluster="c", project="llm",
                  job_id="job-1")
    rollout, _ = run_report(registry()["kubernetes"], text, ctx)
    assert rollout == []  # a Normal event of no job's: a line skipped, not a dead letter
    worker = text.replace("nginx-deployment-7759cfdc55-2xczh", "job-1-worker-3")
    (exited,) = [e for e in run_report(registry()["kubernetes"], worker, ctx)[0]
                 if isinstance(e, Event)]
    assert (exited.type, exited.entity, exited.time) == (
        "job.worker_exited", "job-1-worker-3", READ_AT - timedelta(seconds=12))


def test_kubectl_get_pods_wide_and_events_table() -> None:
    text = ("$ kubectl get pods -o wide -n llm\n"
            "NAME              READY   STATUS      RESTARTS      AGE   IP          NODE\n"
            "pt-7b-worker-0    0/1     OOMKilled   3 (2m ago)    1h    10.1.2.3    gpu-07\n"
            "pt-7b-worker-1    1/1     Running     0             1h    10.1.2.4    gpu-08\n"
            "this line does not fit\n"
            "$ kubectl get events -n llm\n"
            "LAST SEEN   TYPE      REASON    OBJECT                MESSAGE\n"
            "2m          Warning   Evicted   pod/pt-7b-worker-1    The node was low on "
            "resource: memory.\n")
    ctx = Context(producer="t", observed_at=READ_AT, cluster="c", project="llm")
    out, report = run_report(registry()["auto"], text, ctx)
    events = [e for e in out if isinstance(e, Event)]
    assert [(e.type, e.job_id, e.entity, e.node, e.time) for e in events] == [
        ("job.oom", "pt-7b", "pt-7b-worker-0", "gpu-07", READ_AT),
        ("job.preempted", "pt-7b", "pt-7b-worker-1", None, READ_AT - timedelta(minutes=2))]
    assert len(out) == 2 and report.skipped == 6  # prompts, headers, the Running pod, the odd row


# --- 3. slurmctld's interactive and admin paths ---------------------------------------------

def test_slurmctld_22_05_8_requeues_and_recovery_once() -> None:
    events = _read("slurmctld/slurmctld_slurm_22.05.8.log").events
    requeued = [(e.job_id, e.attributes["reason"], e.time) for e in events
                if e.type == "job.requeued"]
    assert requeued == [("4", "requeued", _at(2026, 12, 6, 1, 6, 3, micro=685000)),
                        ("5", "NODE_FAIL", _at(2026, 12, 6, 1, 6, 32, micro=162000))]
    ready = [(e.entity, e.time) for e in events if e.type == "node.ready"]
    assert ready == [("n4", _at(2026, 12, 6, 1, 7, 12, micro=171000))]  # one recovery


def test_salloc_prolog_failure_drain_and_kill_after_completion() -> None:
    events = _read("slurmctld/synthetic_interactive_and_prolog.log").events
    assert [(e.type, e.job_id or e.entity, e.time) for e in events] == [
        ("job.submitted", "7001", _at(2026, 11, 30, 8, 0, 0, micro=100000)),
        ("job.started", "7001", _at(2026, 11, 30, 8, 0, 1, micro=5000)),
        ("job.started", "7002", _at(2026, 11, 30, 8, 0, 2)),
        ("job.requeued", "7002", _at(2026, 11, 30, 8, 0, 2, micro=90000)),
        ("node.drained", "gpu-03", _at(2026, 11, 30, 8, 0, 2, micro=100000)),
        ("job.completed", "7001", _at(2026, 11, 30, 8, 10, 0)),  # its later kill: no cancel
        ("node.ready", "gpu-03", _at(2026, 11, 30, 8, 20, 0)),  # back as ALLOCATED
        ("job.timeout", "7003", _at(2026, 11, 30, 8, 30, 0))]
    assert events[4].attributes["reason"] == "Prolog error"
    assert events[3].attributes["reason"] == "prolog failure"


# --- 4. Training stdout as it really looks --------------------------------------------------

def test_tqdm_redraws_loss_dicts_nemo_and_deepspeed_checkpoints() -> None:
    events = _read("training/synthetic_trainer_stdout.txt").events
    got = [(e.type, e.attributes.get("step"), e.time) for e in events]
    assert got == [
        ("checkpoint.restored", 1000, _at(2026, 11, 30, 8, 0, 1)),  # one per checkpoint
        ("job.step", 1050, _at(2026, 11, 30, 8, 1, 0)),  # the bar keeps its line's time
        ("job.step", 1051, _at(2026, 11, 30, 8, 1, 0)),
        ("job.step", 1051, _at(2026, 11, 30, 8, 1, 0)),  # the dict glued to the bar
        ("checkpoint.saved", 1100, _at(2026, 11, 30, 8, 5, 9)),  # async: once, when final
        ("checkpoint.restored", 1100, _at(2026, 11, 30, 8, 6, 0)),
        # a line without a time takes the timed line's before it, never the read time
        # (issue 27 item 4)
        ("comm.nccl_error", None, _at(2026, 11, 30, 8, 6, 0))]
    loss = events[3]
    assert (loss.attributes["loss"], loss.attributes["epoch"]) == (1.2345, 0.5)
    assert events[4].attributes["path"] == "/ckpt/run7/step=1100.ckpt"
    ib = events[-1]
    assert (ib.node, ib.attributes["device"], ib.attributes["pid"]) == ("gpu-node-7", "3",
                                                                        2231)
    assert ib.attributes["time_source"] == "previous_line"


def test_public_bars_nemo_save_and_stepless_dicts() -> None:
    bars = _read("training/tqdm_caret_m.txt").events
    assert [e.attributes["step"] for e in bars] == [1, 27, 33, 37]
    (saved,) = _read("training/nemo2_checkpoint_lines.txt").events
    assert (saved.type, saved.attributes["step"], saved.attributes["duration_s"],
            saved.time) == ("checkpoint.saved", 0, 20.774, _at(2025, 6, 18, 21, 56, 22))
    dicts = _read("training/hf_trainer_loss_dicts.txt")
    (letter,) = dicts.letters
    assert "5 Trainer loss dict(s) without a step" in letter.reason
    assert not _read("training/nccl_net_ib_hosts.txt").events


# --- 5. GPU and fabric health beyond Xid ----------------------------------------------------

def test_dcgmi_nvlink_links_down() -> None:
    events = _read("gpu-health/dcgmi_nvlink_status_down.txt").events
    assert [(e.entity, e.attributes["status"], len(e.attributes["links_down"])) for e in
            events] == [("gpu-node-1/gpu0", "failure", 18), ("gpu-node-1/gpu1", "failure", 18)]


def test_fabric_manager_start_failure_is_one_event() -> None:
    (en,) = _read("gpu-health/fabricmanager_start_failure_en.txt").events
    assert (en.node, en.attributes["system"], en.time) == (
        "ubuntu2404", "fabric_manager", _at(2026, 9, 18, 3, 19, 1))
    (zh,) = _read("gpu-health/fabricmanager_start_failure.txt").events
    assert (zh.node, zh.time) == ("leon-NF5468M6", _at(2026, 11, 15, 14, 15, 47))


def test_nvidia_smi_q_and_nvsentinel_events() -> None:
    smi = _read("gpu-health/synthetic_nvidia_smi_q.txt").events
    assert [(e.type, e.entity, e.attributes.get("reason") or e.attributes["status"])
            for e in smi] == [
        ("node.health", "gpu-node-1/gpu0", "warning"),
        ("node.health", "gpu-node-1/gpu1", "failure"),
        # HW Slowdown and the HW Thermal Slowdown indented under it: one throttle, its cause
        ("node.throttled", "gpu-node-1/gpu0", "hw_thermal")]
    assert smi[-1].attributes["reasons"] == ["hw_slowdown", "hw_thermal"]
    assert {e.time for e in smi} == {_at(2026, 11, 30, 8, 57, 34)}
    fm, link = _read("gpu-health/synthetic_nvsentinel_events.json").events
    assert (fm.entity, fm.attributes["system"], fm.time) == (
        "gpu-node-07", "FabricManagerServiceDown", READ_AT)
    assert (link.entity, link.severity.value, link.time) == (
        "gpu-node-07/gpu3", "critical", _at(2025, 11, 30, 8, 57, 34))


def test_auto_summary_says_per_adapter_what_it_took_and_left() -> None:
    text = (SAMPLES["slurmctld/slurmctld_slurm_22.05.8.log"].path.read_text()
            + "an unclaimed line\n")
    ctx = Context(producer="t", observed_at=READ_AT, cluster="c", project="llm")
    _, report = run_report(registry()["auto"], text, ctx)
    summary = report.summary()
    assert "lines taken by adapter: slurmctld 23" in summary
    assert "16 line(s) no adapter claimed" in summary


# --- 6. Volcano and KubeRay status, fragments by shape ----------------------------------------

def test_rayjob_table_snapshots_and_a_vcjob_status_fragment() -> None:
    events = _read("kubectl/get_rayjob_snapshots.txt").events
    assert [(e.type, e.attributes["k8s_object"], e.time) for e in events] == [
        ("job.submitted", "RayJob/rayjob-sample-x98k6", READ_AT - timedelta(seconds=13)),
        ("job.submitted", "RayJob/rayjob-sample-psgrj", READ_AT - timedelta(seconds=46)),
        ("job.started", "RayJob/rayjob-sample-psgrj", _at(2024, 2, 1, 17, 55, 49)),
        ("job.completed", "RayJob/rayjob-sample-psgrj", _at(2024, 2, 1, 17, 56, 5))]
    (running,) = _read("kubectl/vcjob_status_fragment.yaml").events
    assert (running.type, running.attributes["phase"], running.time) == (
        "job.started", "Running", _at(2023, 2, 15, 1, 1, 16))
    fragment = "status:\n  jobStatus: FAILED\n  jobDeploymentStatus: Failed\n" \
               "  startTime: '2025-06-04T20:53:35Z'\n  endTime: '2025-06-04T20:58:00Z'\n"
    ctx = Context(producer="t", observed_at=READ_AT, cluster="c", project="p", job_id="ray-1")
    (failed,) = [e for e in run_report(registry()["auto"], fragment, ctx)[0]
                 if isinstance(e, Event)]
    assert (failed.type, failed.job_id, failed.time) == ("job.failed", "ray-1",
                                                         _at(2025, 6, 4, 20, 58, 0))


def test_kube_eventer_webhook_body() -> None:
    (oom,) = _read("kubectl/synthetic_kube_eventer_webhook.json").events
    assert (oom.type, oom.entity, oom.time) == ("job.oom", "pretrain-7b-worker-3",
                                                _at(2026, 11, 30, 8, 57, 34))


def test_slurm_tools_inside_kubectl_exec_and_ansible_output() -> None:
    ctx = Context(producer="t", observed_at=READ_AT, cluster="c", project="p")
    exec_ = ("$ kubectl exec -it slurm-controller-0 -- squeue\n"
             "             JOBID PARTITION     NAME     USER ST       TIME  NODES "
             "NODELIST(REASON)\n"
             "               881       gpu pretrain    alice  R       1:00      2 "
             "gpu-[01-02]\n")
    (started,) = [e for e in run_report(registry()["auto"], exec_, ctx)[0]
                  if isinstance(e, Event)]
    assert (started.type, started.job_id, started.attributes["nodes"], started.time) == (
        "job.started", "881", ["gpu-01", "gpu-02"], READ_AT - timedelta(minutes=1))
    ansible = ('ok: [login1] => {"changed": false, "stdout": "JobID|State|End\\n'
               '881|NODE_FAIL|2026-11-30T08:00:00\\n881.batch|CANCELLED|'
               '2026-11-30T08:00:00", "rc": 0}\n')
    (failed,) = [e for e in run_report(registry()["sacct"], ansible, ctx)[0]
                 if isinstance(e, Event)]
    assert (failed.type, failed.attributes["reason"], failed.time) == (
        "job.failed", "NODE_FAIL", _at(2026, 11, 30, 8, 0, 0))
