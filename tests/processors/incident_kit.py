"""Building blocks for incident scenarios on the sample cluster's 2-rail fat tree
(`jobtrail.learn.sample.topology()`: node-001..016 under leaf-01 (rail 0, port pN = node N) and
leaf-02, node-017..032 under leaf-03/leaf-04, and so on; 8 GPUs per node)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from jobtrail.learn import sample
from processors.incidents.model import Incident, IncidentEvent, fold
from processors.pipeline import Pipeline
from processors.topology import Topology
from schemas.events import Event, Source
from schemas.registry import REGISTRY
from schemas.topology import TopologyFile

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
PROJECT = "llm-pretrain"


def at(minutes: float, seconds: float = 0) -> datetime:
    return T0 + timedelta(minutes=minutes, seconds=seconds)


def nodes(first: int, last: int) -> list[str]:
    return [f"node-{n:03d}" for n in range(first, last + 1)]


def ev(type_: str, when: datetime, *, job: str | None = None, attempt: int | None = None,
       project: str = PROJECT, id: str | None = None, **fields: Any) -> Event:
    attributes = fields.pop("attributes", {})
    # ids from content: building the same scenario twice gives the same events
    natural = json.dumps([type_, when.isoformat(), job, attempt, fields, attributes],
                         sort_keys=True)
    digest = hashlib.sha256(natural.encode()).hexdigest()[:12]
    return Event(id=id or f"{type_}-{digest}", type=type_,
                 source=Source(REGISTRY[type_].source), time=when, cluster=sample.CLUSTER,
                 project=project if job else "", job_id=job, attempt=attempt,
                 observed_at=when, attributes=attributes, **fields)


def started(job: str, attempt: int, when: datetime, on: list[str], project: str = PROJECT,
            **attrs: Any) -> Event:
    return ev("job.started", when, job=job, attempt=attempt, project=project,
              attributes={"nodes": on, "gpus": 8 * len(on), "mounts": ["lustre-scratch:/x"],
                          **attrs})


def step(job: str, attempt: int, when: datetime, n: int, **attrs: Any) -> Event:
    return ev("job.step", when, job=job, attempt=attempt, entity="rank-0",
              attributes={"step": n, **attrs})


def pipeline() -> Pipeline:
    wiring = Topology.from_file(TopologyFile.model_validate(sample.topology()))
    return Pipeline(timedelta(seconds=30), wiring)


def run(events: list[Event], batch: int = 1) -> tuple[list[IncidentEvent], Pipeline]:
    """Arrival order, `batch` events at a time, through the shared pipeline."""
    p = pipeline()
    log: list[IncidentEvent] = []
    for i in range(0, len(events), batch):
        log.extend(p.process(events[i:i + batch]).incidents)
    return log, p


def incidents(log: list[IncidentEvent]) -> list[Incident]:
    return sorted(fold(log).values(), key=lambda i: (i.opened_at or T0, i.id))


def only(log: list[IncidentEvent], **match: Any) -> Incident:
    found = [i for i in incidents(log)
             if all(getattr(i, k) == v for k, v in match.items())]
    assert len(found) == 1, f"{match}: {[(i.klass, i.entity, i.key) for i in incidents(log)]}"
    return found[0]


KEYS = {"incidents": ("incident_id",), "incident_evidence": ("incident_id", "event_id"),
        "incident_jobs": ("incident_id", "project", "job_id", "attempt"),
        "actions": ("incident_id", "action_id")}
"""Each projection's ORDER BY (schemas/clickhouse/0002_incidents.sql)."""

Tables = dict[str, dict[tuple[Any, ...], dict[str, Any]]]


def stored(batches: list[tuple[list[Incident], list[IncidentEvent]]]) -> Tables:
    """The projections as the store keeps them after the runtimes wrote each batch's rows
    (`projection_rows(states, changes)`): ReplacingMergeTree, the highest `version` per key
    (the last written without one)."""
    from processors.incidents.projection import projection_rows

    tables: Tables = {table: {} for table in KEYS}
    for states, changes in batches:
        for table, rows in projection_rows(states, changes or None).items():
            for row in rows:
                key = tuple(row[k] for k in KEYS[table])
                old = tables[table].get(key)
                if old is None or row.get("version", 0) >= old.get("version", 0):
                    tables[table][key] = row
    return tables


def replayed(log: list[IncidentEvent]) -> Tables:
    """The projections `jobtrail replay` writes from the whole log."""
    return stored([(list(fold(log).values()), [])])
