"""Detection, classes, routing, remediation and severity: a YAML file with a documented schema
(docs/incidents.md), validated when the processors start (`load_rules`).

- `classes`: the closed table of failure classes. Each says how its incidents group
  (`node`, `switch`, `filesystem`, `attempt`), whether an attempt it hits failed or is only
  degraded, the owning team (`job` = the job's own team), the confidence of a job-own
  classification, and the follow-ups to propose. A new class is an entry here; every signal,
  symptom and progress rule must name one.
- `signals`: infrastructure/scheduler events that can be a *cause*: event types, an
  optional attribute match, the class, and a threshold (`count` within `window_s`) at which
  it opens an incident on its own; below it the signal is still remembered and becomes the
  cause of a job symptom in its fault domain.
- `symptoms`: the job's own failure events, with the class to use when no infrastructure
  cause is found and a `rank` (the highest names a job-own incident).
- `progress`: `hang` (no progress for `after_s`) and `fail_slow` (step time above
  `ratio` x the attempt's own baseline for `for_s`), each with its class and rank.
- `routing`: entity overrides (first match wins) before the class's team; `team_of_project`
  for job-owned classes.
- `severity`: thresholds on impacted GPUs and lost GPU-hours.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas import patterns
from schemas.registry import REGISTRY

DEFAULT_RULES = Path(__file__).with_name("rules.yaml")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Threshold(_Strict):
    count: int = Field(default=1, ge=1)
    window_s: float = Field(default=0, ge=0)


class Match(_Strict):
    """Attribute conditions: `any_of` the values; `none_of` them; `contains` a substring;
    `classified_as` a label of the shared failure-text classifier (`schemas/failure_text.py`:
    oom, ecc, gpu_lost, enospc, io_error, illegal_memory, segfault, dataloader, bus_error,
    nccl_timeout, nccl_error); the attribute `message` tests the event's message."""

    attribute: str
    any_of: list[Any] = Field(default_factory=list)
    none_of: list[Any] = Field(default_factory=list)
    contains: str = ""
    classified_as: str = ""

    @field_validator("classified_as")
    @classmethod
    def _label(cls, value: str) -> str:
        from schemas.failure_text import LABELS

        if value and value not in LABELS:
            raise ValueError(f"unknown label {value!r} (known: {', '.join(LABELS)})")
        return value

    def test(self, attributes: dict[str, Any], message: str) -> bool:
        value = message if self.attribute == "message" else attributes.get(self.attribute)
        if self.any_of and value not in self.any_of:
            return False
        if self.none_of and value in self.none_of:
            return False
        if self.classified_as:
            from schemas.failure_text import classify

            if classify(str(value or "")) != self.classified_as:
                return False
        return not self.contains or self.contains.lower() in str(value or "").lower()


def _known_types(types: list[str]) -> list[str]:
    unknown = [t for t in types if t not in REGISTRY]
    if unknown:
        raise ValueError(f"unknown event type {unknown[0]!r}")
    return types


class ProposedAction(_Strict):
    """A follow-up to propose when an incident of the class has this cause."""

    name: str
    title: str
    """May use `{entity}`, `{node}`, `{gpu}` and the cause event's attributes."""
    team: str = ""
    """Who should do it (default: the incident's owner)."""
    why: str = ""
    kind: Literal["prevent", "mitigate", "detect", "process"] = "mitigate"
    when: list[Match] = Field(default_factory=list)
    """Conditions on the cause event (e.g. its Xid); empty: always."""


class FailureClass(_Strict):
    group: Literal["node", "switch", "filesystem", "attempt", "entity"]
    team: str
    """The owning team, or `job` for the job's own team (`routing.team_of_project`)."""
    why: str = ""
    impact: Literal["failed", "degraded"] = "failed"
    own_confidence: float = Field(default=0.8, ge=0, le=1)
    separate: bool = False
    """A symptom of this class gets an incident of its own even when its attempt already
    has one (a failed checkpoint is its own story; the crash that follows is another)."""
    actions: list[ProposedAction] = Field(default_factory=list)
    fault: Literal["cluster", "job", "scheduler", "planned", ""] = ""
    """Whose fault an incident of this class is: the cluster's (its severity may be raised
    for no restart within the deadline), the job's own, or the scheduler's decision (a
    preemption); neither of the last two is above `severity.not_at_fault_max`. Default:
    `job` for a class the job owns, else `cluster`."""

    @property
    def at_fault(self) -> str:
        return self.fault or ("job" if self.team == "job" else "cluster")


class SignalRule(_Strict):
    name: str
    types: list[str] = Field(min_length=1)
    where: list[Match] = Field(default_factory=list)
    klass: str = Field(alias="class")
    threshold: Threshold = Threshold()
    why: str = ""
    weight: int = Field(default=2, ge=0, le=5)
    """Specificity as a cause (processors/incidents/weighing.py): 3 names the fault (an Xid
    with a recovery action, a port down, an I/O error), 1 a counter tick or a blip that is
    itself a symptom."""

    _types = field_validator("types")(lambda cls, v: _known_types(v))

    def matches(self, type_: str, attributes: dict[str, Any], message: str) -> bool:
        return type_ in self.types and all(m.test(attributes, message) for m in self.where)


