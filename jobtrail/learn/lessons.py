"""What the cluster learns from a postmortem: a failure sample, a monitor, a runbook entry.

- **Failure sample**: the incident's events cut from the store (its jobs' timelines, every
  piece of evidence, the infrastructure events on the cause entity in the window) written as
  a scenario file (`jobtrail.learn.scenarios`) whose `expect` is the incident as the log has it:
  class, entity, owner, lost GPU-hours. It is replayed before it is recorded; a sample that
  does not reproduce its incident is refused with the differences.
- **Monitor**: a proposed rules change (a YAML of overrides, merged like a scenario's
  `rules:`), checked by replaying the sample with and without it: it must open the same
  incident (class and entity) earlier, or with a better cause (higher confidence).
- **Runbook**: a section of `runbooks/<class>.md` with the signals, the steps that worked
  (the postmortem's mitigators, the follow-ups done) and the owner; re-running replaces the
  incident's own section.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from jobtrail.learn import scenarios
from processors.incidents.model import Incident, fold

WINDOW = timedelta(hours=1)


class LearningFailed(ValueError):
    """The artefact did not pass its check (the message lists what differed)."""


@dataclass(frozen=True)
class Outcome:
    path: Path
    digest: str
    check: str


def digest_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _end(inc: Incident) -> datetime | None:
    times = [inc.last_signal_at, inc.resolved_at, *(j.verified_at for j in inc.jobs.values())]
    present = [t for t in times if t is not None]
    return max(present) if present else None


def _event_record(event: Any) -> dict[str, Any]:
    data: dict[str, Any] = event.model_dump(mode="json", exclude_none=True,
                                            exclude={"schema_version"})
    if "job_id" in data:
        data["job"] = data.pop("job_id")
    if not data.get("attributes"):
        data.pop("attributes", None)
    return data


def cut_sample(store: Any, inc: Incident, topology_spec: dict[str, Any] | None) -> dict[str, Any]:
    """The incident's story as a scenario document."""
    start = min([e.time for e in inc.evidence.values()]
                + ([inc.first_signal_at] if inc.first_signal_at else []))
    end = (_end(inc) or start) + timedelta(minutes=10)
    events: dict[str, Any] = {}
    for project, job_id in sorted({(j.project, j.job_id) for j in inc.jobs.values()}):
        ids = [r["event_id"] for r in store.timeline(project, job_id, until=end)]
        events.update(store.events_by_id(ids))
    events.update(store.events_by_id(sorted(inc.evidence)))
    entities = {inc.cause_entity, inc.entity} - {""}
    for entity in sorted(entities):
        rows = store.entity_timeline(inc.projects, entity, since=start - WINDOW, until=end)
        events.update(store.events_by_id([r["id"] for r in rows]))
    ordered = sorted(events.values(), key=lambda e: (e.observed_at or e.time, e.time, e.id))
    project = next(iter(sorted(inc.projects)), "")
    want: dict[str, Any] = {"class": inc.klass, "entity": inc.entity, "owner": inc.owner}
    if inc.jobs:
        want["lost_gpu_hours"] = round(inc.lost_gpu_hours, 6)
    return {
        "name": f"{inc.klass}-{inc.id.removeprefix('inc-')[:10]}",
        "story": f"{inc.title or inc.klass}: {inc.explanation}".strip(": "),
        "source": f"cut from incident {inc.id} by `jobtrail postmortem sample` "
                  f"(log position {inc.seq})",
        "start": (ordered[0].time if ordered else start).isoformat(),
        "project": project,
        "topology": topology_spec if topology_spec is not None else "sample",
        "events": [_event_record(e) for e in ordered],
        "expect": {"exact": False, "incidents": [want]},
    }


def check_sample(path: Path) -> str:
    """Replay a scenario file; the check's summary, or LearningFailed with the problems."""
    scenario = scenarios.load(path)
    log, _ = scenarios.run(scenario)
    problems = scenarios.check(scenario, log)
    if problems:
        raise LearningFailed(f"{path} does not reproduce its incident: " + "; ".join(problems))
    wanted = scenario.expect.get("incidents", [])
    return (f"replayed {len(scenario.events)} events: " + ", ".join(
        f"{w['class']} on {w.get('entity', '?')} owned by {w.get('owner', '?')}"
        for w in wanted))


