"""Issue 44, read right: public copies (tests/ingest/fixtures/public/SOURCES.md) read field by
field, explicit and `auto`; and the healthy outputs among them store nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.ingest.public_corpus import Outcome, read, samples

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
