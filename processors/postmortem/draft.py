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
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2

from processors.incidents.response import MILESTONES, first_signal
from processors.incidents.response import figures as response_figures
from processors.postmortem.state import LEARNINGS, SECTIONS, TITLES, Postmortem
from processors.postmortem.story import (
    _failed,
    _latest,
    _told,
    _told_line,
    detection,
    participants,
    resolution,
    restarted_as,
    summary,
)
from processors.postmortem.text import (
    _between,
    _natural,
    code,
    duration,
    esc,
    gpu_h,
    when,
)

if TYPE_CHECKING:
    from processors.incidents.model import Evidence, Incident

TEMPLATE_PATH = Path(__file__).with_name("postmortem.md.j2")
TEMPLATE_DIGEST = hashlib.sha256(TEMPLATE_PATH.read_bytes()).hexdigest()[:12]
LIVE = ("followups", "learnings", "participants")
TIMELINE_LINES = 40

# --- the sections ---------------------------------------------------------------------------


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


def lost_text(inc: Incident) -> str:
    """The lost GPU-hours as read: unknown when no source said the GPUs (never 0.00), at
    least the counted figure when only some attempts' were known."""
    if not inc.loss_unknown:
        return gpu_h(inc.lost_gpu_hours)
    return f"at least {gpu_h(inc.lost_gpu_hours)}" if inc.lost_gpu_hours else "unknown"


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
            f"| {code(j.project + '/' + j.job_id)} | {j.attempt} | {j.role} | "
            f"{'unknown' if j.loss_unknown else j.gpus} | "
            f"{'—' if j.failure_step is None else j.failure_step} | "
            f"{'—' if j.last_checkpoint_step is None else j.last_checkpoint_step} | "
            f"{duration(age)} | {j.lost_steps} | "
            f"{'unknown' if j.loss_unknown else gpu_h(j.lost_gpu_hours)} | "
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
              f"- Lost GPU-hours: {lost_text(inc)} = rework {total('rework_s')} + "
              f"downtime {total('downtime_s')} + restore {total('restore_s')} + degraded "
              f"{total('degraded_s')} + charged from other incidents "
              f"{gpu_h(inc.charged_gpu_hours)} (re-doing the lost steps is not counted again; "
              "setback and queue are wall clock, beside it)",
              *([f"- Loss unknown: {inc.loss_unknown}"] if inc.loss_unknown else []),
              f"- Restarts: {restarts} of {len(failed)} failed attempt(s); steps lost: "
              f"{inc.lost_steps}",
              f"- Oldest checkpoint at failure: {duration(max(ages)) if ages else '—'}"]
    return "\n".join(lines)


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
    end = inc.resolved_at or inc.closed_at
    response = response_figures(inc)  # the one definition the boards use too
    figures = " · ".join(f"time to {name} **{duration(response.seconds(name))}**"
                         for name in MILESTONES)
    figures += f" · duration **{duration(_between(start, end))}**" + (
        "" if end else " (still open)")
    return (figures[0].upper() + figures[1:] + "\n\n| Milestone | At | After the first "
            "signal |\n|---|---|---|\n" + "\n".join(rows))


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
                  (j.restarted_at, f"{name} {restarted_as(j)}"),
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
    """The earlier incidents on the same entity that every reader of this postmortem may
    read (those impacting no project outside this incident's; an incident of no project is
    an operator's, who reads them all); the others only counted, so one tenant's postmortem
    never lists another tenant's incidents or losses."""
    entities = {x for x in (inc.entity, inc.cause_entity) if x}
    earlier = [o for o in incidents.values() if o.id != inc.id and o.opened_at
               and inc.opened_at and o.opened_at < inc.opened_at
               and ({o.entity, o.cause_entity} & entities)]
    readers = set(inc.projects)  # none: an operator's alone, who reads every incident

    def readable(o: Incident) -> bool:
        return not readers or set(o.projects) <= readers
    before = sorted((o for o in earlier if readable(o)),
                    key=lambda o: (o.opened_at, o.id), reverse=True)[:10]
    others = sum(1 for o in earlier if not readable(o))
    lines = [f"- {code(o.id)} opened {when(o.opened_at)}: {esc(o.klass)} on "
             f"{code(o.entity)}, {o.status}, {gpu_h(o.lost_gpu_hours)} GPU-h lost"
             for o in before]
    if others:
        lines.append(f"- {others} more that impacted other projects' jobs (not listed here)")
    return "\n".join(lines) or "None on record."


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


def shown_path(path: str) -> str:
    """Where a learning artefact is, without the server's directories: from `learnings/`
    on for one made in the home (`learnings/samples/sample-inc-….yaml`), else its file
    name (a postmortem is read and exported off the server)."""
    parts = path.replace("\\", "/").split("/")
    if "learnings" in parts:
        return "/".join(parts[len(parts) - 1 - parts[::-1].index("learnings"):])
    return parts[-1]


def learnings(pm: Postmortem) -> str:
    names = {"sample": "Failure sample", "monitor": "Monitor", "runbook": "Runbook entry"}
    lines = []
    for kind in LEARNINGS:
        got = pm.learnings.get(kind)
        if got is None:
            lines.append(f"- {names[kind]}: to do")
        elif got.path:
            digest = f" (sha256 {got.digest[:12]})" if got.digest else ""
            lines.append(f"- {names[kind]}: {code(shown_path(got.path))}{digest}"
                         + (f", {esc(got.check)}" if got.check else ""))
        else:
            lines.append(f"- {names[kind]}: not made: {esc(got.reason)}")
    return "\n".join(lines)


REVIEW_WORDS = {"review_requested": "asked for review by", "changes_requested":
                "requested changes", "approved": "approved"}


def review(pm: Postmortem) -> list[str]:
    """The review loop, in order: who asked whom, the changes requested and the approval,
    with their comments (live: rendered from the state at render time)."""
    out = []
    for kind, by, comment, at in pm.reviews:
        verb = REVIEW_WORDS.get(kind, kind)
        if kind == "review_requested":
            out.append(f"- {when(at)} {esc(by)} {verb} {esc(comment) or 'a reviewer'}")
        else:
            out.append(f"- {when(at)} {esc(by)} {verb}" + (f": “{esc(comment)}”" if comment
                                                           else " (no comment)"))
    return out


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
            text = (followups(inc) if name == "followups" else participants(inc)
                    if name == "participants" else learnings(pm))
            provenance, position, stale = "auto", inc.seq, False
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
        published=when(inc.pm.published_at), review=review(inc.pm),
        revisions=[{"revision": r, "by": esc(b), "at": when(t), "section": esc(s),
                    "why": esc(w)} for r, b, t, s, w in inc.pm.revisions])


def digest(inc: Incident) -> str:
    return hashlib.sha256(markdown(inc).encode()).hexdigest()
