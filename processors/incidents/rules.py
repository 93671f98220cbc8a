"""Detection, routing and severity rules: a YAML file with a documented schema
(docs/incidents.md), validated when the processors start (`load_rules`).

- `signals`: infrastructure/scheduler events that can be a *cause*. Each names event types,
  an optional attribute match, its failure class, and a threshold (`count` within
  `window_s`) at which it opens an incident on its own; below the threshold it is still
  remembered and becomes the cause of a job symptom in its fault domain.
- `symptoms`: the job's own failure events (NCCL timeouts, non-zero exits, OOM, failed
  checkpoints, ...), with the class to use when no infrastructure cause is found.
- `progress`: hang (`no progress for hang_after_s`) and fail-slow (`step time above
  ratio x baseline for for_s`) detection.
- `routing`: ordered rules class/entity -> owning team; the first match wins; `default`.
- `severity`: thresholds on impacted GPUs and lost GPU-hours.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from schemas.registry import REGISTRY

DEFAULT_RULES = Path(__file__).with_name("rules.yaml")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Threshold(_Strict):
    count: int = Field(default=1, ge=1)
    window_s: float = Field(default=0, ge=0)


class Match(_Strict):
    """Attribute conditions: `equals` any of the values; `not_equals` none of them."""

    attribute: str
    any_of: list[Any] = Field(default_factory=list)
    none_of: list[Any] = Field(default_factory=list)
    contains: str = ""

    def test(self, attributes: dict[str, Any], message: str) -> bool:
        value = message if self.attribute == "message" else attributes.get(self.attribute)
        if self.any_of and value not in self.any_of:
            return False
        if self.none_of and value in self.none_of:
            return False
        return not self.contains or self.contains.lower() in str(value or "").lower()


def _known_types(types: list[str]) -> list[str]:
    unknown = [t for t in types if t not in REGISTRY]
    if unknown:
        raise ValueError(f"unknown event type {unknown[0]!r}")
    return types


class SignalRule(_Strict):
    name: str
    types: list[str] = Field(min_length=1)
    where: list[Match] = Field(default_factory=list)
    klass: str = Field(alias="class")
    threshold: Threshold = Threshold()
    why: str = ""

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

    _types = field_validator("types")(lambda cls, v: _known_types(v))

    def matches(self, type_: str, attributes: dict[str, Any], message: str) -> bool:
        return type_ in self.types and all(m.test(attributes, message) for m in self.where)


class FailSlow(_Strict):
    ratio: float = Field(default=1.2, gt=1.0)
    for_s: float = Field(default=600, gt=0)
    baseline_steps: int = Field(default=5, ge=1)


class Progress(_Strict):
    hang_after_s: float = Field(default=900, gt=0)
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
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return value

    def matches(self, klass: str, entity: str) -> bool:
        if self.classes and klass not in self.classes:
            return False
        return not self.entity or re.search(self.entity, entity) is not None


class Routing(_Strict):
    rules: list[Route] = Field(default_factory=list)
    job_owner_classes: list[str] = Field(default_factory=list)
    """Classes owned by the job's own team (`team_of_project`, else `project:<name>`)."""
    team_of_project: dict[str, str] = Field(default_factory=dict)
    default: str = "platform"


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


class Rules(_Strict):
    version: int = 1
    cause_window_s: float = Field(default=900, gt=0)
    cause_slack_s: float = Field(default=5, ge=0)
    group_window_s: float = Field(default=1800, gt=0)
    restart_deadline_s: float = Field(default=1800, gt=0)
    repeat_offender_count: int = Field(default=3, ge=2)
    repeat_offender_window_s: float = Field(default=7 * 86400, gt=0)
    max_symptom_evidence: int = Field(default=64, ge=1)
    """Per attempt and event type: a 4096-rank job's timeouts are 64 references, not 4096
    (every one stays on the job's timeline; the incident counts the rest)."""
    signals: list[SignalRule] = Field(default_factory=list)
    symptoms: list[SymptomRule] = Field(default_factory=list)
    progress: Progress = Progress()
    routing: Routing = Routing()
    severity: Severity = Severity()

    def signal_rule(self, type_: str, attributes: dict[str, Any],
                    message: str) -> SignalRule | None:
        rules = self._index()[0].get(type_)
        if not rules:
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
