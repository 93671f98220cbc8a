"""`--format auto`: a JSON document goes to the adapter of its shape; a mixed text dump is
routed line by line, each line read once, by the most specific adapter that reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.adapters import Context, registry, run, run_report
from schemas.dead_letters import DeadLetter
from schemas.events import Event
from tests.conftest import OBSERVED

FIXTURES = Path(__file__).parent / "fixtures"
CTX = Context(producer="auto", observed_at=OBSERVED, cluster="cluster-a", project="llm",
              job_id="job-1", attempt=1, node="gpu-node-1")
SKIPPED = 8
"""peermem, mlx5 Link INIT, workqueue, `_job_complete: done`, the watchdog's follow-up line,
the Xid-less fallen-off-the-bus line next to its Xid 79, a USB line and the noise line."""
DOCUMENTS = [p for p in sorted(FIXTURES.glob("*/*.json"))
             if p.parent.name in ("alertmanager", "grafana", "cloudevents", "kubernetes",
                                  "slurm")]


@pytest.mark.parametrize("fixture", DOCUMENTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_document_goes_to_the_adapter_of_its_shape(fixture: Path) -> None:
    adapters = registry()
    text = fixture.read_text()
    auto, report = run_report(adapters["auto"], text, CTX)
    named = run(adapters[fixture.parent.name], text, CTX)
    assert [e.id for e in auto if isinstance(e, Event)] == [
        e.id for e in named if isinstance(e, Event)]
    assert {e.attributes["adapter"] for e in auto if isinstance(e, Event)} == {
        fixture.parent.name}
    assert report.summary() == f"auto: read as {fixture.parent.name}"


def test_a_mixed_dump_is_read_once_per_line() -> None:
    text = "\n".join((FIXTURES / name).read_text() for name in (
        "xid/public_dmesg_ctime.log", "node-log/public_journal_mlx5.log",
        "slurmctld/job_lifecycle.log", "training-log/public_pytorch_watchdog.log",
        "xid/kernel_mixed.log")) + "\nsomething nobody prints on purpose\n"
    out, report = run_report(registry()["auto"], text, CTX)
    events = [e for e in out if isinstance(e, Event)]
    by = report.by_adapter
    assert by == {"xid": 5, "node-log": 2, "slurmctld": 11, "training-log": 2}
    xids = [e for e in events if e.type == "node.xid"]
    assert len({e.id for e in xids}) == len(xids) == 5  # node-log did not read them again
    assert {e.attributes["adapter"] for e in xids} == {"xid"}
    letters = [d for d in out if isinstance(d, DeadLetter)]
    assert [d.reason for d in letters] == ["auto: xid: mentions Xid but is not an NVRM Xid line"]
    assert report.skipped == SKIPPED
    assert "events by adapter: node-log 2, slurmctld 11, training-log 2, xid 5" in \
        report.summary()


def test_nothing_recognised_is_a_dead_letter_naming_the_way_out() -> None:
    (letter,) = run(registry()["auto"], "hello\nworld\n", CTX)
    assert isinstance(letter, DeadLetter) and letter.field == "format"
    assert "--format" in letter.reason
