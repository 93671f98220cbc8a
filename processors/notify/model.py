"""Subscriptions, silences and notification decisions: the data the alerts processor works on.

A subscription is owned by a team or a person, bound to the projects of whoever created it
(an operator's is bound to none: it sees everything), and says which incidents (label
matchers in Alertmanager's syntax), which transitions, which channel, and how (immediately
or as a digest, quiet hours, a rate limit, the initial wait, repeats, flap damping). Channel
secrets (a Slack URL, a `whsec_` signing secret) are never part of it: it holds references
(`secret:NAME`, `env:VAR`) resolved at delivery (`jobtrail.alerts.secrets`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ingest.redact import redact_text
from schemas import patterns

TRANSITIONS = ("opened", "cause_changed", "severity_raised", "owner_changed", "mitigated",
               "recovery_verified", "recovery_failed", "resolved", "reopened",
               "postmortem_published", "postmortem_due", "followup_overdue",
               "followup_proposed")
LABELS = ("team", "owner", "class", "severity", "project", "job", "entity", "cause_entity",
          "rule", "status", "scope")
"""What matchers can name (`team` and `owner` are the same label: the owning team, and the
teams a follow-up is proposed or open for; `scope`
is `job` for a job's own incident, `entity` for an entity's)."""
CHANNELS = ("webhook", "slack", "mattermost", "teams", "email")
Transition = Literal["opened", "cause_changed", "severity_raised", "owner_changed", "mitigated",
                     "recovery_verified", "recovery_failed", "resolved", "reopened",
                     "postmortem_published", "postmortem_due", "followup_overdue",
                     "followup_proposed"]
DEFAULT_ON: tuple[Transition, ...] = ("opened", "cause_changed", "severity_raised",
                                      "owner_changed", "recovery_verified", "recovery_failed",
                                      "resolved", "reopened", "followup_proposed")

_MATCHER = re.compile(r"^\s*([a-z_]+)\s*(=~|!~|!=|=)\s*(.*?)\s*$")


class Matcher(BaseModel):
    """`label=value`, `label!=value`, `label=~regex`, `label!~regex` (anchored, like
    Alertmanager's). A label with several values (an incident's projects and jobs) matches
    `=`/`=~` when any value does, `!=`/`!~` when none does; a missing label is ''."""

    model_config = ConfigDict(frozen=True)

    label: str
    op: Literal["=", "!=", "=~", "!~"]
    value: str

    @field_validator("value")
    @classmethod
    def _redacted(cls, v: str) -> str:
        return redact_text(v)  # a value is stored and listed: never a credential

    @field_validator("label")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in LABELS:
            raise ValueError(f"label must be one of {', '.join(LABELS)}")
        return v

    @model_validator(mode="after")
    def _regex(self) -> Matcher:
        if self.op in ("=~", "!~"):
            try:
                patterns.compile_pattern(self.value)
            except ValueError as exc:
                raise ValueError(f"{self.label}{self.op}{self.value}: {exc}") from None
        return self

    @classmethod
    def parse(cls, text: str) -> Matcher:
        m = _MATCHER.match(text)
        if not m:
            raise ValueError(f"matcher {text!r}: write label=value, label!=value, "
                             "label=~regex or label!~regex")
        value = m[3]
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        return cls.model_validate({"label": m[1], "op": m[2], "value": value})

    def __str__(self) -> str:
        return f"{self.label}{self.op}{self.value}"

    def matches(self, labels: Mapping[str, Sequence[str]]) -> bool:
        name = "team" if self.label == "owner" else self.label
        values = list(labels.get(name) or [""])
        if self.op in ("=", "!="):
            hit = self.value in values
        else:
            hit = any(patterns.fullmatch(self.value, v) for v in values)  # RE2: linear
        return hit if self.op in ("=", "=~") else not hit


def _clock(text: str) -> time:
    try:
        hour, minute = text.split(":")
        return time(int(hour), int(minute))
    except ValueError:
        raise ValueError(f"{text!r}: a time of day as HH:MM") from None


class QuietHours(BaseModel):
    """No messages between `start` and `end` (the subscriber's time zone; may cross midnight)
    except for the `bypass` severities; held messages go out when the quiet hours end."""

    model_config = ConfigDict(frozen=True)

    start: str
    end: str
    bypass: tuple[str, ...] = ("sev1",)

    @field_validator("start", "end")
    @classmethod
    def _hhmm(cls, v: str) -> str:
        _clock(v)
        return v


class RateLimit(BaseModel):
    model_config = ConfigDict(frozen=True)

    count: int = Field(20, ge=1)
    per_s: int = Field(3600, ge=1)


class Channel(BaseModel):
    """Where messages go. `target` is an email address (email) or a reference to the URL
    (`secret:NAME` in HOME's secret store, `env:VAR`); `secret` the webhook's signing secret
    reference; `hint` what people see (a URL's host, never its path)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["webhook", "slack", "mattermost", "teams", "email"]
    target: str = Field(min_length=1)
    secret: str = ""
    hint: str = ""

    @field_validator("hint")
    @classmethod
    def _redacted(cls, v: str) -> str:
        return redact_text(v)

    @model_validator(mode="after")
    def _refs(self) -> Channel:
        if self.kind == "email":
            if not re.fullmatch(r"[^@\s,;<>]+@[^@\s,;<>]+\.[^@\s,;<>]+", self.target):
                raise ValueError(f"target: {self.target!r} is not an email address")
        elif not self.target.startswith(("secret:", "env:")):
            raise ValueError("target: a reference (secret:NAME or env:VAR), never the URL "
                             "itself: URLs of chat webhooks are credentials")
        if self.secret and not self.secret.startswith(("secret:", "env:")):
            raise ValueError("secret: a reference (secret:NAME or env:VAR)")
        return self


class Creator(BaseModel):
    """Who made a subscription, as their credential said then: an acknowledge link in its
    messages may do only what this principal may do now (`jobtrail.alerts.links`)."""

    model_config = ConfigDict(frozen=True)

    name: str
    kind: str = "person"
    credential: str = ""
    """The credential's label: `cli:...` (the host's operator), `token:...`, `oidc:...`,
    `proxy`."""
    role: str = ""
    projects: tuple[str, ...] = ()
    operator: bool = False

    @classmethod
    def of(cls, who: Any) -> Creator:
        """A principal (`jobtrail.identity.Principal`) as a creator."""
        return cls(name=who.name, kind=who.kind, credential=who.credential, role=who.role,
                   projects=tuple(sorted(who.projects)), operator=who.operator)


class Subscription(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1, max_length=80)
    name: str = Field(min_length=1, max_length=120)
    owner: str = Field(min_length=1, max_length=120)
    projects: tuple[str, ...] = ()
    """The creator's projects: only incidents touching them, only their jobs in messages;
    () for an operator's subscription."""
    matchers: tuple[Matcher, ...] = ()
    on: tuple[Transition, ...] = DEFAULT_ON
    channel: Channel
    mode: Literal["immediate", "digest"] = "immediate"
    digest_cron: str = ""
    timezone: str = "UTC"
    quiet: QuietHours | None = None
    rate_limit: RateLimit = RateLimit()
    wait_s: int = Field(30, ge=0, le=3600)
    repeat_s: int = Field(1800, ge=0)
    """Repeat the first message of an unacknowledged sev1 this often (0: never)."""
    max_repeats: int = Field(6, ge=0, le=48)
    flap_hold_s: int = Field(600, ge=0)
    """A reopen this soon after the resolve is held this long, and dropped (with the
    resolve that ends it) if the incident is resolved again meanwhile."""
    max_age_s: int = Field(86400, ge=0)
    """A transition this much older than the newest incident event is not sent (0: any)."""
    enabled: bool = True
    disabled_reason: str = ""
    version: int = 1
    created_by: str = ""
    """The principal that made it (HTTP); only it, or an operator, may replace or delete
    it. '' for an operator's (the CLI's)."""
    creator: Creator | None = None
    """Who made it, operators too (None for one made before this was recorded: then
    `created_by`, or an operator)."""
    history: bool = False
    """Also page what was over before jobtrail saw it (a backfill, a late import): by
    default such transitions are logged as suppressed, not sent."""

    @field_validator("name", "owner", "disabled_reason")
    @classmethod
    def _redacted(cls, v: str) -> str:
        return redact_text(v)  # stored and listed: the same redaction as events

    @field_validator("timezone")
    @classmethod
    def _zone(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"timezone: {v!r} is not an IANA time zone") from None
        return v

    @model_validator(mode="after")
    def _digest(self) -> Subscription:
        if self.mode == "digest":
            from croniter import croniter

            if not self.digest_cron or not croniter.is_valid(self.digest_cron):
                raise ValueError(f"digest_cron: {self.digest_cron!r} is not a cron "
                                 "expression (digest mode needs one, e.g. '0 9 * * 1-5')")
        return self

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)


def subscription_id(owner: str, name: str, creator: str = "") -> str:
    """An operator's subscription is named by (owner, name); a token's also by who made it,
    so one caller never names (and replaces) another's."""
    key = f"{owner}\x00{name}" + (f"\x00{creator}" if creator else "")
    return "sub-" + hashlib.sha256(key.encode()).hexdigest()[:12]


class Silence(BaseModel):
    """Matching notifications decided between `starts` and `ends` are suppressed (logged)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    matchers: tuple[Matcher, ...] = Field(min_length=1)
    starts: datetime
    ends: datetime
    reason: str = Field(min_length=1)
    by: str = ""
    """Who made it: the caller's principal (HTTP), or the CLI's --by, redacted there."""
    projects: tuple[str, ...] = ()
    """The incidents' projects it covers; () covers none (a silence made before this rule
    with () is inert)."""
    all_projects: bool = False
    """Covers every project: only an operator's silence (the CLI, an operator token)."""

    @field_validator("reason")
    @classmethod
    def _redacted(cls, v: str) -> str:
        return redact_text(v)

    @model_validator(mode="after")
    def _order(self) -> Silence:
        if self.ends <= self.starts:
            raise ValueError("ends: must be after starts")
        return self

    def covers(self, labels: Mapping[str, Sequence[str]], at: datetime) -> bool:
        if not self.starts <= at < self.ends:
            return False
        if not self.all_projects and not set(labels.get("project") or ()) & set(
                self.projects):
            return False
        return all(m.matches(labels) for m in self.matchers)


@dataclass(frozen=True)
class Decision:
    """One notification (or its suppression) for one subscription, incident and transition.

    `id` is a hash of (subscription, incident, key): the same decision whenever, however
    often the log is replayed, so the outbox never holds it twice and a webhook's
    `webhook-id` is stable across retries and replays."""

    id: str
    subscription_id: str
    incident_id: str
    transition: str
    key: str
    seq: int
    time: datetime
    not_before: datetime
    status: str  # pending (to send), suppressed
    reason: str = ""
    digest_key: str = ""
    folded: tuple[str, ...] = ()
    severity: str = ""
    labels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def decision_id(subscription: str, incident: str, key: str) -> str:
    return "ntf-" + hashlib.sha256(f"{subscription}\x00{incident}\x00{key}".encode()) \
        .hexdigest()[:20]


MAX_SILENCE_S = 366 * 86400


def silence_length(seconds: float) -> timedelta:
    """A silence's length, checked: positive and at most a year (a longer one is a
    subscription to delete, not a silence)."""
    if not seconds == seconds or seconds <= 0:  # NaN too
        raise ValueError("a silence must last a positive time")
    if seconds > MAX_SILENCE_S:
        raise ValueError(f"a silence lasts at most {MAX_SILENCE_S // 86400} days; delete or "
                         "disable the subscription instead")
    return timedelta(seconds=seconds)
