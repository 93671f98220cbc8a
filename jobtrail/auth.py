"""Who is asking, and what they may read and write (HTTP tokens; the CLI is an operator).

`JOBTRAIL_API_TOKENS="tokA=vision;tokB=llm-pretrain,nlp;ops=*;am=@infra"`:
- a project list: read those projects; write events of those projects only;
- `*`: an operator: every project, infrastructure events, every incident command;
- `@infra`: an infrastructure source (Alertmanager, node shippers): may write events that
  carry no project (switches, nodes, filesystems); reads nothing project-bound. It can be
  combined with projects (`ci=@infra,vision`).

Writes are bound like reads: an event of a project the token does not hold, or a project-less
event from a token without `@infra`, refuses the whole request (403 naming the project), so a
tenant cannot change another tenant's attempts or incidents, directly or through a forged
switch event. Without any token configured the API is open (local use) and every caller is an
operator.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

OPERATOR = "*"
INFRASTRUCTURE = "@infra"


@dataclass(frozen=True)
class Principal:
    name: str
    """A label for logs and audit (`token:1a2b3c4d`), never the token itself."""
    projects: frozenset[str] = frozenset()
    operator: bool = False
    infrastructure: bool = False

    @classmethod
    def from_grants(cls, token: str, grants: Iterable[str]) -> Principal:
        granted = set(grants)
        name = "token:" + hashlib.sha256(token.encode()).hexdigest()[:8]
        return cls(name, frozenset(granted - {OPERATOR, INFRASTRUCTURE}),
                   operator=OPERATOR in granted,
                   infrastructure=INFRASTRUCTURE in granted or OPERATOR in granted)

    @property
    def scope(self) -> list[str] | None:
        """Projects to bind reads to; None = every project (an operator)."""
        return None if self.operator else sorted(self.projects)

    def may_read(self, project: str) -> bool:
        return self.operator or project in self.projects

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


LOCAL = Principal("local", operator=True, infrastructure=True)
