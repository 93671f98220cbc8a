"""The incident aggregate: state is a fold over its events (DESIGN §6).

One import for what the rest of the code needs of it; each part lives in its own module:

    envelope     `IncidentEvent`, `Actor`, deterministic ids, the lifecycle table
    aggregate    the current state: `Incident`, `JobImpact`, `Evidence`, `Action`
    evolve       the fold: `apply` (one case per payload class), `fold`
    transitions  deciding: `check` (`InvalidTransition` names the current state),
                 `new_event`, people's `Command`s

Lifecycle: open -> acknowledged -> mitigated -> resolved -> closed, `reopened` on a regression
(resolved -> open). Nothing moves out of `closed`.
"""

from __future__ import annotations

from processors.incidents.aggregate import (
    RECOVERY_STAGES,
    Action,
    Evidence,
    Incident,
    JobImpact,
    recovery_of,
)
from processors.incidents.envelope import (
    ACTION_STATUSES,
    KINDS,
    SEVERITIES,
    STATUSES,
    Actor,
    IncidentEvent,
    InvalidTransition,
    event_id,
    incident_id,
)
from processors.incidents.evolve import apply, fold
from processors.incidents.transitions import (
    COMMANDS,
    Command,
    CommandName,
    check,
    new_event,
)

__all__ = [
    "ACTION_STATUSES", "COMMANDS", "KINDS", "RECOVERY_STAGES", "SEVERITIES", "STATUSES",
    "Action", "Actor", "Command", "CommandName", "Evidence", "Incident", "IncidentEvent",
    "InvalidTransition", "JobImpact", "apply", "check", "event_id", "fold", "incident_id",
    "new_event", "recovery_of",
]
