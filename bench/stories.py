"""Ground-truth failure stories: generated, delivered in many orders, scored against the truth.

A story (seeded) runs on the sample 64-node fat tree (`jobtrail.sample.topology()`: 16 nodes
a rack, rail 0 on the odd leaf at port pN): one to three training jobs with progress and
checkpoints, one injected fault from a failure class with its real cascade (the ranks time
out in NCCL, the scheduler fails and requeues the attempt, the node is drained, a new
attempt restores the last checkpoint and passes the failure step), red herrings (a link
counter tick on the victim's leaf or far from it, a fault on an idle node, planned work
on an idle node: none is the cause, only the idle node's fault is an incident) and the
truth an SRE would write down: class, entity, owner, impacted attempts, lost GPU-hours,
recovery.

Each event carries the source it is delivered by (`slurmctld`, `dmesg:<node>`, `ranks`,
`training`, `fabric`, `storage`); `deliveries` gives the orders a user or a site produces:
event time, files imported one source after another, live sources with lags (the training
log shipped every minute). `answer` is what the detector concluded, `score` compares it with
the truth.

    python -m bench.stories --stories 1000        # a confusion matrix by class, and rates

The truth's loss uses the goodput definition (docs/incidents.md): GPUs x (work thrown away
since the last good checkpoint up to the first symptom + the wait for the new attempt while
the job's GPUs were held for it (pending `Resources`, not `Priority`) + restart overhead from
the new attempt's start until progress resumes); a preemption loses the thrown-away work
alone.
"""

from __future__ import annotations

import argparse
import time as wallclock
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta

from bench.story_gen import (
    CLASSES,
    HORIZON,
    OWNER,
    PROJECT,
    T0,
    Story,
    Truth,
    deliveries,
    generate,
    node,
    port,
)
from jobtrail.learn import sample
from processors.incidents.model import IncidentEvent, fold
from processors.pipeline import Pipeline
from processors.topology import Topology
from schemas.events import Event
from schemas.topology import TopologyFile

__all__ = [
    "CLASSES",
    "HORIZON",
    "OWNER",
    "PROJECT",
    "T0",
    "Answer",
    "Report",
    "Score",
    "Story",
    "Truth",
    "answer",
    "deliveries",
    "generate",
    "main",
    "node",
    "port",
    "run",
    "score",
    "stories",
    "wiring",
]


# --- running and scoring --------------------------------------------------------------------

_WIRING: Topology | None = None


def wiring() -> Topology:
    global _WIRING
    if _WIRING is None:
        _WIRING = Topology.from_file(TopologyFile.model_validate(sample.topology()))
    return _WIRING


def run(events: list[Event], horizon: timedelta = HORIZON) -> list[IncidentEvent]:
    pipeline = Pipeline(timedelta(seconds=30), wiring(), lateness=horizon)
    log: list[IncidentEvent] = []
    for event in events:
        log.extend(pipeline.process([event]).incidents)
    return log


Answer = tuple[tuple[str, str, str, tuple[str, ...], float, str], ...]


def answer(log: list[IncidentEvent]) -> Answer:
    """The conclusions: (class, entity, owner, impacted attempts, lost GPU-h, recovery) per
    incident, withdrawn (merged) ones left out."""
    out = []
    for inc in fold(log).values():
        if inc.withdrawn:
            continue
        jobs = tuple(sorted(k for k, j in inc.jobs.items() if j.role in ("failed",
                                                                         "degraded")))
        out.append((inc.klass, inc.entity, inc.owner, jobs, round(inc.lost_gpu_hours, 3),
                    inc.recovery))
    return tuple(sorted(out))


@dataclass
class Score:
    klass: str
    found: str  # the class the detector gave the truth's attempt ('' when none)
    entity: bool
    owner: bool
    jobs: bool
    loss: bool | None
    recovery: bool