def write_sample(store: Any, inc: Incident, out: Path,
                 topology_spec: dict[str, Any] | None) -> Outcome:
    doc = cut_sample(store, inc, topology_spec)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100))
    check = check_sample(out)
    return Outcome(out, digest_of(out), check)


def _find(scenario: scenarios.Scenario, want: dict[str, Any]) -> Incident | None:
    log, _ = scenarios.run(scenario)
    for inc in sorted(fold(log).values(), key=lambda i: (i.opened_at or scenario.start, i.id)):
        if inc.klass == want["class"] and inc.entity == want.get("entity", inc.entity):
            return inc
    return None


def _opened(scenario: scenarios.Scenario) -> set[tuple[str, str]]:
    log, _ = scenarios.run(scenario)
    return {(i.klass, i.entity) for i in fold(log).values()}


def _library_check(overrides: dict[str, Any], rules: Path) -> str:
    """Replay every scenario of the library with and without the change: a monitor must not
    open an incident there that the current rules do not (a new false incident)."""
    paths = sorted(scenarios.LIBRARY.glob("*.yaml"))
    for path in paths:
        base = scenarios.load(path)
        merged = scenarios.merge_rules(base.raw.get("rules") or {}, overrides)
        try:
            changed = scenarios.load_document({**base.raw, "rules": merged}, path)
        except ValueError as exc:
            raise LearningFailed(f"{rules} is not a valid rules change: {exc}") from None
        new = sorted(_opened(changed) - _opened(base))
        if new:
            klass, entity = new[0]
            raise LearningFailed(f"with {rules} the library scenario {path.stem} opens a new "
                                 f"{klass} incident on {entity} (a false incident the current "
                                 "rules do not open)")
    return f"no new incident in the {len(paths)} library scenarios"


def check_monitor(sample: Path, rules: Path) -> str:
    """Replay the sample with the proposed rules; it must open the same incident earlier or
    with a better cause."""
    base = scenarios.load(sample)
    from schemas import documents

    overrides = documents.load_yaml(rules.read_text(), documents.RULES, str(rules)) or {}
    if not isinstance(overrides, dict):
        raise LearningFailed(f"{rules}: a rules change is a mapping of rules-file keys")
    merged = scenarios.merge_rules(base.raw.get("rules") or {}, overrides)
    try:
        candidate = scenarios.load_document({**base.raw, "rules": merged}, sample)
    except ValueError as exc:  # pydantic's ValidationError names the field
        raise LearningFailed(f"{rules} is not a valid rules change: {exc}") from None
    (want, *_) = base.expect.get("incidents") or [None]
    if want is None:
        raise LearningFailed(f"{sample} expects no incident to compare")
    before, after = _find(base, want), _find(candidate, want)
    library = _library_check(overrides, rules)
    if after is None:
        raise LearningFailed(f"with {rules} the sample no longer opens the {want['class']} "
                             f"incident on {want.get('entity')}")
    if before is None:
        return f"opens the {want['class']} incident the current rules miss; {library}"
    assert before.opened_at and after.opened_at
    gained = (before.opened_at - after.opened_at).total_seconds()
    if gained > 0:
        return f"opens the {want['class']} incident {gained:g} s earlier; {library}"
    if after.confidence > before.confidence:
        return (f"same incident with a better cause (confidence {after.confidence:.2f} vs "
                f"{before.confidence:.2f}); {library}")
    raise LearningFailed(f"with {rules} the incident opens no earlier ({after.opened_at} vs "
                         f"{before.opened_at}) and with no better cause "
                         f"({after.confidence:.2f} vs {before.confidence:.2f})")


def write_monitor(sample: Path, rules_text: str, out: Path) -> Outcome:
    """Check a rules change given as text against the sample, then keep it at `out`."""
    from schemas import documents

    try:
        overrides = documents.load_yaml(rules_text, documents.RULES, "rules")
    except documents.DocumentRefused as exc:
        raise LearningFailed(str(exc)) from None
    except yaml.YAMLError as exc:
        raise LearningFailed(f"rules: not YAML: {exc}") from None
    if not isinstance(overrides, dict):
        raise LearningFailed("rules: a rules change is a mapping of rules-file keys")
    out.parent.mkdir(parents=True, exist_ok=True)
    candidate = out.with_suffix(".checking")
    candidate.write_text(rules_text)
    try:
        check = check_monitor(sample, candidate)
    except LearningFailed:
        candidate.unlink()
        raise
    candidate.replace(out)
    return Outcome(out, digest_of(out), f"{check} (replayed {sample.name})")