class SymptomRule(_Strict):
    name: str
    types: list[str] = Field(min_length=1)
    where: list[Match] = Field(default_factory=list)
    klass: str = Field(alias="class")
    rank: int = Field(default=50, ge=0, le=100)
    """When several symptoms of one attempt disagree, the highest rank names the class
    (an OOM on rank 3 explains the other ranks' NCCL timeouts)."""
    why: str = ""
    via_node: bool = False
    """A node's report of a job's process (a kernel OOM kill logged without the job): the
    symptom of the one attempt running on the node, reached through it."""

    _types = field_validator("types")(lambda cls, v: _known_types(v))

    def matches(self, type_: str, attributes: dict[str, Any], message: str) -> bool:
        return type_ in self.types and all(m.test(attributes, message) for m in self.where)


class Hang(_Strict):
    after_s: float = Field(default=900, gt=0)
    klass: str = Field(default="hang", alias="class")
    rank: int = Field(default=25, ge=0, le=100)


class FailSlow(_Strict):
    ratio: float = Field(default=1.1, gt=1.0)
    """Slower than this many times the attempt's own recent baseline (1.1 = 10 %)."""
    for_s: float = Field(default=600, gt=0)
    baseline_steps: int = Field(default=5, ge=1)
    """Normal samples that make the baseline (the median of the most recent ones)."""
    klass: str = Field(default="fail_slow", alias="class")
    rank: int = Field(default=10, ge=0, le=100)
    straggler_class: str = "straggler"
    """The class of a node whose ranks are slower than the rest of the job's."""


class Progress(_Strict):
    hang: Hang = Hang()
    fail_slow: FailSlow = FailSlow()


class Route(_Strict):
    name: str
    classes: list[str] = Field(default_factory=list)
    entity: str = ""
    """A regular expression the incident's entity must match (empty: any)."""
    team: str
    why: str = ""

    @field_validator("entity")
    @classmethod
    def _regex(cls, value: str) -> str:
        patterns.compile_pattern(value)  # RE2: a rules file's pattern runs in linear time
        return value

    def matches(self, klass: str, entity: str) -> bool:
        if self.classes and klass not in self.classes:
            return False
        return not self.entity or patterns.search(self.entity, entity)


class Routing(_Strict):
    rules: list[Route] = Field(default_factory=list)
    """Overrides, before the class's own team (a leaf owned by a vendor's team)."""
    team_of_project: dict[str, str] = Field(default_factory=dict)
    """For classes owned by the job (`team: job`): project -> team, else `project:<name>`."""


class SeverityRule(_Strict):
    severity: str = Field(pattern=r"^sev[1-4]$")
    min_gpus: int = 0
    min_lost_gpu_hours: float = 0


class Severity(_Strict):
    levels: list[SeverityRule] = Field(default_factory=list)
    raise_on_repeat: bool = True
    raise_on_no_restart: bool = True
    high_priority: int = 1000
    """Jobs at or above this scheduler priority raise the severity one level."""
    not_at_fault_max: str = Field(default="sev3", pattern=r"^sev[1-4]$")
    """The highest severity of an incident the cluster is not at fault for (a job's own
    failure, a preemption): impact alone does not page the cluster's on-call for it."""


