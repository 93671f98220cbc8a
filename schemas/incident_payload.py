"""What every incident event payload is built on: the actor who did it, the `Payload` base
(kind, schema version, its stored JSON) and the reference to an impacted job attempt."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field


class Actor(BaseModel):
    """Who did it: a person or a service (from the credential that authenticated the
    request: the name is the principal's, never one the caller wrote), a team, or a processor
    and its rule. `credential` labels that credential (`token:ops-bot`, `oidc:<issuer>`,
    `proxy`, `cli:os-user`, `cli:JOBTRAIL_IDENTITY`); it defaults to '' so the log written
    before credentials were recorded still folds: there, a person's name was claimed, not
    known (the API shows it as `unverified`). Processors act under no credential."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["person", "service", "team", "processor"]
    name: str = Field(min_length=1, max_length=200)
    rule: str = ""
    credential: str = Field(default="", max_length=200)

    def label(self) -> str:
        via = f" via {self.credential}" if self.credential else ""
        return f"{self.kind}:{self.name}" + (f" (rule {self.rule})" if self.rule else "") + via


class Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)

    KIND: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1
    schema_version: int = 1
    at: datetime | None = None
    """When it happened, as a person said (`--at`): the envelope's `time` is when it was
    recorded. Unset for the processors' decisions, whose time is the event's own."""

    def data(self) -> dict[str, Any]:
        """The JSON object stored in `incident_log.data` (set fields only: compact; the
        schema version whenever it is past 1, so a reader knows not to upcast it)."""
        out = self.model_dump(mode="json", by_alias=True, exclude_unset=True)
        if self.VERSION > 1:
            out["schema_version"] = self.VERSION
        return out


class JobRef(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")

    project: str
    job_id: str
    attempt: int

    @property
    def key(self) -> str:
        return f"{self.project}/{self.job_id}/{self.attempt}"
