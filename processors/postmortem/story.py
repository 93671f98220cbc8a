"""The human story of a postmortem: the plain-language summary from a template, the
participants and their roles, how the failure was detected and how it was resolved."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from processors.incidents.response import first_signal
from processors.postmortem.text import _between, code, duration, esc, gpu_h, hhmm, when

if TYPE_CHECKING:
    from processors.incidents.aggregate import JobImpact, Told
    from processors.incidents.model import Incident

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
    held = f"{gpus} GPUs" if not any(j.loss_unknown for j in failed) else (
        "GPUs unknown" if not gpus else f"at least {gpus} GPUs")
    who = (f"job {esc(first.job_id)} ({held})" if len(failed) == 1 else
           f"{len(failed)} job attempts ({held})")
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
    if inc.jobs and inc.loss_unknown and not inc.lost_gpu_hours:
        parts.append("the GPU-hours lost are unknown: no source said the attempt's GPUs")
    elif inc.jobs and assessed:
        least = "at least " if inc.loss_unknown else ""
        parts.append(f"{least}{gpu_h(inc.lost_gpu_hours)} GPU-hours were lost")
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
    asked = [n.strip() for kind, _, names, *_ in pm.reviews if kind == "review_requested"
             for n in names.split(",") if n.strip()]
    for name in dict.fromkeys([*asked, *pm.reviewers, *(by for kind, by, *_ in pm.reviews
                                                        if kind != "review_requested")]):
        add(name, "reviewer")  # everyone asked to review, and whoever reviewed it
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


def restarted_as(j: JobImpact) -> str:
    """How the job came back: `restarted as attempt 2` (requeued, or restarted itself) or
    `resubmitted as `job 4812` attempt 1` (a new job restored its checkpoint)."""
    if j.restarted_job and j.restarted_job != j.job_id:
        return f"resubmitted as {code(f'{j.project}/{j.restarted_job}')} attempt " \
            f"{j.restarted_attempt}"
    return f"restarted as attempt {j.restarted_attempt}"


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
        lines.append(f"- {name} {restarted_as(j)} at {when(j.restarted_at)}{restored}; "
                     + (f"progress resumed at {when(j.resumed_at)}" if j.resumed_at
                        else "no progress yet")
                     + (f", recovery verified at {when(j.verified_at)} (past step "
                        f"{j.failure_step})." if j.verified_at else "."))
    return "\n".join(lines) if lines else "Nothing recorded yet: people's mitigations and " \
        "notes (`jobtrail incident mitigate --note`, `note`) appear here."


def _latest(values: Iterable[datetime | None]) -> datetime | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


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