class Rules(_Strict):
    version: int = 2
    cause_window_s: float = Field(default=900, gt=0)
    cause_slack_s: float = Field(default=5, ge=0)
    group_window_s: float = Field(default=1800, gt=0)
    restart_deadline_s: float = Field(default=1800, gt=0)
    requeue_held_s: float = Field(default=300, ge=0)
    """A requeue logged within this long of the attempt's end kept the job's place (the
    scheduler's, an automatic retry's): the wait is the failure's downtime. A later one
    (`scontrol requeue` of a job that ended FAILED, by its owner) held nothing meanwhile."""
    repeat_offender_count: int = Field(default=3, ge=2)
    repeat_offender_window_s: float = Field(default=7 * 86400, gt=0)
    max_symptom_evidence: int = Field(default=64, ge=1)
    """Per attempt and event type: a 4096-rank job's timeouts are 64 references, not 4096
    (every one stays on the job's timeline; the incident counts the rest)."""
    max_signal_evidence: int = Field(default=64, ge=1)
    """Per incident: past it a sustained condition (a GPU ticking correctable errors for
    days) is counted in one `signal_added` per quarter group window, not logged and attached
    signal by signal, so an incident's log and a worker's memory stay bounded."""
    change_window_s: float = Field(default=86400, gt=0)
    """How long a change (`change.applied`) applied to nodes stays a candidate cause of the
    failures of attempts that start on them after it."""
    change_weight: int = Field(default=2, ge=0, le=5)
    """A change's specificity as a cause (a fault signal naming the fault is 3)."""
    change_explains: list[str] = Field(default_factory=lambda: [
        "nccl_hang", "hang", "job_failure", "code_error", "fail_slow"])
    """Classes of symptoms a change can cause: a symptom that names another class itself (an
    OOM, an ECC error) is never put down to a change."""
    blame_window_s: float = Field(default=86400, gt=0)
    """How long a node whose fault failed an attempt is a candidate cause of a later
    attempt's failure seen on it with another symptom and no new signal."""
    power_window_s: float = Field(default=3600, gt=0)
    """How long after a node lost power (`node.power` off) its ports going down and the
    scheduler's not-responding, drain or reboot are that power loss's consequences."""
    planned_window_s: float = Field(default=4 * 3600, gt=0)
    """How long after a change (`change.*`) or a maintenance drain its node's drains and
    reboots (not-ready) are planned work rather than faults."""
    planned_reasons: str = (r"(?i)\b(maint\w*|planned|upgrad\w*|firmware|patch\w*|reboot|"
                            r"reimag\w*|change[ -](?:request|ticket)|chg\d*|ticket)\b|"
                            r"\b[A-Z]{2,10}-\d+\b")
    """A drain reason matching this (a maintenance word or a ticket like CHG-1234) is
    planned work; so is a drain whose attributes carry a `ticket`. A reason that says
    `unexpected`, `fail`, `error` or names an Xid never is (Slurm's "Node unexpectedly
    rebooted", NHC's "Xid 79")."""

    @field_validator("planned_reasons")
    @classmethod
    def _reasons(cls, value: str) -> str:
        patterns.compile_pattern(value)  # RE2: run on every drain's text, in linear time
        return value
    classes: dict[str, FailureClass] = Field(default_factory=dict)
    signals: list[SignalRule] = Field(default_factory=list)
    symptoms: list[SymptomRule] = Field(default_factory=list)
    progress: Progress = Progress()
    routing: Routing = Routing()
    severity: Severity = Severity()

    @model_validator(mode="after")
    def _classes_are_closed(self) -> Rules:
        named = [(f"signals.{i}.class", r.klass) for i, r in enumerate(self.signals)]
        named += [(f"symptoms.{i}.class", r.klass) for i, r in enumerate(self.symptoms)]
        named += [("progress.hang.class", self.progress.hang.klass),
                  ("progress.fail_slow.class", self.progress.fail_slow.klass),
                  ("progress.fail_slow.straggler_class", self.progress.fail_slow.straggler_class)]
        named += [(f"routing.rules.{i}.classes", c) for i, r in enumerate(self.routing.rules)
                  for c in r.classes]
        named += [(f"change_explains.{i}", c) for i, c in enumerate(self.change_explains)]
        for where, klass in named:
            if klass not in self.classes:
                raise ValueError(f"{where}: class {klass!r} is not in the classes table "
                                 f"(known: {', '.join(sorted(self.classes))})")
        return self

    def klass(self, name: str) -> FailureClass:
        """The class's entry; an unknown name (stored history from older rules) behaves
        like a job-owned, attempt-grouped failure."""
        found = self.classes.get(name)
        return found if found is not None else FailureClass(group="attempt", team="job")

    @property
    def memory_s(self) -> float:
        """How far back the detector must remember to decide again after a restart."""
        return 2 * max(self.cause_window_s, self.group_window_s, self.restart_deadline_s,
                       self.progress.hang.after_s, self.progress.fail_slow.for_s)

    def signal_rule(self, type_: str, attributes: dict[str, Any],
                    message: str) -> SignalRule | None:
        rules = self._index()[0].get(type_)
        # an alert's resolution (`resolved: true`) says the condition ended: it stays on the
        # timeline, never a new signal of the failure it ends
        if not rules or attributes.get("resolved") is True:
            return None
        return next((r for r in rules if r.matches(type_, attributes, message)), None)

    def symptom_rule(self, type_: str, attributes: dict[str, Any],
                     message: str) -> SymptomRule | None:
        rules = self._index()[1].get(type_)
        if not rules:
            return None
        return next((r for r in rules if r.matches(type_, attributes, message)), None)

    def _index(self) -> tuple[dict[str, list[SignalRule]], dict[str, list[SymptomRule]]]:
        """Rules by event type, in file order (the first match wins): most events (steps)
        match no rule, and should cost one dict lookup."""
        cached = self.__dict__.get("_by_type")
        if cached is None:
            signals: dict[str, list[SignalRule]] = {}
            symptoms: dict[str, list[SymptomRule]] = {}
            for rule in self.signals:
                for t in rule.types:
                    signals.setdefault(t, []).append(rule)
            for srule in self.symptoms:
                for t in srule.types:
                    symptoms.setdefault(t, []).append(srule)
            cached = (signals, symptoms)
            object.__setattr__(self, "_by_type", cached)
        return cached


class RulesError(ValueError):
    pass


def load_rules(path: Path | str | None = None) -> Rules:
    """Parse and validate a rules file; errors name the file and the field."""
    from schemas.files import load_yaml

    return load_yaml(Path(path) if path else DEFAULT_RULES, Rules, RulesError)