def learning_data(kind: str, done: Outcome) -> dict[str, str]:
    """The `record_learning` command's data for a made and checked artefact."""
    return {"learning": kind, "path": str(done.path), "digest": done.digest,
            "check": done.check}


def runbook_entry(inc: Incident) -> str:
    """The runbook section from what was actually done: people's mitigations and notes in the
    order they happened, the follow-ups accepted or done with the commands they name, and the
    checks that verified recovery (the progress that passed each failure point)."""
    from processors.postmortem.text import code, esc, when

    mitigators = inc.pm.sections.get("mitigators")
    steps = mitigators.text.strip() if mitigators and mitigators.provenance == "human" else ""
    did = sorted((t for t in inc.story.values()
                  if t.kind in ("mitigated", "note_added", "paged") and t.text),
                 key=lambda t: (t.at, t.event_id))
    done = sorted((a for a in inc.actions.values() if a.status in ("done", "open")),
                  key=lambda a: (a.status != "done", a.action_id))
    signals = sorted({e.type for e in inc.evidence.values() if e.role in ("cause", "signal")})
    recovery = inc.recovery.replace("_", " ") if inc.recovery else "no job to recover"
    lines = [f"## {esc(inc.title or inc.klass)} ({inc.id}, {when(inc.opened_at)[:10]})", "",
             f"- Signals: {', '.join(code(s) for s in signals) or 'none recorded'}",
             f"- Cause: {esc(inc.explanation or inc.cause_class or 'not established')}",
             f"- Owner: {esc(inc.owner or 'unassigned')}",
             f"- Recovery reached: {recovery}", "", "What was done:", ""]
    verbs = {"mitigated": "mitigated", "note_added": "noted", "paged": "paged"}
    lines += [f"{n}. {when(t.at)[11:16]} {verbs[t.kind]}: {esc(t.text)} ({esc(t.by)})"
              for n, t in enumerate(did, start=1)] or \
        ["_(nothing recorded in the incident: `jobtrail incident mitigate --note`, `note`)_"]
    if steps:
        lines += ["", "Steps that worked (from the postmortem):", "", steps]
    if done:
        lines += ["", "Follow-ups:", ""]
        for a in done:
            commands = re.findall(r"`([^`]+)`", a.title)
            lines.append(f"- [{'x' if a.status == 'done' else ' '}] {esc(a.title)} "
                         f"({esc(a.owner or 'unowned')})")
            lines += [f"  - run: `{c}`" for c in commands]
    checks = sorted((e for e in inc.evidence.values() if e.role == "recovery"
                     and "passed the failure point" in e.why), key=lambda e: e.time)
    if checks:
        lines += ["", "How recovery was verified:", ""]
        lines += [f"- {when(e.time)} {code(e.type)}"
                  + (f" on {code(e.entity)}" if e.entity else "") + f": {esc(e.why)}"
                  for e in checks]
    return "\n".join(lines) + "\n"


def write_runbook(inc: Incident, directory: Path) -> Outcome:
    safe = re.sub(r"[^a-z0-9_.-]+", "-", inc.klass.lower()).strip("-") or "unknown"
    path = directory / f"{safe}.md"
    directory.mkdir(parents=True, exist_ok=True)
    entry = runbook_entry(inc)
    text = path.read_text() if path.exists() else f"# Runbook: {inc.klass}\n\n"
    marker = re.compile(rf"^## .*\({re.escape(inc.id)}, .*?(?=^## |\Z)", re.M | re.S)
    text = marker.sub(lambda _m: entry + "\n", text) if marker.search(text) else (
        text.rstrip("\n") + "\n\n" + entry)
    path.write_text(text)
    return Outcome(path, digest_of(path), f"section for {inc.id} in {path.name}")
