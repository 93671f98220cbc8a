"""Events that can never open, join or revise an incident: the detector's fast path.

Most of a fleet's events are timeline-only (a passing health check, a counter under every
rule's threshold, an alert's resolution). For such an event the detector's observation is
only event time moving on: the timers due before it fire and what the window forgets is
forgotten (`Detector.advance`). The lateness journal and its checkpoints take it as any
other (a late event's replay goes through it again, by the same test, under the rules of
that moment), so the fast path decides exactly what the slow one does
(`tests/processors/test_fast_path.py` holds every story to it, both ways).

Why `Detector._observe` does nothing else for such an event, step by step: a job's
lifecycle and its progress (`recovery.track`) need a `job_id`; `node.ready` is remembered
per node; planned work is a `change.*` or a `node.drained` (`planned.observe` changes
nothing for any other type when no signal rule matched); a signal needs a signal rule that
matches (`Rules.signal_rule`, the same call with the same rules); a symptom needs a job, or
a rule that reaches the job through the node (`via_node`: a kernel OOM kill logged without
the job), so an event any symptom rule matches is not inert.
"""

from __future__ import annotations

from processors.incidents.rules import Rules
from schemas.events import Event

WATCHED = frozenset({"node.ready", "node.drained", "node.not_ready", "node.power",
                     "topology.link"})
"""Types the detector reads whatever the rules say (with `change.*` and every event of a
job): a node back in service (weighed against a later fault), a drain (planned work, or an
Xid its reason names: `reasons.named_xid`, as a not-ready's), a node's power (its window
makes what follows a consequence), the wiring."""


def inert(rules: Rules, event: Event) -> bool:
    """Whether `event` can never open, join or revise an incident under `rules`: no job's
    event, no type the detector watches (`WATCHED`, `change.*`) and no signal rule whose
    conditions it meets."""
    return not event.job_id and event.type not in WATCHED \
        and not event.type.startswith("change.") \
        and rules.signal_rule(event.type, event.attributes, event.message) is None \
        and rules.symptom_rule(event.type, event.attributes, event.message) is None
