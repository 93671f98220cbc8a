"""`jobtrail incidents`, `jobtrail incident ...` and `jobtrail replay`.

Embedded mode appends a command to the log and applies it in order (an invalid transition is
an error naming the state); cluster mode queues it on `jobtrail.incident-commands` for the
worker. Either way a refused command is dead-lettered with the reason. The CLI acts as an
operator."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click

from jobtrail.cli.commands import _AT, _BY, _ID, _command, _when
from jobtrail.cli.common import _settings, _store


def _age(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if isinstance(value, datetime) else "-"


@click.command("incidents")
@click.option("--project", "projects", multiple=True, help="Only incidents touching these")
@click.option("--status", default="", help="open, acknowledged, mitigated, resolved, closed")
@click.option("--all", "everything", is_flag=True,
              help="Also infrastructure-only incidents (they touched no job)")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def incidents(ctx: click.Context, projects: tuple[str, ...], status: str,
              as_json: bool, everything: bool = False) -> None:
    """List incidents that touched jobs, newest first."""
    rows = _store(_settings(ctx)).incidents(list(projects) or None, status=status,
                                            infrastructure=everything)
    if as_json:
        for row in rows:
            click.echo(json.dumps(row, default=str))
        return
    if not rows:
        click.echo("no incidents")
        return
    click.echo(f"{'incident':22} {'sev':4} {'status':12} {'class':16} {'entity':22} "
               f"{'owner':16} {'jobs':>4} {'GPUs':>5} {'GPU-h lost':>10}  recovery")
    for r in rows:
        click.echo(f"{r['incident_id']:22} {r['severity']:4} {r['status']:12} {r['class']:16} "
                   f"{r['entity'][:22]:22} {r['owner'][:16]:16} {r['impacted_jobs']:>4} "
                   f"{r['impacted_gpus']:>5} {r['lost_gpu_hours']:>10.2f}  "
                   f"{r['recovery'] or '-'}  (opened {_age(r['opened_at'])})")


@click.group("incident")
def incident() -> None:
    """Show an incident, or act on it (ack, assign, note, resolve, ...)."""


@incident.command("show")
@click.argument("incident_id")
@click.option("--project", "projects", multiple=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def show(ctx: click.Context, incident_id: str, projects: tuple[str, ...], as_json: bool) -> None:
    """Status, cause and explanation, owner, impact, evidence, recovery, actions, log."""
    found = _store(_settings(ctx)).incident(incident_id, list(projects) or None)
    if found is None:
        raise click.ClickException(f"no incident {incident_id}")
    if as_json:
        click.echo(json.dumps(found, default=str, indent=2))
        return
    f = found
    click.echo(f"{f['incident_id']}  {f['title']}")
    click.echo(f"  {f['severity']} {f['status']}  class {f['class']}  entity {f['entity']}  "
               + (f"cluster {f['cluster']}  " if f.get("cluster") else "") +
               f"owner {f['owner']} ({f['owner_why']})")
    click.echo(f"  cause ({f['confidence']:.2f}): {f['explanation']}")
    if f.get("still_drained"):
        click.echo("  still drained: " + ", ".join(
            f"{d['node']} (since {_age(d['since'])})" for d in f["still_drained"]))
    click.echo(f"  severity: {f['severity_why']}")
    click.echo(f"  impact: {f['impacted_jobs']} jobs, {f['impacted_gpus']} GPUs, "
               f"{f['lost_gpu_hours']:.2f} GPU-hours and {f['lost_steps']} steps lost; "
               f"recovery {f['recovery'] or '-'}" + (f"; flags {', '.join(f['flags'])}"
                                                    if f["flags"] else ""))
    for j in f["jobs"]:
        click.echo(f"    {j['project']}/{j['job_id']} attempt {j['attempt']} ({j['role']}): "
                   f"{j['gpus']} GPUs, failed {_age(j['failed_at'])} at step "
                   f"{j['failure_step']}, checkpoint {j['last_checkpoint_step']}, "
                   f"{j['recovery']}, {j['lost_gpu_hours']:.2f} GPU-h")
        split = [(name, j.get(f"{name}_s") or 0) for name in
                 ("rework", "downtime", "restore", "degraded")]
        if any(seconds for _, seconds in split):
            click.echo("      lost time: " + ", ".join(f"{name} {seconds / 60:.1f} min"
                                                      for name, seconds in split if seconds))
        beside = [(name, j.get(f"{name}_s") or 0) for name in ("setback", "queue")]
        if any(seconds for _, seconds in beside):
            click.echo("      not counted: " + ", ".join(f"{name} {seconds / 60:.1f} min"
                                                        for name, seconds in beside))
    click.echo(f"  evidence ({len(f['evidence'])}):")
    for e, count, last in _grouped(f["evidence"])[:30]:
        entity = e["entity"] if count == 1 else f"{e['entity']} .. {last} (x{count})"
        click.echo(f"    {_age(e['time'])} {e['role']:8} {e['type']:22} {entity[:32]:32} "
                   f"{e['why']}")
    for a in f["actions"]:
        why = f" — proposed: {a['why']}" if a.get("status") == "proposed" and a.get("why") \
            else ""
        click.echo(f"  action {a['action_id']} [{a['status']}] {a['title']} ({a['owner']})"
                   f"{why}")
    changes = [e for e in f["log"] if e["kind"] != "evidence_attached"]
    click.echo(f"  log ({len(f['log'])} events; evidence attachments not shown):")
    for entry in changes[-20:]:
        who = f"{entry['actor_kind']}:{entry['actor']}" + (f"/{entry['rule']}" if entry["rule"]
                                                           else "")
        if entry.get("credential"):
            who += f" via {entry['credential']}"
        at = entry["data"].get("at") if isinstance(entry.get("data"), dict) else None
        happened = f" (happened {str(at)[:16].replace('T', ' ')})" if at else ""
        ref = f"  [{entry['id']}]" if entry["actor_kind"] != "processor" and entry.get("id") \
            else ""
        click.echo(f"    #{entry['seq']} {_age(entry['time'])} {entry['kind']} by {who}"
                   f"{happened}{ref}")


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


def _simple(name: str, command: str, doc: str) -> None:
    @incident.command(name, help=doc)
    @click.argument("incident_id")
    @_BY
    @_ID
    @_AT
    @click.pass_context
    def run(ctx: click.Context, incident_id: str, by: str | None, command_id: str | None,
            at: datetime | None) -> None:
        _command(ctx, incident_id, command, by, {}, command_id, at)


@incident.command("mitigate")
@click.argument("incident_id")
@click.option("--note", "text", default="", help="What was done to stop the impact")
@_BY
@_ID
@_AT
@click.pass_context
def mitigate(ctx: click.Context, incident_id: str, text: str, by: str | None,
             command_id: str | None, at: datetime | None) -> None:
    """Mark mitigated (impact stopped), saying what stopped it."""
    _command(ctx, incident_id, "mitigate", by, {"text": text} if text else {}, command_id, at)


@incident.command("page")
@click.argument("incident_id")
@click.argument("who")
@click.option("--why", default="", help="Why they were called in")
@_BY
@_ID
@_AT
@click.pass_context
def page(ctx: click.Context, incident_id: str, who: str, why: str, by: str | None,
         command_id: str | None, at: datetime | None) -> None:
    """Record that WHO (a person or team) was paged or called in."""
    _command(ctx, incident_id, "page", by, {"who": who, **({"why": why} if why else {})},
             command_id, at)


@incident.command("correct-time")
@click.argument("incident_id")
@click.argument("event_id")
@click.option("--at", "at", required=True, callback=_when, metavar="TIME",
              help="When it really happened")
@click.option("--why", default="", help="Why the recorded time was wrong")
@_BY
@_ID
@click.pass_context
def correct_time(ctx: click.Context, incident_id: str, event_id: str, at: datetime | None,
                 why: str, by: str | None, command_id: str | None) -> None:
    """Correct when a person's event (EVENT_ID, from `incident show`) happened; the original
    record stays in the log."""
    _command(ctx, incident_id, "correct_time", by,
             {"event_id": event_id, **({"why": why} if why else {})}, command_id, at)


for _name, _cmd, _doc in [("ack", "ack", "Acknowledge: someone is on it."),
                          ("resolve", "resolve", "Resolve (the cause is fixed)."),
                          ("reopen", "reopen", "Reopen a resolved incident.")]:
    _simple(_name, _cmd, _doc)


@incident.command("close")
@click.argument("incident_id")
@click.option("--force", is_flag=True, help="Close with the commander checklist still open")
@click.option("--reason", default="", help="Why (required with --force: it is the waiver)")
@_BY
@_ID
@click.pass_context
def close(ctx: click.Context, incident_id: str, force: bool, reason: str, by: str | None,
          command_id: str | None) -> None:
    """Close a resolved incident (the checklist done: `jobtrail postmortem show`)."""
    data: dict[str, Any] = {"force": True, "reason": reason} if force else {}
    _command(ctx, incident_id, "close", by, data, command_id)


@incident.command("assign")
@click.argument("incident_id")
@click.argument("team")
@click.option("--why", default="", help="Why this team owns it")
@_BY
@_ID
@_AT
@click.pass_context
def assign(ctx: click.Context, incident_id: str, team: str, why: str, by: str | None,
           command_id: str | None, at: datetime | None = None) -> None:
    """Reassign to TEAM (an event in the log; the detector will not route it back)."""
    data = {"team": team, **({"why": why} if why else {})}
    _command(ctx, incident_id, "assign", by, data, command_id, at)


@incident.command("commander")
@click.argument("incident_id")
@click.argument("person")
@_BY
@_ID
@_AT
@click.pass_context
def commander(ctx: click.Context, incident_id: str, person: str, by: str | None,
              command_id: str | None, at: datetime | None = None) -> None:
    """Name the incident commander."""
    _command(ctx, incident_id, "commander", by, {"person": person}, command_id, at)


@incident.command("note")
@click.argument("incident_id")
@click.argument("text")
@_BY
@_ID
@_AT
@click.pass_context
def note(ctx: click.Context, incident_id: str, text: str, by: str | None,
         command_id: str | None, at: datetime | None = None) -> None:
    """Add a note to the incident's log."""
    _command(ctx, incident_id, "note", by, {"text": text}, command_id, at)


