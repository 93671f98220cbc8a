"""Issue 44, read right: public copies (tests/ingest/fixtures/public/SOURCES.md) read field by
field, explicit and `auto`; and the healthy outputs among them store nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.ingest.public_corpus import Outcome, read, samples
from tests.ingest.read_right import expected, scored

SAMPLES = {s.file: s for s in samples()}


def _read(file: str, fmt: str | None = None) -> Outcome:
    return read(SAMPLES[file], fmt)


def _at(*parts: int, micro: int = 0) -> datetime:
    return datetime(*parts, micro, tzinfo=UTC)  # type: ignore[misc,arg-type]


@pytest.mark.parametrize("fmt", [None, "auto"])
def test_a_drain_keeps_the_reason_slurmctld_gave_before_it(fmt: str | None) -> None:
    (drain,) = _read("slurmctld/low_real_memory_drain.txt", fmt).events
    assert (drain.type, drain.node, drain.time) == (
        "node.drained", "ip-10-2-1-120", _at(2020, 8, 13, 10, 20, 3, micro=698000))
    assert drain.attributes["reason"] == "has low real_memory size (63622 < 64000)"


@pytest.mark.parametrize("file", [
    "kubectl/get_pods_n_gpu_operator_crashloop.txt",
    "kubectl/get_pods_all_namespaces_operator_crashloop.txt",
    "ib/ibdev2netdev_column_commented.txt",
])
@pytest.mark.parametrize("fmt", [None, "auto"])
def test_healthy_or_infrastructure_output_stores_nothing(file: str, fmt: str | None) -> None:
    got = _read(file, fmt)
    assert got.events == [] and got.letters == []


@pytest.mark.parametrize("fmt", [None, "auto"])
def test_a_task_s_signal_is_named_as_srun_names_it(fmt: str | None) -> None:
    (segv,) = _read("slurm-output/srun_segfault_core_dumped.txt", fmt).events
    assert (segv.type, segv.node, segv.attributes["rank"], segv.attributes["signal"],
            segv.attributes["core_dumped"]) == ("job.worker_exited", "cn125", 0, "SIGSEGV", True)
    (bus,) = _read("slurm-output/srun_bus_error_step_cancelled.txt", fmt).events
    assert (bus.node, bus.attributes["signal"]) == ("Orion-18-69", "SIGBUS")


def test_a_bus_error_is_not_a_segfault() -> None:
    from schemas.failure_text import classify

    assert classify("srun: error: Orion-18-69: task 289: Bus error") == "bus_error"
    assert classify("Bus error (core dumped)") == "bus_error"
    assert classify("Aborted (core dumped)") is None  # a dump names no signal of its own
    assert classify("Segmentation fault (core dumped)") == "segfault"
    assert classify("ERROR: Unexpected bus error encountered in worker. This might be caused "
                    "by insufficient shared memory (shm).") == "dataloader"


# --- every sample of expected.yaml, field by field (issue 44) ------------------------------


@pytest.mark.parametrize("file", sorted(expected()))
@pytest.mark.parametrize("fmt", [None, "auto"])
def test_every_field_as_a_correct_reader_reads_it(file: str, fmt: str | None) -> None:
    """type, node, GPU, job, time and time source (and the attributes each names) of every
    event a correct reader extracts; nothing more (no invented event), nothing doubled."""
    assert [w for w in scored(SAMPLES[file], fmt).wrong_fields if not w.startswith("GAP")] == []
    if not expected()[file]:  # a healthy output: nothing stored, nothing refused; prose is
        # refused whole as no format auto knows (a dead letter saying so), never read as rows
        letters = _read(file, fmt).letters
        assert all(d.field == "format" for d in letters) if file.startswith("prose/") \
            else letters == []


@pytest.mark.parametrize(("cell", "reason", "cut"), [
    ("(Resources,", "Resources", True),
    ("(ReqNodeNotAvail, UnavailableNodes:node[01-0", "ReqNodeNotAvail, UnavailableNodes", True),
    ("(ReqNodeNotAvail, UnavailableNodes:node[01-04])",
     "ReqNodeNotAvail, UnavailableNodes:node[01-04]", False),
    ("(Priority)", "Priority", False)])
def test_a_reason_squeue_cut_at_its_width_is_said_cut(cell: str, reason: str, cut: bool) -> None:
    from ingest.slurm_tools import _reason

    assert _reason(cell) == (reason, cut)


def test_host_hardware_is_its_own_class_owned_by_hardware_ops() -> None:
    """An uncorrected or fatal AER report (an EDAC UE) is a signal of class host_hardware
    at once; corrected floods only when they keep coming (a threshold); hardware ops own
    it. The GPU health rule after them does not take these."""
    from processors.incidents.rules import load_rules

    rules = load_rules()
    (fatal,) = _read("host-hardware/aer_uncorrected_fatal_transaction_layer.txt").events
    rule = rules.signal_rule(fatal.type, fatal.attributes, fatal.message)
    assert rule is not None and (rule.name, rule.klass) == ("host-hardware-uncorrected",
                                                            "host_hardware")
    (flood,) = _read("host-hardware/syslog_edac_ce_flood_one_dimm.txt").events
    rule = rules.signal_rule(flood.type, flood.attributes, flood.message)
    assert rule is not None and rule.name == "host-hardware-corrected" and rule.threshold
    assert rules.klass("host_hardware").team == "hardware-ops"
