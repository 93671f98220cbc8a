"""Who is asking: a principal per credential, with its projects, teams and role.

A credential names a user or a service; the incident log records the principal (its name) and
the credential's label, never a name the caller writes. API tokens are configured as
`JOBTRAIL_API_TOKENS="tok=GRANT,GRANT;..."` where a grant is:

- a project (`vision`): read it, write its events and command its incidents (by role);
- `*`: every project (an operator's scope); `@infra`: may write events without a project;
- `user:NAME` or `service:NAME`: who the token is (default: a service named `token:<sha8>`);
- `role:ROLE`: `viewer`, `responder`, `commander` or `admin` (`roles.py` says what each may
  do). A token without a role keeps what tokens could do before roles: `admin` with `*`,
  `commander` otherwise; give every token a role;
- `team:NAME` (repeatable): the teams it acts for; `label:NAME`: the credential's label in the
  log (default `token:<sha8>`, never the token itself).

`tokA=vision` and `ops=*` mean what they meant before this format grew.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

OPERATOR = "*"
INFRASTRUCTURE = "@infra"
ROLES = ("viewer", "responder", "commander", "admin")
_KEYS = ("user", "service", "role", "team", "label")


def check_grants(grants: Iterable[str]) -> None:
    """Raise ValueError naming a grant that is not a project, `*`, `@infra` or a known
    `key:value` (run at start, so a typo never becomes a project name)."""
    for grant in grants:
        key, colon, value = grant.partition(":")
        if not colon:
            continue
        if key not in _KEYS:
            raise ValueError(f"token grant {grant!r}: {key!r} is not one of "
                             f"{', '.join(_KEYS)} (a project name has no colon)")
        if not value:
            raise ValueError(f"token grant {grant!r}: {key} needs a value")
        if key == "role" and value not in ROLES:
            raise ValueError(f"token grant {grant!r}: role must be one of {', '.join(ROLES)}")


@dataclass(frozen=True)
class Principal:
    name: str
    """Who acted, as the incident log records it (`alice`, `alertmanager`)."""
    projects: frozenset[str] = frozenset()
    operator: bool = False
    """Every project (`*`): reads are not narrowed, any incident may be commanded."""
    infrastructure: bool = False
    role: str = "admin"
    kind: str = "service"
    """`person` or `service`."""
    teams: frozenset[str] = frozenset()
    credential: str = ""
    """The credential's label (`token:ops-bot`, `oidc:https://idp`, `proxy`, `cli:os-user`)."""

    @classmethod
    def from_grants(cls, token: str, grants: Iterable[str]) -> Principal:
        granted = list(grants)
        check_grants(granted)
        fingerprint = "token:" + hashlib.sha256(token.encode()).hexdigest()[:8]
        plain = {g for g in granted if ":" not in g}
        keyed: dict[str, list[str]] = {}
        for g in granted:
            key, colon, value = g.partition(":")
            if colon:
                keyed.setdefault(key, []).append(value)
        operator = OPERATOR in plain
        kind, name = "service", fingerprint
        if "user" in keyed:
            kind, name = "person", keyed["user"][-1]
        elif "service" in keyed:
            name = keyed["service"][-1]
        role = keyed["role"][-1] if "role" in keyed else ("admin" if operator else "commander")
        label = "token:" + keyed["label"][-1] if "label" in keyed else fingerprint
        return cls(name, frozenset(plain - {OPERATOR, INFRASTRUCTURE}), operator=operator,
                   infrastructure=INFRASTRUCTURE in plain or operator, role=role, kind=kind,
                   teams=frozenset(keyed.get("team", ())), credential=label)

    @property
    def scope(self) -> list[str] | None:
        """Projects to bind reads to; None = every project (an operator)."""
        return None if self.operator else sorted(self.projects)

    def may_read(self, project: str) -> bool:
        return self.operator or project in self.projects

    def allows(self, role: str) -> bool:
        """Whether this principal's role is `role` or above it."""
        return ROLES.index(self.role) >= ROLES.index(role)

    def write_refusal(self, project: str) -> str:
        """Why this principal may not write an event of `project` ('' when it may)."""
        if self.operator:
            return ""
        if not project:
            return "" if self.infrastructure else (
                "this token may not write infrastructure events (events without a project); "
                "give it the @infra grant")
        if project in self.projects:
            return ""
        return f"this token may not write to project {project!r}"

    def command_id(self, given: str) -> str:
        """The idempotency key of a command this principal sends: its own id, scoped to the
        principal, so another principal re-sending (or guessing) the same id is a command
        of its own, never swallowed as a repeat of this one's."""
        scoped = f"{self.kind}:{self.name}/{given}"
        if len(scoped) <= 200:
            return scoped
        return f"{self.kind}:{self.name[:100]}/" + hashlib.sha256(given.encode()).hexdigest()

    def describe(self) -> str:
        """One line for refusals: who, through what, with which role."""
        return f"{self.kind} {self.name} ({self.credential or 'no credential'}, {self.role})"

    def actor(self) -> Any:
        """The incident log's actor for what this principal does."""
        from schemas.incident_events import Actor

        return Actor(kind="person" if self.kind == "person" else "service",
                     name=self.name[:200], credential=self.credential[:200])

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "role": self.role,
                "teams": sorted(self.teams), "projects": sorted(self.projects),
                "all_projects": self.operator, "infrastructure": self.infrastructure,
                "credential": self.credential}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Principal:
        role = str(data.get("role") or "viewer")
        return cls(str(data["name"]), frozenset(map(str, data.get("projects") or ())),
                   operator=bool(data.get("all_projects")),
                   infrastructure=bool(data.get("infrastructure")),
                   role=role if role in ROLES else "viewer",
                   kind="person" if data.get("kind") == "person" else "service",
                   teams=frozenset(map(str, data.get("teams") or ())),
                   credential=str(data.get("credential") or ""))


LOCAL = Principal("local", operator=True, infrastructure=True, role="admin", kind="service",
                  credential="open-api")
"""The caller when no credential of any kind is configured (local use only)."""


def cli_principal(identity: str, os_user: str) -> Principal:
    """The operator on the host: `JOBTRAIL_IDENTITY` when set, else the OS user; every
    project, the admin role (the CLI opens the store itself)."""
    name = identity or os_user or "unknown"
    return Principal(name, operator=True, infrastructure=True, role="admin", kind="person",
                     credential="cli:JOBTRAIL_IDENTITY" if identity else "cli:os-user")