def score(story: Story, got: Answer) -> list[Score]:
    out = []
    for truth in story.truth:
        if truth.jobs:
            match = [a for a in got if set(truth.jobs) <= set(a[3])]
        else:
            match = [a for a in got if a[1] == truth.entity and not a[3]]
        if not match:
            out.append(Score(truth.klass, "", False, False, False, None, False))
            continue
        a = match[0]
        loss = None if truth.lost_gpu_hours is None else (
            abs(a[4] - truth.lost_gpu_hours) <= 0.02 * max(truth.lost_gpu_hours, 1e-9))
        out.append(Score(truth.klass, a[0], a[1] == truth.entity, a[2] == truth.owner,
                         a[3] == truth.jobs, loss, not truth.jobs or a[5] == truth.recovery))
    return out


@dataclass
class Report:
    stories: int = 0
    same_answer: int = 0
    extra: Counter[str] = field(default_factory=Counter)
    """incidents no injected fault explains, by class"""
    scores: list[Score] = field(default_factory=list)
    orders: Counter[str] = field(default_factory=Counter)

    def add(self, story: Story) -> None:
        answers = {name: answer(run(events)) for name, events in deliveries(story).items()}
        self.stories += 1
        if len(set(answers.values())) == 1:
            self.same_answer += 1
        else:
            self.orders.update(n for n, a in answers.items() if a != answers["time"])
        self.scores.extend(score(story, answers["time"]))
        for a in answers["time"]:
            if not any((t.jobs and set(t.jobs) <= set(a[3])) or (not t.jobs and a[1] == t.entity)
                       for t in story.truth):
                self.extra[a[0]] += 1

    def rate(self, what: str, klass: str | None = None) -> float:
        scores = [s for s in self.scores if klass is None or s.klass == klass]
        if what == "class":
            hits = [s.found == s.klass for s in scores]
        elif what == "class+entity":
            hits = [s.found == s.klass and s.entity for s in scores]
        elif what == "loss":
            hits = [bool(s.loss) for s in scores if s.loss is not None]
        else:
            hits = [bool(getattr(s, what)) for s in scores]
        return sum(hits) / len(hits) if hits else 1.0

    def text(self) -> str:
        lines = [f"{self.stories} stories, each in 3 delivery orders (time, files source by "
                 f"source, live with lags); horizon {HORIZON}",
                 f"same answer in every order: {self.same_answer}/{self.stories} "
                 f"({100 * self.same_answer / max(self.stories, 1):.1f} %)"
                 + (f"; differing orders: {dict(self.orders)}" if self.orders else ""),
                 f"incidents no injected fault explains: {sum(self.extra.values())}"
                 + (f" {dict(self.extra)}" if self.extra else ""), ""]
        found = sorted({s.found or "(none)" for s in self.scores})
        truths = sorted({s.klass for s in self.scores})
        width = max(len(c) for c in found + truths + ["truth \\ found"]) + 1
        lines.append("truth \\ found".ljust(width) + "".join(f[:12].rjust(13) for f in found))
        for t in truths:
            row = Counter(s.found or "(none)" for s in self.scores if s.klass == t)
            lines.append(t.ljust(width) + "".join(str(row.get(f, 0)).rjust(13) for f in found))
        lines.append("")
        lines.append("class".ljust(width) + "".join(h.rjust(13) for h in (
            "n", "class", "class+entity", "owner", "jobs", "loss<=2%", "recovery")))
        for which in [*truths, None]:
            n = sum(1 for s in self.scores if which is None or s.klass == which)
            lines.append((which or "all").ljust(width) + str(n).rjust(13) + "".join(
                f"{100 * self.rate(w, which):12.1f}%" for w in (
                    "class", "class+entity", "owner", "jobs", "loss", "recovery")))
        return "\n".join(lines)


def stories(count: int, first_seed: int = 0) -> Iterator[Story]:
    for i in range(count):
        yield generate(first_seed + i, CLASSES[i % len(CLASSES)])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stories", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    report = Report()
    began = wallclock.perf_counter()
    for story in stories(args.stories, args.seed):
        report.add(story)
    print(report.text())
    print(f"\n{wallclock.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
