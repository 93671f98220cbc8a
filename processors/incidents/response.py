"""How fast an incident was handled: the one definition of time to detect, acknowledge,
mitigate, recover and resolve, read by the postmortem (and so `jobtrail postmortem show`)
from the incident's state and by the Grafana boards from the store, as `SQL`.

Every figure counts from the **first signal**: the earliest evidence the incident holds (or
its first signal, if it has no evidence). Each milestone is the incident's own stamp:

- detect: the incident opened; acknowledge: acknowledged; mitigate: mitigated;
- recover: progress resumed in every attempt that failed (the latest of their
  `resumed_at`; none while one has not resumed, or when no attempt failed);
- resolve: resolved, else closed.

`figures(inc)` and `SQL` must agree on every incident (tests/test_dashboard_queries.py
runs both on the scenario library).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from processors.incidents.model import Incident

MILESTONES = ("detect", "acknowledge", "mitigate", "recover", "resolve")


@dataclass(frozen=True)
class Response:
    first_signal: datetime | None
    at: dict[str, datetime | None]
    """Milestone name -> when it was reached (None: not yet)."""

    def seconds(self, milestone: str) -> float | None:
        """Time to `milestone` from the first signal, in seconds (None: not reached)."""
        end = self.at[milestone]
        if self.first_signal is None or end is None:
            return None
        return (end - self.first_signal).total_seconds()


def first_signal(inc: Incident) -> datetime | None:
    times = [e.time for e in inc.evidence.values()]
    return min([*times, inc.first_signal_at] if inc.first_signal_at else times, default=None)


def recovered(inc: Incident) -> datetime | None:
    failed = [j for j in inc.jobs.values() if j.role == "failed"]
    if not failed or any(j.resumed_at is None for j in failed):
        return None
    return max(j.resumed_at for j in failed if j.resumed_at is not None)


def figures(inc: Incident) -> Response:
    return Response(first_signal(inc), {
        "detect": inc.opened_at, "acknowledge": inc.acknowledged_at,
        "mitigate": inc.mitigated_at, "recover": recovered(inc),
        "resolve": inc.resolved_at or inc.closed_at})


SQL = """
SELECT i.incident_id AS incident_id,
       if(e.n = 0, i.first_signal_at,
          if(i.first_signal_at IS NULL, e.first, least(e.first, i.first_signal_at)))
         AS first_signal_at,
       i.opened_at AS detected_at, i.acknowledged_at AS acknowledged_at,
       i.mitigated_at AS mitigated_at,
       if(r.failed > 0 AND r.waiting = 0, r.resumed, NULL) AS recovered_at,
       coalesce(i.resolved_at, i.closed_at) AS resolved_at,
       dateDiff('millisecond', first_signal_at, detected_at) / 1000 AS detect_s,
       dateDiff('millisecond', first_signal_at, acknowledged_at) / 1000 AS acknowledge_s,
       dateDiff('millisecond', first_signal_at, mitigated_at) / 1000 AS mitigate_s,
       dateDiff('millisecond', first_signal_at, recovered_at) / 1000 AS recover_s,
       dateDiff('millisecond', first_signal_at, resolved_at) / 1000 AS resolve_s
FROM (SELECT * FROM incidents FINAL) AS i
LEFT JOIN (SELECT incident_id, count() AS n, min(time) AS first FROM incident_evidence FINAL
           WHERE role != 'moved' GROUP BY incident_id) AS e ON e.incident_id = i.incident_id
LEFT JOIN (SELECT incident_id, count() AS failed, countIf(resumed_at IS NULL) AS waiting,
                  max(resumed_at) AS resumed
           FROM incident_jobs FINAL WHERE role = 'failed' GROUP BY incident_id) AS r
       ON r.incident_id = i.incident_id
"""
"""One row per incident: the first signal, each milestone's time and the seconds to it
(NULL: not reached). A board selects from it as a subquery: `FROM (SQL) AS response`."""
