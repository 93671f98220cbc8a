"""What the command line prints about incidents and entities, as text for a terminal.

`incident show` opens with what to do now (the next step of the lifecycle and its command,
the top follow-up and its command, the runbook for the class, what is still drained, the
links to the dashboards and the API) before the facts. `incidents` says "not assessed" or
"unknown" rather than 0.00 GPU-h for a loss not known yet. `entity` is a table. Every field a
producer or a person wrote goes through `terminal.field` (shown, never obeyed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from jobtrail.views.terminal import field as shown

NOT_ASSESSED = "—"


@dataclass(frozen=True)
class Drained:
    node: str
    since: datetime | None
    why: str


@dataclass(frozen=True)
class Context:
    """What `incident show` adds to the incident's record: where the links point, the
    runbook for its class (a path the operator can open, or ''), the nodes still out."""

    api: str = "http://localhost:8080"
    grafana: str = "http://localhost:3000"
    runbook: str = ""
    drained: Sequence[Drained] = field(default_factory=tuple)


def when(value: Any) -> str:
    """A time as `2026-11-30 10:01` (ISO text from the API too), '-' when none."""
    if isinstance(value, str) and value:
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return str(value)[:16]
    return value.strftime("%Y-%m-%d %H:%M") if isinstance(value, datetime) else "-"


def loss(row: dict[str, Any]) -> str:
    """The lost GPU-hours of an incident row, or why there is no figure: `unknown` when a
    GPU count is (`lost_gpu_hours` None, with its reason when given), `—` when jobs were hit
    and the loss is not assessed yet (they have not made progress again)."""
    lost = row.get("lost_gpu_hours")
    if lost is None:
        return "unknown"
    jobs = row.get("impacted_jobs") or 0
    if jobs and not lost and row.get("recovery") != "verified":
        return NOT_ASSESSED
    return f"{float(lost):.2f}"


def incident_rows(rows: Sequence[dict[str, Any]]) -> str:
    """`jobtrail incidents`: one line per incident."""
    if not rows:
        return "no incidents\n"
    out = [f"{'incident':22} {'sev':4} {'status':12} {'class':16} {'entity':22} "
           f"{'owner':16} {'jobs':>4} {'GPUs':>5} {'GPU-h lost':>10}  recovery"]
    for r in rows:
        gpus = r.get("impacted_gpus")
        out.append(
            f"{shown(r['incident_id']):22} {shown(r['severity']):4} {shown(r['status']):12} "
            f"{shown(r['class']):16} {shown(r['entity'])[:22]:22} {shown(r['owner'])[:16]:16} "
            f"{r['impacted_jobs']:>4} {'?' if gpus is None else gpus:>5} {loss(r):>10}  "
            f"{shown(r.get('recovery') or '-')}  (opened {when(r.get('opened_at'))})")
    notes = {why for r in rows if r.get("lost_gpu_hours") is None
             for why in [str(r.get("loss_unknown_reason") or r.get("gpus_unknown_reason")
                             or "")] if why}
    if any(loss(r) == NOT_ASSESSED for r in rows):
        out.append(f"{NOT_ASSESSED}: not assessed yet (assessed once the jobs make progress "
                   "again; `jobtrail incident show ID` has what is at risk)")
    out += [f"unknown: {shown(why)}" for why in sorted(notes)]
    return "\n".join(out) + "\n"


def next_steps(f: dict[str, Any], ctx: Context) -> list[str]:
    """What to do now, each with its command: the lifecycle's next step, the top follow-up,
    the runbook, what is still drained."""
    inc = f["incident_id"]
    status = f.get("status")
    steps: list[str] = []
    if status == "open":
        steps.append(f"acknowledge it (you are on it): jobtrail incident ack {inc}")
    elif status == "acknowledged":
        steps.append("once the impact has stopped: jobtrail incident mitigate "
                     f"{inc} --note 'what stopped it'")
    elif status == "mitigated":
        steps.append(f"once the cause is fixed: jobtrail incident resolve {inc} --note "
                     "'what fixed it'")
    elif status == "resolved":
        pm = f.get("postmortem_status") or ""
        steps.append(f"the postmortem ({pm or 'not drafted'}): jobtrail postmortem "
                     f"{'draft' if not pm else 'show'} {inc}")
    actions = sorted((a for a in f.get("actions") or () if a.get("status") in
                      ("open", "proposed")),
                     key=lambda a: (a["status"] != "open", a["action_id"]))
    if actions:
        a = actions[0]
        verb = "action-done" if a["status"] == "open" else "action-accept"
        why = f" ({shown(a['why'])})" if a.get("why") and a["status"] == "proposed" else ""
        steps.append(f"{'do' if a['status'] == 'open' else 'proposed'}: {shown(a['title'])}"
                     f"{why}: jobtrail incident {verb} {inc} {a['action_id']}"
                     + (f" (and {len(actions) - 1} more below)" if len(actions) > 1 else ""))
    steps.append(f"runbook: {shown(ctx.runbook)}" if ctx.runbook else
                 f"runbook: none for {shown(f.get('class'))} yet (the postmortem writes one: "
                 f"jobtrail postmortem runbook {inc})")
    if ctx.drained:
        steps += [f"still drained: {shown(d.node)} since {when(d.since)}"
                  + (f" ({shown(d.why)})" if d.why else "")
                  + f"; resume it when fixed (scontrol update nodename={shown(d.node)} "
                    "state=resume)" for d in ctx.drained]
    return steps


def links(f: dict[str, Any], ctx: Context) -> list[tuple[str, str]]:
    """The incident's dashboard, the failed job's timeline at its attempt and the incident's
    range, and the API (the links the messages carry, built by the same functions)."""
    from urllib.parse import quote

    from processors.notify.message import incident_dashboard, job_timeline

    out = [("dashboard", incident_dashboard(ctx.grafana, str(f["incident_id"])))]
    jobs = sorted(f.get("jobs") or (), key=lambda j: (j.get("role") != "failed",
                                                      str(j.get("project")), str(j.get("job_id"))))
    if jobs:
        j = jobs[0]
        job = SimpleNamespace(project=j["project"], job_id=j["job_id"], attempt=j["attempt"],
                              failed_at=_time(j.get("failed_at")),
                              last_checkpoint_at=_time(j.get("last_checkpoint_at")))
        inc = SimpleNamespace(first_signal_at=_time(f.get("first_signal_at")))
        until = _time(f.get("resolved_at")) or _time(f.get("last_signal_at"))
        url = job_timeline(ctx.grafana, inc, job, until)
        if url:
            out.append((f"job timeline ({j['job_id']} attempt {j['attempt']})", url))
    out.append(("API", f"{ctx.api}/v1/incidents/{quote(str(f['incident_id']))}"))
    return out


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.year > 1970 else None
    if isinstance(value, str) and value:
        try:
            at = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return at if at.year > 1970 else None
    return None


def incident_text(f: dict[str, Any], ctx: Context) -> str:
    """`jobtrail incident show`."""
    out = [f"{shown(f['incident_id'])}  {shown(f['title'])}",
           f"  {shown(f['severity'])} {shown(f['status'])}  class {shown(f['class'])}  "
           f"entity {shown(f['entity'])}  owner {shown(f['owner'])} "
           f"({shown(f['owner_why'])})", "", "  what to do now:"]
    out += [f"    {n}. {step}" for n, step in enumerate(next_steps(f, ctx), start=1)]
    out += [f"    {name}: {url}" for name, url in links(f, ctx)]
    out += ["", f"  cause ({float(f['confidence']):.2f}): {shown(f['explanation'])}",
            f"  severity: {shown(f['severity_why'])}"]
    lost = loss(f)
    figure = "not assessed yet" if lost == NOT_ASSESSED else (
        "unknown" if lost == "unknown" else f"{lost} GPU-hours")
    gpus = f.get("impacted_gpus")
    out.append(f"  impact: {f['impacted_jobs']} jobs, {'unknown' if gpus is None else gpus} "
               f"GPUs, {figure} and {f['lost_steps']} steps lost; recovery "
               f"{shown(f.get('recovery') or '-')}"
               + (f"; flags {', '.join(map(shown, f['flags']))}" if f.get("flags") else ""))
    for j in f.get("jobs") or ():
        jl = j.get("lost_gpu_hours")
        out.append(f"    {shown(j['project'])}/{shown(j['job_id'])} attempt {j['attempt']} "
                   f"({j['role']}): {'unknown' if j.get('gpus') is None else j['gpus']} GPUs, "
                   f"failed {when(j.get('failed_at'))} at step {j.get('failure_step')}, "
                   f"checkpoint {j.get('last_checkpoint_step')}, {shown(j.get('recovery'))}, "
                   + ("unknown" if jl is None else f"{float(jl):.2f}") + " GPU-h")
        split = [(name, j.get(f"{name}_s") or 0) for name in
                 ("rework", "downtime", "restore", "degraded")]
        if any(seconds for _, seconds in split):
            out.append("      lost time: " + ", ".join(f"{name} {seconds / 60:.1f} min"
                                                      for name, seconds in split if seconds))
        beside = [(name, j.get(f"{name}_s") or 0) for name in ("setback", "queue")]
        if any(seconds for _, seconds in beside):
            out.append("      not counted: " + ", ".join(f"{name} {seconds / 60:.1f} min"
                                                        for name, seconds in beside))
    evidence = f.get("evidence") or []
    out.append(f"  evidence ({len(evidence)}):")
    for e, count, last in _grouped(evidence)[:30]:
        entity = shown(e["entity"]) if count == 1 else \
            f"{shown(e['entity'])} .. {shown(last)} (x{count})"
        out.append(f"    {when(e['time'])} {e['role']:8} {e['type']:22} {entity[:32]:32} "
                   f"{shown(e['why'])}")
    for a in f.get("actions") or ():
        why = f" — proposed: {shown(a['why'])}" if a.get("status") == "proposed" and \
            a.get("why") else ""
        out.append(f"  action {shown(a['action_id'])} [{a['status']}] {shown(a['title'])} "
                   f"({shown(a['owner'])}){why}")
    log = f.get("log") or []
    changes = [e for e in log if e["kind"] != "evidence_attached"]
    out.append(f"  log ({len(log)} events; evidence attachments not shown):")
    for entry in changes[-20:]:
        who = f"{entry['actor_kind']}:{shown(entry['actor'])}" + (
            f"/{shown(entry['rule'])}" if entry["rule"] else "")
        if entry.get("credential"):
            who += f" via {shown(entry['credential'])}"
        at = entry["data"].get("at") if isinstance(entry.get("data"), dict) else None
        happened = f" (happened {str(at)[:16].replace('T', ' ')})" if at else ""
        ref = f"  [{entry['id']}]" if entry["actor_kind"] != "processor" and entry.get("id") \
            else ""
        text = entry["data"].get("text") if isinstance(entry.get("data"), dict) else None
        said = f": {shown(text)}" if isinstance(text, str) and text else ""
        out.append(f"    #{entry['seq']} {when(entry['time'])} {entry['kind']} by {who}"
                   f"{happened}{said}{ref}")
    return "\n".join(out) + "\n"


def _grouped(evidence: list[dict[str, Any]]) -> list[tuple[dict[str, Any], int, str]]:
    """Consecutive evidence of one role, type and reason on one line (64 ranks' timeouts)."""
    out: list[tuple[dict[str, Any], int, str]] = []
    for e in evidence:
        if out and (out[-1][0]["role"], out[-1][0]["type"], out[-1][0]["why"]) == (
                e["role"], e["type"], e["why"]):
            first, count, _ = out[-1]
            out[-1] = (first, count + 1, e["entity"])
        else:
            out.append((e, 1, e["entity"]))
    return out


def still_drained(events: Sequence[dict[str, Any]]) -> list[Drained]:
    """The nodes whose last state event (drained, not ready, ready) is not `node.ready`:
    `events` are those events, oldest first, from the store."""
    last: dict[str, dict[str, Any]] = {}
    for e in events:
        node = str(e.get("node") or e.get("entity") or "")
        if node:
            last[node] = e
    return [Drained(node, _time(e.get("time")), str(e.get("message") or ""))
            for node, e in sorted(last.items()) if e.get("type") != "node.ready"]


ENTITY_COLUMNS = ("time", "source", "type", "severity", "where", "message")


def entity_table(name: str, rows: Sequence[dict[str, Any]], *, width: int = 160) -> str:
    """`jobtrail entity NAME`: one line per event, oldest first, with the job it concerned."""
    if not rows:
        return (f"nothing on {shown(name)} (check the name and --project: job events show only "
                "for your projects)\n")
    head = f"{'time':19} {'source':9} {'type':22} {'severity':8} {'where':40} message"
    out = [f"{shown(name)}: {len(rows)} events", head]
    for r in rows:
        job = f" {r['project']}/{r['job_id']}" if r.get("job_id") else ""
        where = (shown(r.get("entity") or r.get("node") or "") + job)[:40]
        at = r["time"]
        stamp = at.strftime("%Y-%m-%d %H:%M:%S") if isinstance(at, datetime) else str(at)[:19]
        out.append(f"{stamp:19} {shown(r['source']):9} {shown(r['type']):22} "
                   f"{shown(r['severity']):8} {where:40} {shown(r['message'])}"[:width])
    return "\n".join(out) + "\n"
