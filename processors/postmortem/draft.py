"""A postmortem drafted from the facts: the incident's state in, Markdown sections out.

Pure and deterministic: the same incident (the same log folded) and the same template give
byte-identical text, with no clock and no ordering left to dicts. Everything that came
from outside (entity names, evidence texts, job ids) is escaped for Markdown, so an event
message can neither break a table nor smuggle markup (the HTML rendering sanitises again).
`followups` and `learnings` are rendered live from the state at render time; the other
auto sections are what the last `postmortem_drafted` stored.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2

from processors.postmortem.state import LEARNINGS, SECTIONS, TITLES, Postmortem

if TYPE_CHECKING:
    from processors.incidents.aggregate import Told
    from processors.incidents.model import Evidence, Incident

TEMPLATE_PATH = Path(__file__).with_name("postmortem.md.j2")
TEMPLATE_DIGEST = hashlib.sha256(TEMPLATE_PATH.read_bytes()).hexdigest()[:12]
LIVE = ("followups", "learnings")
TIMELINE_LINES = 40

_MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*[]<>|~"})
_LOOSE_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
_LINE_START = re.compile(r"^([#+\-=])")
_LIST_START = re.compile(r"^(\d+)([.)])")
_ENTITY = re.compile(r"&(?=#?\w+;)")


def esc(text: object, limit: int = 300) -> str:
    """Untrusted text as literal Markdown on one line, escaped only where CommonMark would
    read markup: `port_down` and `(seen on node-001)` stay as they are; `*`, a backtick,
    brackets, `<`, `|`, `~` and an `_` at a word's edge are escaped, and so is what would
    start a block (`#`, `-`, `1.`) at the start."""
    flat = " ".join(str(text).split())
    if len(flat) > limit:
        flat = flat[:limit - 1] + "…"
    flat = _LOOSE_UNDERSCORE.sub(r"\\_", flat.translate(_MD_SPECIAL))
    flat = _ENTITY.sub(r"\\&", flat)
    return _LIST_START.sub(r"\1\\\2", _LINE_START.sub(r"\\\1", flat))


def _natural(text: str) -> list[object]:
    """`rank-2` before `rank-10`: digits compare as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def hhmm(value: datetime | None) -> str:
    return value.strftime("%H:%M") if value else "—"


def code(text: object) -> str:
    """An identifier in backticks (backticks inside it removed)."""
    return "`" + " ".join(str(text).split()).replace("`", "'")[:200] + "`"


