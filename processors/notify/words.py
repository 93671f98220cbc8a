"""A notification in words, from the channel-neutral message (`message.message`): the one line
a phone shows (`push`), the facts every channel lays out in its own idiom (`facts`), what to
do now with the commands (`do_now`), and the plain-text body email and fallbacks carry
(`text`). Pure functions of the message dict."""

from __future__ import annotations

from datetime import datetime
from typing import Any

OVER = ("resolved", "recovery_verified", "mitigated")
"""Transitions that say the impact is over: their message looks it (green, no ack)."""


def _at(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


def clock(value: Any) -> str:
    at = _at(value)
    return f"{at:%Y-%m-%d %H:%M} UTC" if at else "an unrecorded time"


def ago(seconds: float) -> str:
    """An age in words: `just now`, `12 min ago`, `3 h ago`, `7 days ago`."""
    s = max(0, int(seconds))
    if s < 90:
        return "just now"
    if s < 90 * 60:
        return f"{round(s / 60)} min ago"
    if s < 36 * 3600:
        return f"{round(s / 3600)} h ago"
    return f"{round(s / 86400)} days ago"


def when(msg: dict[str, Any]) -> str:
    """When the change happened (event time) and how old it is as the message is made; for
    an incident jobtrail saw long after it began (a backfill), when it was seen."""
    inc = msg["incident"]
    line = f"{clock(msg['time'])} ({ago(msg.get('age_s') or 0)})"
    seen, began = _at(inc.get("seen_at")), _at(inc.get("first_signal_at") or inc.get(
        "opened_at"))
    if seen and began and (seen - began).total_seconds() > 3600:
        line += f"; from events jobtrail first saw at {clock(inc['seen_at'])}"
    return line


def acknowledgement(inc: dict[str, Any]) -> str:
    """Who acknowledged the incident and when, in words ('' when nobody has)."""
    if not inc.get("acknowledged_by"):
        return ""
    at = _at(inc.get("acknowledged_at"))
    return f"by {inc['acknowledged_by']}" + (f" at {at:%Y-%m-%d %H:%M} UTC" if at else "")


def resolution(inc: dict[str, Any]) -> str:
    """Who resolved it, when, and how ('' while nobody has)."""
    if not inc.get("resolved_by"):
        return ""
    out = f"by {inc['resolved_by']} at {clock(inc.get('resolved_at'))}"
    return out + (f": {inc['resolution']}" if inc.get("resolution") else "")


def mitigation(inc: dict[str, Any]) -> str:
    if not inc.get("mitigated_by"):
        return ""
    out = f"by {inc['mitigated_by']} at {clock(inc.get('mitigated_at'))}"
    return out + (f": {inc['mitigation']}" if inc.get("mitigation") else "")


def impact(inc: dict[str, Any]) -> str:
    """Jobs, GPUs and the loss (assessed, or what is at risk: never "0.0 GPU-h lost")."""
    i = inc["impact"]
    line = f"{i['jobs']} job(s), {i['gpus']} GPUs"
    if i.get("assessed", True):
        line += f", {i['lost_gpu_hours']} GPU-hours lost"
    elif i.get("at_risk_gpu_hours"):
        line += (f"; at risk {i['at_risk_gpu_hours']} GPU-hours (GPUs x time since the last "
                 "checkpoint; the loss is assessed when progress resumes)")
    return line + (f" (and jobs of {i['other_projects']} other project(s))"
                   if i.get("other_projects") else "")


def jobs(inc: dict[str, Any], limit: int = 5) -> str:
    """The impacted jobs, each with its GPUs and what happened to it."""
    out = []
    for j in inc.get("job_impacts", [])[:limit]:
        at = _at(j.get("failed_at"))
        what = (f"failed at {at:%H:%M}" + (f" (step {j['failure_step']})"
                                           if j.get("failure_step") is not None else "")
                if j["role"] == "failed" and at else j["role"])
        out.append(f"{j['job']} attempt {j['attempt']}: {j['gpus']} GPUs, {what}")
    more = len(inc.get("job_impacts", [])) - limit
    return "; ".join(out) + (f"; and {more} more" if more > 0 else "") if out else \
        "none hit so far"


def cause(inc: dict[str, Any]) -> str:
    c = inc["cause"]
    return (f"{c['class'] or inc['class']} on {c['entity'] or inc['entity']} "
            f"(confidence {c['confidence']:.2f})")


def _failed(inc: dict[str, Any]) -> list[dict[str, Any]]:
    return [j for j in inc.get("job_impacts", []) if j["role"] == "failed"]


def push(msg: dict[str, Any]) -> str:
    """The one line a phone's notification shows: the headline and what it cost (a 512-GPU
    job's death is in it), or how it ended."""
    inc = msg["incident"]
    tail = ""
    if msg["transition"] == "resolved" and inc.get("resolution"):
        tail = inc["resolution"]
    elif failed := _failed(inc):
        gpus = sum(j["gpus"] for j in failed)
        first = failed[0]
        at = _at(first.get("failed_at"))
        who = (f"job {first['job']} ({gpus} GPUs)" if len(failed) == 1
               else f"{len(failed)} job attempts ({gpus} GPUs)")
        tail = f"{who} failed" + (f" at {at:%H:%M}" if at else "")
        if inc["impact"].get("assessed"):
            tail += f", {inc['impact']['lost_gpu_hours']} GPU-h lost"
        elif inc["impact"].get("at_risk_gpu_hours"):
            tail += f", {inc['impact']['at_risk_gpu_hours']} GPU-h at risk"
    elif inc["impact"]["jobs"] == 0:
        tail = "no job hit so far"
    age = msg.get("age_s") or 0
    old = f" (happened {ago(age)})" if age >= 3600 else ""
    return f"{msg['headline']}" + (f" — {tail}" if tail else "") + old


def facts(msg: dict[str, Any]) -> list[tuple[str, str]]:
    """The facts every channel lays out (at most 10: Slack's fields)."""
    inc = msg["incident"]
    out = [("Severity", f"{inc['severity']}: {inc['severity_why']}" if inc["severity_why"]
            else inc["severity"]),
           ("Status", inc["status"]),
           ("When", when(msg)),
           ("Owner", f"{inc['owner']} ({inc['owner_why']})" if inc["owner_why"]
            else inc["owner"]),
           ("Jobs", jobs(inc)),
           ("Impact", impact(inc)),
           ("Recovery", inc.get("recovery_words") or inc["recovery"] or "n/a"),
           ("Cause", cause(inc))]
    if inc.get("nodes"):
        out.append(("Nodes", ", ".join(inc["nodes"][:10])
                    + (f" and {len(inc['nodes']) - 10} more" if len(inc["nodes"]) > 10
                       else "")))
    if inc.get("resolved_by"):
        out.append(("Resolved", resolution(inc)))
    elif inc.get("mitigated_by"):
        out.append(("Mitigated", mitigation(inc)))
    elif inc.get("acknowledged_by"):
        out.append(("Acknowledged", acknowledgement(inc)))
    return out[:10]


def do_now(msg: dict[str, Any]) -> list[tuple[str, str]]:
    """What to do now, each with its command: acknowledge while the incident is open and
    nobody has, then the top proposed or open follow-ups ((label, command) pairs; none once
    it is closed)."""
    inc = msg["incident"]
    if inc["status"] == "closed":
        return []
    out = []
    if inc["status"] == "open" and not inc.get("acknowledged_by") and inc.get("ack_command"):
        out.append(("Acknowledge", inc["ack_command"]))
    out += [(("Accept: " if a["status"] == "proposed" else "Do: ") + a["title"], a["command"])
            for a in inc.get("actions", [])]
    return out


def do_now_title(msg: dict[str, Any]) -> str:
    """`Do now` while someone must act; `Follow-ups` once the impact is over."""
    over = msg["transition"] in OVER or msg["incident"]["status"] in ("resolved", "closed")
    return "Follow-ups" if over else "Do now"


def links(msg: dict[str, Any]) -> list[tuple[str, str]]:
    """The buttons: acknowledge (while open), the incident dashboard, the job timeline, the
    API."""
    out = [("Acknowledge", msg["links"]["ack"])] if msg["links"].get("ack") else []
    out.append(("Incident dashboard", msg["links"]["incident"]))
    if msg["links"].get("timeline"):
        out.append(("Job timeline", msg["links"]["timeline"]))
    if msg["links"].get("api"):
        out.append(("API", msg["links"]["api"]))
    return out


def text(msg: dict[str, Any]) -> str:
    """The plain-text body every channel starts from (email, fallbacks)."""
    inc = msg["incident"]
    c = inc["cause"]
    lines = [msg["headline"]]
    if inc.get("what"):
        lines.append(f"What happened: {inc['what']}")
    lines += [f"When: {when(msg)}",
              f"Cause: {c['class'] or inc['class']} on {c['entity'] or inc['entity']}"
              f" ({c['confidence']:.2f}): {c['explanation']}".rstrip(": "),
              f"Owner: {inc['owner']} ({inc['owner_why']})" if inc["owner_why"]
              else f"Owner: {inc['owner']}",
              f"Jobs: {jobs(inc)}"]
    if inc.get("nodes"):
        lines.append(f"Nodes: {', '.join(inc['nodes'])}")
    lines += [f"Impact: {impact(inc)}",
              f"Recovery: {inc.get('recovery_words') or inc['recovery'] or 'n/a'}; "
              f"status {inc['status']}"]
    if inc.get("acknowledged_by"):
        lines.append(f"Acknowledged: {acknowledgement(inc)}")
    if inc.get("mitigated_by"):
        lines.append(f"Mitigated: {mitigation(inc)}")
    if inc.get("resolved_by"):
        lines.append(f"Resolved: {resolution(inc)}")
    for label, command in do_now(msg):
        if label == "Acknowledge" and msg["links"].get("ack"):
            lines.append(f"Acknowledge: {msg['links']['ack']} (or {command})")
        elif label == "Acknowledge":
            lines.append(f"Acknowledge: {command}")
        else:
            verb, _, title = label.partition(": ")
            lines.append(f"{'Proposed' if verb == 'Accept' else 'To do'}: {title} ({command})")
    lines.append(f"Incident: {msg['links']['incident']}")
    if msg["links"].get("timeline"):
        lines.append(f"Job timeline: {msg['links']['timeline']}")
    if msg["links"].get("api"):
        lines.append(f"API: {msg['links']['api']}")
    if msg.get("digest"):
        lines.append(f"{len(msg['digest'])} change(s) in this digest:")
        lines += [f"- {t['time']} {t['incident']} {t['transition']}" for t in msg["digest"]]
    return "\n".join(lines)
