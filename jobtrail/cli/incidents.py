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
    from jobtrail.cli.beside import Reader
    from jobtrail.views.show import incident_rows

    rows = Reader(_settings(ctx)).incidents(list(projects) or None, status=status,
                                            infrastructure=everything)
    if as_json:
        for row in rows:
            click.echo(json.dumps(row, default=str))
        return
    click.echo(incident_rows(rows), nl=False)


@click.group("incident")
def incident() -> None:
    """Show an incident, or act on it (ack, assign, note, resolve, ...)."""


@incident.command("show")
@click.argument("incident_id")
@click.option("--project", "projects", multiple=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def show(ctx: click.Context, incident_id: str, projects: tuple[str, ...], as_json: bool) -> None:
    """What to do now (the next step and its command, the top follow-up, the runbook, what
    is still drained, the links), then status, cause, owner, impact, evidence, actions, log."""
    from jobtrail.cli.beside import Reader
    from jobtrail.views.show import Context, incident_text, still_drained

    settings = _settings(ctx)
    reader = Reader(settings)
    found = reader.incident(incident_id, list(projects) or None)
    if found is None:
        raise click.ClickException(f"no incident {incident_id}")
    if as_json:
        click.echo(json.dumps(found, default=str, indent=2))
        return
    context = Context(api=settings.public_url, grafana=settings.grafana_url,
                      runbook=_runbook(settings, found),
                      drained=still_drained(_node_states(reader, found)))
    click.echo(incident_text(found, context), nl=False)
    if reader.store is not None:  # what the failed attempts' timelines lack (docs/agents.md)
        from jobtrail.app import load_topology
        from jobtrail.store.queries import wiring
        from jobtrail.views.completeness import of_incident, summary

        store = reader.store
        for shown in of_incident(store, wiring(store, load_topology(settings)), found):
            click.echo(f"  evidence of {shown['project']}/{shown['job_id']} attempt "
                       f"{shown['attempt']}: {summary(shown)}")
            if shown["caveat"]:
                click.echo(f"  caveat: {shown['caveat']}")


NODE_STATES = ("node.drained", "node.not_ready", "node.ready")
MAX_NODES = 20


def _node_states(reader: Any, found: dict[str, Any]) -> list[dict[str, Any]]:
    """The state events (drained, not ready, ready) of the nodes the incident's evidence
    found drained or not ready (at most MAX_NODES), oldest first, read from the events of
    the incident's cluster (the drain's own reason; two clusters' node-041 are not one)."""
    cluster = str(found.get("cluster") or "")
    nodes = sorted({str(e["entity"]) for e in found.get("evidence") or ()
                    if e.get("type") in NODE_STATES[:2] and e.get("entity")})[:MAX_NODES]
    rows: list[dict[str, Any]] = []
    for node in nodes:
        rows += [r for r in reader.entity_timeline([], node, cluster=cluster)
                 if r.get("type") in NODE_STATES and (r.get("node") or r.get("entity")) == node]
    return rows


def _runbook(settings: Any, found: dict[str, Any]) -> str:
    """The runbook a postmortem of this class wrote (`jobtrail postmortem runbook`), as a
    path in the home, with how many incidents it holds; '' when there is none."""
    import re

    safe = re.sub(r"[^a-z0-9_.-]+", "-", str(found.get("class") or "").lower()).strip("-")
    path = settings.home / "learnings" / "runbooks" / f"{safe or 'unknown'}.md"
    try:
        text = path.read_text()
    except OSError:
        return ""
    sections = len(re.findall(r"^## ", text, re.M))
    return f"{path} ({sections} incident(s) of class {found.get('class')})"


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
                          ("reopen", "reopen", "Reopen a resolved incident.")]:
    _simple(_name, _cmd, _doc)


@incident.command("resolve")
@click.argument("incident_id")
@click.option("--note", "text", default="", help="How it was resolved (the Resolution "
                                                 "section and the resolved message say it)")
@_BY
@_ID
@_AT
@click.pass_context
def resolve(ctx: click.Context, incident_id: str, text: str, by: str | None,
            command_id: str | None, at: datetime | None) -> None:
    """Resolve (the cause is fixed), saying how."""
    _command(ctx, incident_id, "resolve", by, {"text": text} if text else {}, command_id, at)


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
