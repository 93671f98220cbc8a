"""The incident scenario library: failure stories as data files, one runner for all.

`tests/scenarios/incidents/<name>.yaml`:

    name: ib-flap
    story: what happened, in an SRE's words
    source: where the story comes from (hand-written, a public issue, a postmortem sample)
    start: "2026-11-30T09:00:00Z"      # `at` offsets count from here
    project: llm-pretrain              # default project of job events
    topology: sample                   # the bundled 64-node fat tree, or a topology file inline
    gpu_pci: {"0000:9b:00.0": 3}       # optional: the topology's PCI address -> GPU table
    rules: {...}                       # optional overrides merged into the default rules
    lateness: 6h                       # optional: the lateness horizon (default 168h)
    events:                            # in arrival order
      - {at: 0s, type: job.started, job: pretrain, attempt: 1,
         attributes: {nodes: "node-[001-064]", gpus: 512}}
      - {at: 60m10s, type: network.port_down, scope: port, entity: leaf-01/p2}
    expect:
      incidents:                       # exactly these (matched by class, then entity)
        - {class: network, entity: leaf-01/p2, owner: network, lost_gpu_hours: 298.666667}

Event fields are the canonical envelope's, with `job` for `job_id`, `at` for an offset
(`71m3.05s`, `1h2m`, `90s`), and host lists (`node-[001-064]`) in `attributes.nodes`. Ids
are derived from the content, so a file always gives the same events. A source's own output
is an item `{raw: <adapter>, text: ..., job:, attempt:, node:, at:}` read by that adapter
(slurmctld lines, `squeue --json`, a training log) as a shipper would deliver it. What `expect` may
check is in `check_incident`; a postmortem's failure sample is a file like these
(`jobtrail postmortem sample`), checked with `jobtrail scenario check FILE`.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from ingest.slurm import expand_hostlist
from processors.incidents.model import Incident, IncidentEvent, fold
from processors.incidents.rules import Rules, load_rules
from schemas.events import Event, Source, parse_time
from schemas.registry import REGISTRY

LIBRARY = Path(__file__).resolve().parents[2] / "tests" / "scenarios" / "incidents"
_OFFSET = re.compile(r"^(?:(?P<h>\d+(?:\.\d+)?)h)?(?:(?P<m>\d+(?:\.\d+)?)m)?"
                     r"(?:(?P<s>\d+(?:\.\d+)?)s)?$")


def offset(text: str | int | float) -> timedelta:
    if isinstance(text, int | float):
        return timedelta(seconds=text)
    match = _OFFSET.match(str(text).strip())
    if not match or not any(match.groups()):
        raise ValueError(f"not an offset: {text!r} (use 1h2m3.5s, 90s, 5m)")
    return timedelta(hours=float(match["h"] or 0), minutes=float(match["m"] or 0),
                     seconds=float(match["s"] or 0))


DEFAULT_LATENESS = "168h"
"""A story's files arrive one after another, each spanning the story's days: a week's
horizon decides every arrival order as the events' times do (`processors.incidents.
lateness`; its replay budget bounds the cost)."""


@dataclass
class Scenario:
    name: str
    story: str
    source: str
    start: datetime
    events: list[Event]
    expect: dict[str, Any]
    rules: Rules
    path: Path | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    def at(self, text: str | int | float) -> datetime:
        return self.start + offset(text)


def _event(record: dict[str, Any], start: datetime, project: str) -> Event:
    data = dict(record)
    if "job" in data:
        data["job_id"] = data.pop("job")
    if "at" in data:
        data["time"] = start + offset(data.pop("at"))
    else:
        data["time"] = parse_time(data["time"])
    attributes = dict(data.get("attributes") or {})
    if isinstance(attributes.get("nodes"), str):
        attributes["nodes"] = expand_hostlist(attributes["nodes"])
    data["attributes"] = attributes
    data.setdefault("cluster", "cluster-a")
    if data.get("job_id"):
        data.setdefault("project", project)
    data.setdefault("source", REGISTRY[data["type"]].source.value)
    natural = json.dumps({k: v for k, v in data.items() if k != "id"}, sort_keys=True,
                         default=str)
    data.setdefault("id", f"{data['type']}-{hashlib.sha256(natural.encode()).hexdigest()[:12]}")
    data.setdefault("observed_at", data["time"])
    data["source"] = Source(data["source"])
    return Event.model_validate(data)


def _raw(record: dict[str, Any], start: datetime, project: str, origin: str) -> list[Event]:
    """A source's own output delivered as it is (`raw: slurmctld`, `text: |` the lines), read
    by that adapter with what the shipper would say (`job`, `attempt`, `node`, `cluster`,
    `project`; `at`: when it was read). Every line must give events or be skipped: a dead
    letter is an error of the scenario, naming the reason."""
    from ingest.adapters import Context, registry
    from ingest.adapters import run as read

    adapter = registry().get(str(record["raw"]))
    if adapter is None:
        raise ValueError(f"raw: no adapter {record['raw']!r}")
    attempt = record.get("attempt")
    ctx = Context(producer=f"scenario@{record.get('cluster', 'cluster-a')}",
                  observed_at=start + offset(record.get("at", 0)),
                  cluster=str(record.get("cluster", "cluster-a")),
                  project=str(record.get("project", project)), job_id=str(record.get("job", "")),
                  attempt=attempt if isinstance(attempt, int) else None,
                  node=str(record.get("node", "")), origin=origin)
    out = read(adapter, str(record["text"]), ctx)
    dead = [d for d in out if not isinstance(d, Event)]
    if dead:
        raise ValueError(f"raw {record['raw']}: dead-lettered: "
                         f"{[getattr(d, 'reason', d) for d in dead][:3]}")
    return [e for e in out if isinstance(e, Event)]


def _rules(overrides: dict[str, Any] | None) -> Rules:
    base = load_rules()
    if not overrides:
        return base
    return Rules.model_validate(merge_rules(base.model_dump(by_alias=True), overrides))


def _named(items: Any) -> bool:
    return isinstance(items, list) and all(isinstance(i, dict) and "name" in i for i in items)


def merge_rules(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A rules change over the rules file: a mapping merges key by key, a list of named
    rules (`signals`, ...) by name (an item replaces the fields it names, a new name is
    appended, `drop: true` removes it), anything else replaces. A monitor is then a few
    lines: `signals: [{name: ib-port-flap, threshold: {count: 1, window_s: 300}}]`."""
    merged = dict(base)
    for key, value in overrides.items():
        old = merged.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            merged[key] = {**old, **value}
        elif isinstance(old, list) and _named(value) and _named(old):
            items = {i["name"]: dict(i) for i in old}
            for item in value:
                if item.get("drop"):
                    items.pop(item["name"], None)
                else:
                    items[item["name"]] = {**items.get(item["name"], {}), **item}
            merged[key] = list(items.values())
        else:
            merged[key] = value
    return merged


class ScenarioError(ValueError):
    """A scenario file that is not one; the message names the file and the key."""


def load(path: Path) -> Scenario:
    from schemas.documents import DocumentRefused, load_yaml

    try:
        data = load_yaml(path.read_text(), what=str(path))
    except DocumentRefused as exc:
        raise ScenarioError(str(exc)) from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{path}: not YAML: {exc}") from None
    return load_document(data, path)


def load_document(data: Any, path: Path | None = None) -> Scenario:
    where = f"{path}: " if path else ""
    if not isinstance(data, dict):
        raise ScenarioError(f"{where}a scenario is a mapping (name, events, expect)")
    if not isinstance(data.get("name"), str) or not data["name"].strip():
        raise ScenarioError(f"{where}name: required (a non-empty string)")
    for key, kind in (("events", list), ("expect", dict)):
        if key in data and not isinstance(data[key], kind):
            raise ScenarioError(f"{where}{key}: must be a {'list' if kind is list else 'mapping'}")
    if any(not isinstance(r, dict) for r in data.get("events") or []):
        raise ScenarioError(f"{where}events: each event is a mapping")
    start = parse_time(data.get("start", "2026-11-30T09:00:00Z"))
    project = data.get("project", "llm-pretrain")
    events = []
    for n, record in enumerate(data.get("events") or []):
        try:
            if "raw" in record:
                events.extend(_raw(record, start, project, f"{data['name']}:events[{n}]"))
            else:
                events.append(_event(record, start, project))
        except (KeyError, TypeError, ValueError) as exc:
            raise ScenarioError(f"{where}events[{n}]: {exc}") from None
    return Scenario(data["name"], data.get("story", ""), data.get("source", ""), start, events,
                    data.get("expect", {}), _rules(data.get("rules")), path, data)


def library() -> list[Path]:
    return sorted(LIBRARY.glob("*.yaml"))


# --- running and checking ---------------------------------------------------------------------


def topology(scenario: Scenario) -> dict[str, Any]:
    """The scenario's wiring as a topology file: the sample fat tree, or the one the file
    carries (a postmortem's sample carries its cluster's), with its GPU table."""
    from jobtrail.learn import sample
    given = scenario.raw.get("topology", "sample")
    spec = dict(given) if isinstance(given, dict) else sample.topology()
    spec["gpu_pci"] = scenario.raw.get("gpu_pci", spec.get("gpu_pci", {}))
    return spec


def wiring(scenario: Scenario) -> Any:
    from processors.topology import Topology
    from schemas.topology import TopologyFile

    return Topology.from_file(TopologyFile.model_validate(topology(scenario)))


class Clusters:
    """One pipeline per cluster, as the runtimes' sink holds them (entity names are unique
    only within a cluster): a batch's events go to their cluster's pipeline, in arrival order
    within it, and the outputs are concatenated cluster by cluster, as the sink does."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.by_cluster: dict[str, Any] = {}

    def pipeline_of(self, cluster: str) -> Any:
        from processors.pipeline import Pipeline

        found = self.by_cluster.get(cluster)
        if found is None:
            found = self.by_cluster[cluster] = Pipeline(
                timedelta(seconds=30), wiring(self.scenario), rules=self.scenario.rules,
                lateness=offset(self.scenario.raw.get("lateness", DEFAULT_LATENESS)))
        return found

    def process(self, events: list[Event]) -> Any:
        from processors.pipeline import Outputs

        groups: dict[str, list[Event]] = {}
        for event in events:
            groups.setdefault(event.cluster, []).append(event)
        merged = Outputs()
        for cluster, group in groups.items():
            out = self.pipeline_of(cluster).process(group)
            merged.events += out.events
            merged.timeline += out.timeline
            merged.attempts += out.attempts
            merged.incidents += out.incidents
            merged.incident_states += out.incident_states
        return merged


def run(scenario: Scenario, batch: int = 1) -> tuple[list[IncidentEvent], Any]:
    """Arrival order, `batch` events at a time, through the shared pipeline (one per
    cluster)."""
    pipeline = Clusters(scenario)
    log: list[IncidentEvent] = []
    for i in range(0, len(scenario.events), batch):
        log.extend(pipeline.process(scenario.events[i:i + batch]).incidents)
    if len(pipeline.by_cluster) == 1:
        return log, next(iter(pipeline.by_cluster.values()))
    return log, pipeline


def _near(actual: float, expected: float, tolerance: float = 1e-5) -> bool:
    return abs(actual - expected) <= tolerance


def check_incident(scenario: Scenario, inc: Incident, want: dict[str, Any],
                   log: list[IncidentEvent] | None = None) -> list[str]:
    """What differs between an incident and its expectation (empty: it matches)."""
    problems: list[str] = []

    def differ(name: str, actual: Any, expected: Any) -> None:
        if isinstance(expected, float) and isinstance(actual, int | float):
            if not _near(float(actual), expected):
                problems.append(f"{name}: {actual!r} != {expected!r}")
        elif actual != expected:
            problems.append(f"{name}: {actual!r} != {expected!r}")

    simple = {"class": inc.klass, "entity": inc.entity, "owner": inc.owner,
              "cluster": inc.cluster, "title": inc.title,
              "owner_rule": inc.owner_rule, "key": inc.key, "severity": inc.severity,
              "recovery": inc.recovery, "status": inc.status, "signals": inc.signals,
              "confidence": round(inc.confidence, 4), "lost_gpu_hours": inc.lost_gpu_hours,
              "lost_steps": inc.lost_steps, "loss_unknown": inc.loss_unknown,
              "cause_entity": inc.cause_entity,
              "cause_source": inc.cause_source, "active": inc.active}
    for name, actual in simple.items():
        if name in want:
            differ(name, actual, want[name])
    if "jobs" in want:
        expected_jobs = want["jobs"]
        if isinstance(expected_jobs, list):
            differ("jobs", sorted(inc.jobs), sorted(expected_jobs))
        else:
            differ("jobs", sorted(inc.jobs), sorted(expected_jobs))
            for key, fields in expected_jobs.items():
                job = inc.jobs.get(key)
                if job is None:
                    continue
                for name, value in (fields or {}).items():
                    actual = getattr(job, name)
                    if name.endswith("_at") and value is not None and actual is not None:
                        value = scenario.at(value)
                    differ(f"jobs[{key}].{name}", actual, value)
    if "still_drained" in want:
        differ("still_drained", [node for node, _ in inc.still_drained], want["still_drained"])
    if "flags" in want:
        differ("flags", sorted(inc.flags), sorted(want["flags"]))
    if "opened_at" in want:
        differ("opened_at", inc.opened_at, scenario.at(want["opened_at"]))
    if "explanation_starts" in want and not inc.explanation.startswith(want["explanation_starts"]):
        problems.append(f"explanation: {inc.explanation!r} does not start with "
                        f"{want['explanation_starts']!r}")
    for text in want.get("explanation_contains", []):
        if text not in inc.explanation:
            problems.append(f"explanation: {text!r} not in {inc.explanation!r}")
    for text in want.get("loss_unknown_contains", []):
        if text not in inc.loss_unknown:
            problems.append(f"loss_unknown: {text!r} not in {inc.loss_unknown!r}")
    for text in want.get("severity_why_contains", []):
        if text not in inc.severity_why:
            problems.append(f"severity_why: {text!r} not in {inc.severity_why!r}")
    for role, count in (want.get("evidence") or {}).items():
        if role.startswith("type:"):
            actual_n = sum(1 for e in inc.evidence.values() if e.type == role[5:])
        else:
            actual_n = sum(1 for e in inc.evidence.values() if e.role == role)
        differ(f"evidence[{role}]", actual_n, count)
    if "evidence_roles" in want:
        differ("evidence_roles", sorted({e.role for e in inc.evidence.values()}),
               sorted(want["evidence_roles"]))
    if "cause_type" in want:
        cause = inc.evidence.get(inc.cause_event)
        differ("cause_type", cause.type if cause else None, want["cause_type"])
    if "linked" in want:
        differ("linked", len(inc.linked), want["linked"])
    for kind, count in (want.get("log") or {}).items():
        differ(f"log[{kind}]", sum(1 for e in log or [] if e.incident_id == inc.id
                                   and e.kind == kind), count)
    for spec in want.get("actions", []):
        found = [a for a in inc.actions.values() if spec["title_contains"] in a.title
                 and (not spec.get("owner") or a.owner == spec["owner"])
                 and (not spec.get("status") or a.status == spec["status"])]
        if not found:
            problems.append(f"no action like {spec}: {[a.title for a in inc.actions.values()]}")
    return problems


def check(scenario: Scenario, log: list[IncidentEvent]) -> list[str]:
    """Every expected incident is there and matches; no other incident exists."""
    # an incident withdrawn (late evidence merged it into another) is not an incident
    incidents = sorted((i for i in fold(log).values() if not i.withdrawn),
                       key=lambda i: (i.opened_at or scenario.start, i.id))
    wanted = scenario.expect.get("incidents", [])
    problems = []
    remaining = list(incidents)
    for want in wanted:
        candidates = [i for i in remaining if i.klass == want["class"]
                      and ("entity" not in want or i.entity == want["entity"])]
        if len(candidates) > 1 and "jobs" in want:
            candidates = [i for i in candidates if sorted(i.jobs) == sorted(want["jobs"])]
        if len(candidates) != 1:
            problems.append(f"expected one {want['class']} incident on "
                            f"{want.get('entity', 'any entity')}, found {len(candidates)}: "
                            f"{[(i.klass, i.entity) for i in incidents]}")
            continue
        remaining.remove(candidates[0])
        problems += [f"{want['class']}: {p}" for p in check_incident(scenario, candidates[0],
                                                                     want, log)]
    if remaining and scenario.expect.get("exact", True):
        problems.append(f"unexpected incidents: {[(i.klass, i.entity) for i in remaining]}")
    return problems