def when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%SZ") if value else "—"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    sign, s = ("-" if seconds < 0 else ""), round(abs(seconds))
    days, rest = divmod(s, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    parts = [f"{days}d"] * bool(days) + [f"{h}h"] * bool(h) + [f"{m}m"] * bool(m)
    return sign + (" ".join(parts + [f"{sec}s"] * bool(sec or not parts)))


def gpu_h(value: float) -> str:
    return f"{value:,.1f}"


def _between(start: datetime | None, end: datetime | None) -> float | None:
    return (end - start).total_seconds() if start and end else None


# --- the sections ---------------------------------------------------------------------------


def _failed(inc: Incident) -> list:  # type: ignore[type-arg]
    return sorted((j for j in inc.jobs.values() if j.role == "failed"), key=lambda j: j.key)


_CAUSE_PHRASE = {
    "network.port_down": "went down", "network.link_errors": "began to report link errors",
    "network.port_up": "came back up", "node.xid": "reported a GPU fault (Xid)",
    "node.ecc": "reported an uncorrectable ECC error", "node.not_ready": "went not ready",
    "node.drained": "was drained", "storage.capacity": "filled up",
    "storage.io_error": "returned I/O errors", "storage.latency": "slowed down",
    "checkpoint.failed": "failed to save a checkpoint", "change.applied": "was changed",
}
_SYMPTOM_PHRASE = {
    "comm.nccl_timeout": "lost its NCCL connections", "comm.nccl_error": "lost its NCCL "
    "connections", "job.worker_exited": "lost a worker", "job.step": "slowed down",
}


def cause_phrase(inc: Incident) -> tuple[datetime | None, str]:
    """When the cause began, and what it did, in words."""
    cause = inc.evidence.get(inc.cause_event)
    entity = esc(inc.cause_entity or inc.entity)
    if cause is None or inc.cause_source == "job":
        return first_signal(inc), (f"{esc(inc.klass).replace('_', ' ')} signals began on "
                                   f"{entity}")
    same = [e for e in inc.evidence.values() if e.type == cause.type and e.entity ==
            cause.entity]
    phrase = _CAUSE_PHRASE.get(cause.type) or f"reported {esc(cause.why or cause.type)}"
    if cause.type == "network.port_down" and len(same) > 1:
        phrase = "began to flap"
    return min(e.time for e in same), f"{entity} {phrase}"


def _job_story(inc: Incident) -> str:
    failed = _failed(inc)
    if not failed:
        return ""
    gpus = sum(j.gpus for j in failed)
    first = failed[0]
    symptoms = [e.type for e in sorted(inc.evidence.values(), key=lambda e: (e.time,
                                                                               e.event_id))
                if e.role == "symptom" and e.type in _SYMPTOM_PHRASE]
    how = f"{_SYMPTOM_PHRASE[symptoms[0]]} and " if symptoms else ""
    at = min((j.failed_at for j in failed if j.failed_at), default=None)
    who = (f"job {esc(first.job_id)} ({gpus} GPUs)" if len(failed) == 1 else
           f"{len(failed)} job attempts ({gpus} GPUs)")
    story = f"{who} {how}failed at {hhmm(at)}"
    if len(failed) == 1 and first.failure_step is not None:
        story += f" (step {first.failure_step})"
    restarted = [j for j in failed if j.restarted_attempt is not None]
    if len(failed) == 1 and restarted:
        step = first.restored_step if first.restored_step is not None else \
            first.last_checkpoint_step
        ckpt = (f"the {hhmm(first.last_checkpoint_at)} checkpoint (step {step})"
                if step is not None else "its start")
        story += f"; it was restarted from {ckpt}"
        story += f" and was back at {hhmm(first.resumed_at)}" if first.resumed_at else \
            " and has not made progress yet"
    elif restarted:
        back = [j.resumed_at for j in failed if j.resumed_at]
        story += (f"; {len(restarted)} were restarted from their checkpoints"
                  + (f", the last back at {hhmm(max(back))}" if len(back) == len(failed)
                     else ", not all back yet"))
    else:
        story += "; it has not been restarted" if len(failed) == 1 else \
            "; none has been restarted"
    return story


def summary(inc: Incident) -> str:
    """What happened in plain words, from a template (the machine's explanation is in
    Trigger, once)."""
    began, what = cause_phrase(inc)
    parts = [f"On {when(began)[:10]} at {hhmm(began)} {what}"]
    if story := _job_story(inc):
        parts.append(story)
    assessed = inc.lost_gpu_hours > 0 or inc.recovery == "verified"
    if inc.jobs and assessed:
        parts.append(f"{gpu_h(inc.lost_gpu_hours)} GPU-hours were lost")
    elif inc.jobs:
        parts.append("the loss is not assessed yet (the job has not made progress again)")
    else:
        parts.append("no job was hit")
    text = "; ".join(parts) + "."
    return text[0].upper() + text[1:]


def participants(inc: Incident) -> str:
    """Who took part, and in what role, from the log (roles, not blame)."""
    roles: dict[str, list[str]] = {}

    def add(person: str, role: str) -> None:
        if person and role not in roles.setdefault(person, []):
            roles[person].append(role)
    add(inc.commander, "commander")
    verbs = {"acknowledged": "acknowledged", "note_added": "notes", "mitigated": "mitigated",
             "resolved": "resolved", "paged": "paged others", "owner_assigned": "assigned",
             "severity_changed": "set severity", "action_added": "follow-ups",
             "action_updated": "follow-ups", "closed": "closed", "reopened": "reopened",
             "commander_assigned": "named the commander"}
    for told in inc.story.values():
        if told.by != "detector":
            add(told.by, verbs.get(told.kind, told.kind))
        if told.kind == "paged":
            add(told.text.split(": ")[0], "paged")
    pm = inc.pm
    add(pm.owner, "postmortem owner")
    for name in sorted(pm.authors):
        add(name, "postmortem author")
    for name in pm.reviewers:
        add(name, "reviewer")
    add(pm.approved_by, "approver")
    if not roles:
        return "Nobody has acted on it yet."
    return "\n".join(f"- {esc(person)}: {', '.join(r)}" for person, r in
                     sorted(roles.items()))


def detection(inc: Incident) -> str:
    """How it was found: the first signal, the rule, when people learned of it."""
    start = first_signal(inc)
    lines = [f"- First signal at {when(start)}; the incident was opened at "
             f"{when(inc.opened_at)} by rule {code(inc.rule or 'manual')} "
             f"({duration(_between(start, inc.opened_at))} after it)."]
    if inc.cause_at:
        lines.append(f"- Cause localised at {when(inc.cause_at)}: "
                     f"{esc(inc.cause_class or inc.klass)} on "
                     f"{code(inc.cause_entity or inc.entity)} (confidence "
                     f"{inc.confidence:.2f}).")
    pages = [t for t in _told(inc) if t.kind == "paged"]
    lines += [f"- {when(t.at)} {esc(t.by)} paged {esc(t.text)}." for t in pages]
    ack = next((t for t in _told(inc) if t.kind == "acknowledged"), None)
    lines.append(f"- Acknowledged by {esc(ack.by)} at {when(ack.at)} "
                 f"({duration(_between(start, ack.at))} after the first signal)." if ack
                 else "- Not acknowledged.")
    return "\n".join(lines)


def resolution(inc: Incident) -> str:
    """What people did to stop the impact and fix the cause, and how the jobs recovered."""
    lines = [f"- {when(t.at)} {esc(t.by)} {_told_line(t)}"
             for t in _told(inc) if t.kind in ("mitigated", "resolved", "reopened")
             or (t.kind == "note_added" and inc.acknowledged_at is not None)]
    done = sorted((a for a in inc.actions.values() if a.status == "done"),
                  key=lambda a: a.action_id)
    lines += [f"- Done: {esc(a.title)} ({esc(a.owner or 'unowned')})" for a in done]
    for j in _failed(inc):
        name = code(f"{j.project}/{j.job_id}")
        if j.restarted_attempt is None:
            lines.append(f"- {name} attempt {j.attempt} has not been restarted.")
            continue
        restored = f" from step {j.restored_step}" if j.restored_step is not None else ""
        lines.append(f"- {name} restarted as attempt {j.restarted_attempt} at "
                     f"{when(j.restarted_at)}{restored}; "
                     + (f"progress resumed at {when(j.resumed_at)}" if j.resumed_at
                        else "no progress yet")
                     + (f", recovery verified at {when(j.verified_at)} (past step "
                        f"{j.failure_step})." if j.verified_at else "."))
    return "\n".join(lines) if lines else "Nothing recorded yet: people's mitigations and " \
        "notes (`jobtrail incident mitigate --note`, `note`) appear here."


def header(inc: Incident, owner: str) -> str:
    rows = [
        ("Incident", f"{code(inc.id)} {esc(inc.title)}"),
        ("Class", esc(inc.klass)),
        ("Entity", code(inc.entity)),
        ("Owner", f"{esc(inc.owner or 'unassigned')} (rule {code(inc.owner_rule or 'none')}: "
                  f"{esc(inc.owner_why or 'no reason recorded')})"),
        ("Commander", esc(inc.commander or "not named")),
        ("Postmortem owner", esc(owner or "not named")),
        ("Severity", f"{esc(inc.severity)}: {esc(inc.severity_why or 'no reason recorded')}"),
        ("Confidence", f"{inc.confidence:.2f}"),
        ("Status", f"{inc.status} (opened {when(inc.opened_at)}, resolved "
                   f"{when(inc.resolved_at)})"),
        ("Detected by", f"rule {code(inc.rule or 'manual')}"),
    ]
    return "| | |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)


def impact(inc: Incident) -> str:
    jobs = sorted(inc.jobs.values(), key=lambda j: (j.role != "failed", j.key))
    if not jobs:
        return "No job was impacted." + (
            f" {gpu_h(inc.charged_gpu_hours)} GPU-hours were charged here from other "
            "incidents." if inc.charged_gpu_hours else "")
    head = ("| Job | Attempt | Role | GPUs | Failure step | Last checkpoint | Checkpoint age "
            "at failure | Steps lost | GPU-h lost | rework | downtime | restore | setback | "
            "queue |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for j in jobs:
        def part(seconds: float, gpus: int = j.gpus) -> str:
            return gpu_h(gpus * seconds / 3600)
        age = _between(j.last_checkpoint_at, j.failed_at)
        lines.append(
            f"| {code(j.project + '/' + j.job_id)} | {j.attempt} | {j.role} | {j.gpus} | "
            f"{'—' if j.failure_step is None else j.failure_step} | "
            f"{'—' if j.last_checkpoint_step is None else j.last_checkpoint_step} | "
            f"{duration(age)} | {j.lost_steps} | {gpu_h(j.lost_gpu_hours)} | "
            f"{part(j.rework_s)} | {part(j.downtime_s)} | {part(j.restore_s)} | "
            f"{duration(j.setback_s or None)} | {duration(j.queue_s or None)} |")
    failed = _failed(inc)

    def total(name: str) -> str:
        return gpu_h(sum(j.gpus * getattr(j, name) for j in inc.jobs.values()) / 3600)
    ages = [a for a in (_between(j.last_checkpoint_at, j.failed_at) for j in failed)
            if a is not None]
    restarts = sum(1 for j in failed if j.restarted_attempt is not None)
    lines += ["", f"- Jobs: {len({(j.project, j.job_id) for j in jobs if j.role != 'linked'})}"
              f"; GPUs failed: {sum(j.gpus for j in failed)}",
              f"- Lost GPU-hours: {gpu_h(inc.lost_gpu_hours)} = rework {total('rework_s')} + "
              f"downtime {total('downtime_s')} + restore {total('restore_s')} + degraded "
              f"{total('degraded_s')} + charged from other incidents "
              f"{gpu_h(inc.charged_gpu_hours)} (re-doing the lost steps is not counted again; "
              "setback and queue are wall clock, beside it)",
              f"- Restarts: {restarts} of {len(failed)} failed attempt(s); steps lost: "
              f"{inc.lost_steps}",
              f"- Oldest checkpoint at failure: {duration(max(ages)) if ages else '—'}"]
    return "\n".join(lines)


def _latest(values: Iterable[datetime | None]) -> datetime | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def first_signal(inc: Incident) -> datetime | None:
    times = [e.time for e in inc.evidence.values()]
    return min([*times, inc.first_signal_at] if inc.first_signal_at else times, default=None)


def timings(inc: Incident) -> str:
    start = first_signal(inc)
    failed = _failed(inc)
    milestones = [
        ("First signal", start),
        ("Detected (incident opened)", inc.opened_at),
        ("Localised (cause identified)", inc.cause_at),
        ("Acknowledged", inc.acknowledged_at),
        ("Mitigated", inc.mitigated_at),
        ("Progress resumed", _latest(j.resumed_at for j in failed)
         if failed and all(j.resumed_at for j in failed) else None),
        ("Recovery verified", _latest(j.verified_at for j in failed)
         if failed and all(j.verified_at for j in failed) else None),
        ("Resolved", inc.resolved_at),
    ]
    rows = [f"| {name} | {when(at)} | {duration(_between(start, at))} |"
            for name, at in milestones]
    recovered = milestones[5][1]
    end = inc.resolved_at or inc.closed_at
    headline = [("detect", inc.opened_at), ("acknowledge", inc.acknowledged_at),
                ("mitigate", inc.mitigated_at), ("recover", recovered), ("resolve", end)]
    figures = " · ".join(f"time to {name} **{duration(_between(start, at))}**"
                         for name, at in headline)
    figures += f" · duration **{duration(_between(start, end))}**" + (
        "" if end else " (still open)")
    return (figures[0].upper() + figures[1:] + "\n\n| Milestone | At | After the first "
            "signal |\n|---|---|---|\n" + "\n".join(rows))


_TOLD_VERB = {"acknowledged": "acknowledged", "commander_assigned": "named the commander",
              "note_added": "noted", "mitigated": "mitigated", "paged": "paged",
              "resolved": "resolved", "reopened": "reopened", "closed": "closed",
              "severity_changed": "set the severity", "owner_assigned": "assigned it to",
              "action_added": "added a follow-up", "action_updated": "updated a follow-up"}


def _told_line(t: Told) -> str:
    verb = _TOLD_VERB.get(t.kind, t.kind)
    if not t.text:
        return verb
    return f"{verb} {esc(t.text)}" if t.kind == "paged" else f"{verb}: {esc(t.text)}"


def _told(inc: Incident) -> list[Told]:
    """People's part, in the order it happened."""
    return sorted(inc.story.values(), key=lambda t: (t.at, t.recorded, t.event_id))


def _grouped(evidence: list[Evidence]) -> list[tuple[datetime, str]]:
    """Consecutive evidence of one type and role folded into one line (a 64-rank storm is
    one line with a count)."""
    out: list[tuple[datetime, str]] = []
    run: list[Evidence] = []

    def flush() -> None:
        if not run:
            return
        e = run[0]
        entities = sorted({x.entity for x in run if x.entity}, key=_natural)
        where = code(entities[0]) if len(entities) == 1 else (
            f"{len(entities)} entities ({', '.join(code(x) for x in entities[:3])}"
            f"{', …' if len(entities) > 3 else ''})" if entities else "")
        count = f"{len(run)} x " if len(run) > 1 else ""
        span = f" until {when(run[-1].time)[11:]}" if len(run) > 1 else ""
        why = f": {esc(e.why, 160)}" if e.why else ""
        on = f" on {where}" if where else ""
        out.append((e.time, f"**{e.role}** {count}{code(e.type)}{on}{span}{why}"))
        run.clear()

    for e in evidence:
        if run and (run[-1].type, run[-1].role) != (e.type, e.role):
            flush()
        run.append(e)
    flush()
    return out


def timeline(inc: Incident) -> str:
    evidence = sorted(inc.evidence.values(), key=lambda e: (e.time, e.event_id))
    lines = _grouped(evidence)
    marks: list[tuple[datetime | None, str]] = [
        (inc.opened_at, f"incident opened by rule {code(inc.rule or 'manual')}"),
        (inc.cause_at, f"cause identified: {esc(inc.cause_class or inc.klass)} on "
                       f"{code(inc.cause_entity or inc.entity)}")]
    for j in _failed(inc):
        name = code(f"{j.project}/{j.job_id}")
        ckpt = j.last_checkpoint_at if j.last_checkpoint_step is not None else None
        marks += [(j.started_at, f"{name} attempt {j.attempt} started"),
                  (ckpt, f"{name} last checkpoint before the failure (step "
                         f"{j.last_checkpoint_step}): the loss counts from here"),
                  (j.failed_at, f"{name} attempt {j.attempt} failed"
                   + (f" at step {j.failure_step}" if j.failure_step is not None else "")),
                  (j.restarted_at, f"{name} restarted as attempt {j.restarted_attempt}"),
                  (j.resumed_at, f"{name} progress resumed"),
                  (j.verified_at, f"{name} recovery verified (past step {j.failure_step})")]
    lines += [(at, f"*milestone* {text}") for at, text in marks if at is not None]
    lines += [(t.at, f"**people** {esc(t.by)} {_told_line(t)}"
               + (f" (recorded {when(t.recorded)})" if t.corrected or abs(
                   (t.recorded - t.at).total_seconds()) >= 60 else ""))
              for t in _told(inc)]
    lines.sort(key=lambda x: x[0])
    shown = lines[:TIMELINE_LINES]
    out = [f"- {when(at)} {text}" for at, text in shown]
    if len(lines) > len(shown):
        out.append(f"- … {len(lines) - len(shown)} more lines (`jobtrail incident show "
                   f"{inc.id}`)")
    return "\n".join(out) if out else "No evidence recorded."


def trigger(inc: Incident) -> str:
    if not inc.cause_class:
        return "The machine did not establish a cause; people should say what triggered it."
    lines = [f"**{esc(inc.cause_class)}** on {code(inc.cause_entity)} (confidence "
             f"{inc.confidence:.2f}, from {esc(inc.cause_source or 'signal')} evidence): "
             f"{esc(inc.explanation.rstrip('. ') or 'no explanation')}."]
    cause = inc.evidence.get(inc.cause_event)
    if cause is not None:
        lines.append(f"\nDeciding evidence: {code(cause.type)} from {esc(cause.source)} at "
                     f"{when(cause.time)}" + (f": {esc(cause.why)}" if cause.why else ""))
    return "\n".join(lines)


def prior(inc: Incident, incidents: Mapping[str, Incident]) -> str:
    entities = {x for x in (inc.entity, inc.cause_entity) if x}
    before = sorted((o for o in incidents.values() if o.id != inc.id and o.opened_at
                     and inc.opened_at and o.opened_at < inc.opened_at
                     and ({o.entity, o.cause_entity} & entities)),
                    key=lambda o: (o.opened_at, o.id), reverse=True)[:10]
    if not before:
        return "None on record."
    return "\n".join(f"- {code(o.id)} opened {when(o.opened_at)}: {esc(o.klass)} on "
                     f"{code(o.entity)}, {o.status}, {gpu_h(o.lost_gpu_hours)} GPU-h lost"
                     for o in before)


def followups(inc: Incident) -> str:
    actions = sorted(inc.actions.values(), key=lambda a: a.action_id)
    if not actions:
        return "None yet."
    rows = [f"| {code(a.action_id)} | {esc(a.kind or '—')} | {esc(a.title)} | "
            f"{esc(a.owner or 'unowned')} | {a.status}"
            f"{': ' + esc(a.reason) if a.reason else ''} | {esc(a.due or '—')} | "
            f"{esc(a.tracker or '—')} |" for a in actions]
    return ("| Id | Kind | Follow-up | Owner | Status | Due | Tracker |\n"
            "|---|---|---|---|---|---|---|\n" + "\n".join(rows))


def learnings(pm: Postmortem) -> str:
    names = {"sample": "Failure sample", "monitor": "Monitor", "runbook": "Runbook entry"}
    lines = []
    for kind in LEARNINGS:
        got = pm.learnings.get(kind)
        if got is None:
            lines.append(f"- {names[kind]}: to do")
        elif got.path:
            lines.append(f"- {names[kind]}: {code(got.path)}"
                         + (f", {esc(got.check)}" if got.check else ""))
        else:
            lines.append(f"- {names[kind]}: not made: {esc(got.reason)}")
    return "\n".join(lines)


def sections(inc: Incident, incidents: Mapping[str, Incident], owner: str) -> dict[str, str]:
    """The machine's sections for `inc` as it is now."""
    return {"summary": summary(inc), "header": header(inc, owner),
            "participants": participants(inc), "impact": impact(inc),
            "timings": timings(inc), "detection": detection(inc), "timeline": timeline(inc),
            "trigger": trigger(inc), "resolution": resolution(inc),
            "prior": prior(inc, incidents), "followups": followups(inc),
            "learnings": learnings(inc.pm)}


# --- the document ---------------------------------------------------------------------------

_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE_PATH.parent),
                          autoescape=False, keep_trailing_newline=True,  # noqa: S701 Markdown
                          undefined=jinja2.StrictUndefined)


