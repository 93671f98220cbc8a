"""The processing both runtimes share: a batch of canonical events in, table rows out.

`Pipeline` holds the small state (job records and the membership index) and calls the pure
folds in `attempts` and `timeline`. Within a batch, lifecycle events are folded first so an
infrastructure event that sits a few offsets before its job's start is still attributed.
State is rebuilt from `job_attempts` on start (`Pipeline.restore`), never from a local file.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from processors.attempts import LIFECYCLE_TYPES, Attempt, JobRecord, evolve
from processors.timeline import Membership, TimelineRow, rows_for
from schemas.events import Event


@dataclass
class Outputs:
    events: list[Event] = field(default_factory=list)
    timeline: list[TimelineRow] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)


class Pipeline:
    def __init__(self, slack: timedelta = timedelta(seconds=30)) -> None:
        self.jobs: dict[tuple[str, str], JobRecord] = {}
        self.membership = Membership(slack)

    def restore(self, attempts: Iterable[Attempt]) -> None:
        """Rebuild state from stored attempts (the current row of each)."""
        for attempt in attempts:
            key = (attempt.project, attempt.job_id)
            job = self.jobs.get(key) or JobRecord(attempt.project, attempt.job_id)
            self.jobs[key] = JobRecord(job.project, job.job_id,
                                       {**job.attempts, attempt.attempt: attempt})
            self.membership.update(attempt)

    def process(self, events: Sequence[Event]) -> Outputs:
        """Fold a batch; events must already be new (the sink filters stored ids)."""
        out = Outputs(events=list(events))
        changed: dict[tuple[str, str], set[int]] = {}
        for event in events:
            if event.type in LIFECYCLE_TYPES and event.job_id:
                key = (event.project, event.job_id)
                job, touched = evolve(self.jobs.get(key), event)
                if job is not None and touched:
                    self.jobs[key] = job
                    changed.setdefault(key, set()).update(touched)
        for key, numbers in changed.items():
            for number in sorted(numbers):
                attempt = self.jobs[key].attempts[number]
                self.membership.update(attempt)
                out.attempts.append(attempt)
        for event in events:
            job_record = self.jobs.get((event.project, event.job_id)) if event.job_id else None
            attempt_of_job = job_record.attempt_at(event.time) if job_record else None
            out.timeline.extend(rows_for(event, self.membership, attempt_of_job))
        return out