@incident.command("severity")
@click.argument("incident_id")
@click.argument("level", type=click.Choice(["sev1", "sev2", "sev3", "sev4"]))
@click.option("--why", default="set by hand")
@_BY
@_ID
@_AT
@click.pass_context
def severity(ctx: click.Context, incident_id: str, level: str, why: str, by: str | None,
             command_id: str | None, at: datetime | None = None) -> None:
    """Override the severity."""
    _command(ctx, incident_id, "severity", by, {"severity": level, "why": why}, command_id, at)


_KINDS = click.Choice(["prevent", "mitigate", "detect", "process"])
_PRIORITIES = click.Choice(["p0", "p1", "p2", "p3"])


def _given(**fields: object) -> dict[str, object]:
    return {k: v for k, v in fields.items() if v not in (None, "")}


@incident.command("action")
@click.argument("incident_id")
@click.argument("title")
@click.option("--owner", default="", help="The team or person who does it")
@click.option("--due", default="", help="YYYY-MM-DD (default: from the severity)")
@click.option("--kind", type=_KINDS, default=None)
@click.option("--priority", type=_PRIORITIES, default=None)
@click.option("--tracker", default="", help="The ticket's URL")
@_BY
@_ID
@click.pass_context
def action(ctx: click.Context, incident_id: str, title: str, owner: str, due: str,
           kind: str | None, priority: str | None, tracker: str, by: str | None,
           command_id: str | None) -> None:
    """Add a follow-up action."""
    _command(ctx, incident_id, "add_action", by,
             {"title": title, **_given(owner=owner, due=due, kind=kind, priority=priority,
                                       tracker=tracker)}, command_id)


