"""What the engine concluded from a story's events, scored against the story's truth:
class, entity, owner, impacted attempts, lost GPU-hours within 2 %, recovery, per
delivery, per failure mode and per multi-attempt pattern, with one failing example each."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import NamedTuple

from bench.story_model import Story, Truth
from bench.story_modes import library
from processors.incidents.model import IncidentEvent, fold

LOSS_TOLERANCE = 0.02
MEASURES = ("class", "entity", "owner", "jobs", "loss", "recovery")


class Concluded(NamedTuple):
    klass: str
    entity: str
    owner: str
    jobs: tuple[str, ...]
    lost_gpu_hours: float
    recovery: str
    cluster: str


Answer = tuple[Concluded, ...]


def answer(log: list[IncidentEvent]) -> Answer:
    """The conclusions, one per incident (withdrawn ones left out): impacted attempts are
    those that failed or were degraded (not `linked` to a standing incident)."""
    out = []
    for inc in fold(log).values():
        if inc.withdrawn:
            continue
        jobs = tuple(sorted(k for k, j in inc.jobs.items() if j.role in ("failed",
                                                                         "degraded")))
        out.append(Concluded(inc.klass, inc.entity, inc.owner, jobs,
                             round(inc.lost_gpu_hours, 3), inc.recovery,
                             str(getattr(inc, "cluster", "") or "")))
    return tuple(sorted(out))


def _entity(a: Concluded) -> str:
    """The entity without a cluster prefix the engine may give it (`cluster-b:node-003`)."""
    for sep in (":", "/"):
        if a.cluster and a.entity.startswith(a.cluster + sep):
            return a.entity[len(a.cluster) + 1:]
    return a.entity


def _explains(truth: Truth, a: Concluded) -> bool:
    if truth.jobs:
        return set(truth.jobs) <= set(a.jobs)
    return _entity(a) == truth.entity and not a.jobs and a.cluster in ("", truth.cluster)


@dataclass
class Score:
    truth: Truth
    delivery: str
    seed: int
    got: Concluded | None
    hits: dict[str, bool | None] = field(default_factory=dict)


def score(story: Story, got: Answer, delivery: str = "time") -> list[Score]:
    out = []
    for truth in story.truth:
        match = sorted((a for a in got if _explains(truth, a)),
                       key=lambda a: (_entity(a) != truth.entity, a.klass != truth.klass))
        a = match[0] if match else None
        s = Score(truth, delivery, story.seed, a)
        if a is None:
            s.hits = {m: False for m in MEASURES}
            if truth.lost_gpu_hours is None:
                s.hits["loss"] = None
            if not truth.recovery:
                s.hits["recovery"] = None
        else:
            loss = None if truth.lost_gpu_hours is None else (
                abs(a.lost_gpu_hours - truth.lost_gpu_hours)
                <= LOSS_TOLERANCE * max(truth.lost_gpu_hours, 1e-9))
            s.hits = {"class": a.klass == truth.klass, "entity": _entity(a) == truth.entity,
                      "owner": a.owner == truth.owner, "jobs": a.jobs == truth.jobs,
                      "loss": loss,
                      "recovery": a.recovery == truth.recovery if truth.recovery else None}
        out.append(s)
    return out


def _rate(scores: list[Score], measure: str) -> tuple[int, int]:
    judged = [s.hits[measure] for s in scores if s.hits.get(measure) is not None]
    return sum(1 for h in judged if h), len(judged)


@dataclass
class Report:
    stories: int = 0
    same_answer: int = 0
    scores: list[Score] = field(default_factory=list)
    extra: Counter[str] = field(default_factory=Counter)
    """Incidents no truth explains, by delivery and class."""
    differing: Counter[str] = field(default_factory=Counter)
    undeliverable: Counter[str] = field(default_factory=Counter)

    def add(self, story: Story, answers: dict[str, Answer]) -> None:
        self.stories += 1
        self.undeliverable.update(story.undeliverable)
        if len(set(answers.values())) == 1:
            self.same_answer += 1
        else:
            first = next(iter(answers.values()))
            self.differing.update(n for n, a in answers.items() if a != first)
        for delivery, got in answers.items():
            self.scores.extend(score(story, got, delivery))
            for a in got:
                if not any(_explains(t, a) for t in story.truth):
                    self.extra[f"{delivery}:{a.klass}"] += 1

    def rate(self, measure: str, **where: str) -> float:
        hits, n = _rate(self._where(**where), measure)
        return hits / n if n else 1.0

    def _where(self, **where: str) -> list[Score]:
        def keep(s: Score) -> bool:
            return all(getattr(s.truth, k) == v if k != "delivery" else s.delivery == v
                       for k, v in where.items())
        return [s for s in self.scores if keep(s)]

    def _table(self, title: str, rows: list[tuple[str, list[Score]]]) -> list[str]:
        width = max(len(title), *(len(r) for r, _ in rows)) + 1
        lines = [title.ljust(width) + "n".rjust(6) + "".join(m.rjust(10) for m in MEASURES)]
        for name, scores in rows:
            cells = []
            for m in MEASURES:
                hits, n = _rate(scores, m)
                cells.append(f"{100 * hits / n:9.1f}%" if n else "       n/a")
            lines.append(name.ljust(width) + str(len(scores)).rjust(6) + "".join(cells))
        return lines

    def text(self) -> str:
        deliveries = sorted({s.delivery for s in self.scores})
        lines = [f"{self.stories} stories, each delivered as {', '.join(deliveries)}",
                 f"same answer in every delivery: {self.same_answer}/{self.stories}"
                 + (f"; differing: {dict(self.differing)}" if self.differing else ""),
                 f"incidents no truth explains: {sum(self.extra.values())}"
                 + (f" {dict(sorted(self.extra.items()))}" if self.extra else "")]
        if self.undeliverable:
            lines.append("canonical event types this checkout's registry lacks (not "
                         f"delivered): {dict(self.undeliverable)}")
        lines.append("")
        lines += self._table("delivery", [(d, self._where(delivery=d)) for d in deliveries]
                             + [("all", self.scores)])
        lines.append("")
        order = [m.name for m in sorted(library().modes, key=lambda m: -m.report.count)]
        seen = {s.truth.mode for s in self.scores}
        modes = [m for m in order if m in seen] + sorted(seen - set(order))
        lines += self._table("mode (all deliveries)", [(m, self._where(mode=m)) for m in modes])
        lines.append("")
        patterns = sorted({s.truth.pattern for s in self.scores if s.truth.pattern})
        lines += self._table("pattern", [(p, self._where(pattern=p)) for p in patterns])
        lines += ["", "failing, one example per mode and measure (seed, delivery: truth | "
                  "engine):"]
        lines += self.examples()
        return "\n".join(lines)

    def examples(self) -> list[str]:
        first: dict[tuple[str, str], Score] = {}
        for s in self.scores:
            for m in MEASURES:
                if s.hits.get(m) is False:
                    first.setdefault((s.truth.mode, m), s)
        grouped: dict[str, list[str]] = defaultdict(list)
        for mode, m in sorted(first):
            grouped[mode].append(m)
        out = []
        for mode, measures in grouped.items():
            s = first[(mode, measures[0])]
            t, a = s.truth, s.got
            engine = "no incident" if a is None else (
                f"{a.klass} {a.entity} {a.owner} {list(a.jobs)} {a.lost_gpu_hours} "
                f"{a.recovery}")
            out.append(f"  {mode} [{', '.join(measures)}] seed {s.seed}, {s.delivery}: "
                       f"{t.klass} {t.entity} {t.owner} {list(t.jobs)} {t.lost_gpu_hours} "
                       f"{t.recovery} | {engine}")
        return out