def section_texts(inc: Incident) -> list[dict[str, object]]:
    """The sections in document order, with provenance, as the document and the page use."""
    pm = inc.pm
    out = []
    for name in SECTIONS:
        stored = pm.sections.get(name)
        if name in LIVE and (stored is None or stored.provenance != "human"):
            text, provenance, position, stale = (
                followups(inc) if name == "followups" else learnings(pm)), "auto", inc.seq, False
        elif stored is None:
            continue
        else:
            text, provenance, position, stale = (stored.text, stored.provenance,
                                                 stored.drafted_from, stored.stale)
        out.append({"name": name, "title": TITLES[name], "text": text.rstrip("\n"),
                    "provenance": provenance, "drafted_from": position, "stale": stale,
                    "edited_by": esc(stored.edited_by) if stored else ""})
    return out


def markdown(inc: Incident) -> str:
    """The postmortem as Markdown (the canonical export)."""
    return _ENV.get_template(TEMPLATE_PATH.name).render(
        incident_id=inc.id, title=esc(inc.title or inc.klass), pm=inc.pm,
        owner=esc(inc.pm.owner or "not named"),
        sections=section_texts(inc), template=TEMPLATE_DIGEST,
        published=when(inc.pm.published_at),
        revisions=[{"revision": r, "by": esc(b), "at": when(t), "section": esc(s),
                    "why": esc(w)} for r, b, t, s, w in inc.pm.revisions])


def digest(inc: Incident) -> str:
    return hashlib.sha256(markdown(inc).encode()).hexdigest()
