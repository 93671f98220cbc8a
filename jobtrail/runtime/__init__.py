"""The runtimes: shells that feed the pure processors and write what they return.

`jobtrail.app.open_runtime(settings)` picks one, once, for the CLI and the HTTP API alike:
- `embedded.EmbeddedRuntime`: the framed log under the home, chDB, snapshots; `submit`
  appends durably, `drain` processes, `command` goes through the log in order;
- `kafka.KafkaRuntime`: `submit` produces to `jobtrail.events`/`jobtrail.dlq` (returns once the
  broker acknowledged), `command` to `jobtrail.incident-commands`; the Faust worker
  (`faust_app.py`) processes; `drain` has nothing to do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from jobtrail.runtime.sink import BatchResult
    from jobtrail.store import Store
    from processors.incidents.model import Command, IncidentEvent
    from processors.topology import Topology
    from schemas.dead_letters import DeadLetter
    from schemas.events import Event


class Runtime(Protocol):
    mode: str

    @property
    def store(self) -> Store:
        """Where reads go (every read binds the caller's projects)."""

    def submit(self, records: Sequence[Event | DeadLetter]) -> int:
        """Durable before it returns (fsync'd log, or broker acknowledged)."""

    def command(self, command: Command) -> list[IncidentEvent] | None:
        """The events the command appended, or None when it was queued (cluster mode).
        Raises InvalidTransition when the incident's state refuses it."""

    def drain(self) -> BatchResult:
        """Process what is pending (embedded); nothing to do in cluster mode."""

    def topology(self) -> Topology: ...

    def health(self) -> dict[str, object]:
        """Readiness checks by name: "ok" or what is wrong."""

    def close(self) -> None: ...