@incident.command("action-update")
@click.argument("incident_id")
@click.argument("action_id")
@click.option("--title", default=None)
@click.option("--owner", default=None)
@click.option("--due", default=None)
@click.option("--kind", type=_KINDS, default=None)
@click.option("--priority", type=_PRIORITIES, default=None)
@click.option("--tracker", default=None)
@click.option("--not-doing", "reason", default=None, metavar="REASON",
              help="It will not be done, and why")
@_BY
@_ID
@click.pass_context
def action_update(ctx: click.Context, incident_id: str, action_id: str, title: str | None,
                  owner: str | None, due: str | None, kind: str | None,
                  priority: str | None, tracker: str | None, reason: str | None, by: str | None,
                  command_id: str | None) -> None:
    """Change a follow-up's owner, due date, kind, priority or tracker, or mark it not doing."""
    fields = _given(title=title, owner=owner, due=due, kind=kind, priority=priority,
                    tracker=tracker)
    if reason is not None:
        fields.update(status="not_doing", reason=reason)
    if not fields:
        raise click.UsageError("nothing to change: give at least one option")
    _command(ctx, incident_id, "update_action", by, {"action_id": action_id, **fields},
             command_id)


@incident.command("action-done")
@click.argument("incident_id")
@click.argument("action_id")
@_BY
@_ID
@click.pass_context
def action_done(ctx: click.Context, incident_id: str, action_id: str, by: str | None,
                command_id: str | None) -> None:
    """Mark a follow-up action done."""
    _command(ctx, incident_id, "update_action", by, {"action_id": action_id, "status": "done"},
             command_id)


@incident.command("action-accept")
@click.argument("incident_id")
@click.argument("action_id")
@click.option("--owner", default="", help="Who does it (default: the proposal's)")
@click.option("--due", default="", help="YYYY-MM-DD (default: from the severity)")
@_BY
@_ID
@click.pass_context
def action_accept(ctx: click.Context, incident_id: str, action_id: str, owner: str, due: str,
                  by: str | None, command_id: str | None) -> None:
    """Accept a proposed follow-up (it becomes an open action)."""
    _command(ctx, incident_id, "accept_action", by,
             {"action_id": action_id, **_given(owner=owner, due=due)}, command_id)


@incident.command("action-dismiss")
@click.argument("incident_id")
@click.argument("action_id")
@click.option("--reason", required=True, help="Why it will not be done")
@_BY
@_ID
@click.pass_context
def action_dismiss(ctx: click.Context, incident_id: str, action_id: str, reason: str,
                   by: str | None, command_id: str | None) -> None:
    """Dismiss a proposed follow-up, saying why."""
    _command(ctx, incident_id, "dismiss_action", by,
             {"action_id": action_id, "reason": reason}, command_id)


@click.command("replay")
@click.pass_context
def replay(ctx: click.Context) -> None:
    """Rebuild the incident projections from the incident log."""
    events, count = _store(_settings(ctx)).replay_incidents()
    click.echo(f"replayed {events} incident events into {count} incidents")
