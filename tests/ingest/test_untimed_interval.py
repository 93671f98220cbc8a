"""A line with no time of its own (issue 41, item 5): a rank's exception printed after its
last timed line lies between the timed lines around it, and says so."""

from __future__ import annotations

from datetime import UTC, datetime

from ingest.adapters import Context, registry, run
from ingest.timestamps import between

READ_AT = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)

# the shape of BLOOM's 2022-03-21 crash (bigscience-workshop/bigscience, train/tr11-176B-ml/
# chronicles.md): `[default3]:` lines with no time after the rank's last timed line
LOG = """\
2026-11-30 10:00:00,000 INFO step=1200 loss=2.46 step_time=105.2s
[default3]:terminate called after throwing an instance of 'c10::CUDAError'
[default3]:RuntimeError: CUDA error: uncorrectable ECC error encountered
2026-11-30 10:03:00,000 INFO step=1201 loss=2.46 step_time=105.2s
"""


def test_the_nearest_timed_lines_around_an_untimed_one() -> None:
    stamps = {0: "a", 3: "b"}
    assert between(2, 5, stamps.get) == (0, 3)
    assert between(1, 5, stamps.get, reach=1) == (0, None)
    assert between(4, 5, stamps.get) == (3, None)


def test_a_ranks_exception_after_its_last_timed_line_gets_the_interval() -> None:
    ctx = Context(producer="t", observed_at=READ_AT, cluster="c", project="p", job_id="j",
                  attempt=1, node="node-041")
    events = [d for d in run(registry()["training-log"], LOG, ctx) if hasattr(d, "type")]
    (failed,) = [e for e in events if e.type == "job.worker_exited"]  # type: ignore[attr-defined]
    attrs = failed.attributes  # type: ignore[attr-defined]
    assert failed.time == datetime(2026, 11, 30, 10, 0, tzinfo=UTC)  # type: ignore[attr-defined]
    assert (attrs["time_source"], attrs["time_from_line"], attrs["error"]) == (
        "previous_line", 1, "ecc")
    assert (attrs["time_lower"], attrs["time_upper"]) == (
        "2026-11-30T10:00:00+00:00", "2026-11-30T10:03:00+00:00")


def test_the_detector_reads_the_interval_only_when_it_holds_the_placed_time() -> None:
    from processors.incidents.cause import interval
    from schemas.events import Event, Source

    def exited(**attrs: object) -> Event:
        return Event(id="w", type="job.worker_exited", source=Source.job, project="p",
                     job_id="j", attempt=1, cluster="c",
                     time=datetime(2026, 11, 30, 10, 0, tzinfo=UTC), attributes=attrs)

    assert interval(exited(time_lower="2026-11-30T10:00:00Z",
                           time_upper="2026-11-30T10:03:00Z")) == (
        datetime(2026, 11, 30, 10, 0, tzinfo=UTC), datetime(2026, 11, 30, 10, 3, tzinfo=UTC))
    assert interval(exited()) is None
    assert interval(exited(time_lower="2026-11-30T10:01:00Z",  # not around its time
                           time_upper="2026-11-30T10:03:00Z")) is None
    assert interval(exited(time_lower="soon", time_upper="later")) is None
