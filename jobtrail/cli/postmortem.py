"""`jobtrail postmortem ...`, `jobtrail followups` and `jobtrail scenario check`.

A postmortem lives in its incident's log: every verb here is an incident command (through the
runtime, like `jobtrail incident ack`), and reading folds the incident's log from the store.
`sample`, `monitor` and `runbook` make the artefact, check it, and record it as a learning.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import click

from jobtrail.cli.commands import _BY, _ID, _command
from jobtrail.cli.common import _settings, _store


def _state(ctx: click.Context, incident_id: str, projects: tuple[str, ...] = ()) -> Any:
    """The folded incident; with `--project`, read as a token of those projects reads it
    (the whole story: refused for an incident that also impacts other projects)."""
    from jobtrail.views.incident import SHARED_POSTMORTEM, postmortem_access
    from jobtrail.views.postmortem import state

    store = _store(_settings(ctx))
    if projects:
        full = store.incident(incident_id, None)
        access = "unknown" if full is None else postmortem_access(full["projects"], projects)
        if access == "unknown":
            raise click.ClickException(f"no incident {incident_id}")
        if access == "shared":
            raise click.ClickException(SHARED_POSTMORTEM.replace("a token", "--project"))
    inc = state(store.incident_log(incident_id))
    if inc is None:
        raise click.ClickException(f"no incident {incident_id}")
    return inc


_PROJECTS = click.option("--project", "projects", multiple=True,
                         help="Read as these projects may (refused when the incident also "
                              "impacts others); default: every project")


@click.group("postmortem")
def postmortem() -> None:
    """Draft, edit, review, approve, publish and export an incident's postmortem."""


@postmortem.command("draft")
@click.argument("incident_id")
@click.option("--owner", default="", help="The postmortem's owner (default: you)")
@_BY
@_ID
@click.pass_context
def draft_cmd(ctx: click.Context, incident_id: str, owner: str, by: str | None,
              command_id: str | None) -> None:
    """Draft (or re-draft) from the incident's facts; people's sections are kept."""
    _command(ctx, incident_id, "draft_postmortem", by, {"owner": owner} if owner else {},
             command_id)


@postmortem.command("show")
@click.argument("incident_id")
@click.option("--json", "as_json", is_flag=True)
@_PROJECTS
@click.pass_context
def show(ctx: click.Context, incident_id: str, as_json: bool,
         projects: tuple[str, ...] = ()) -> None:
    """The checklist, the blameless check's warnings and the Markdown."""
    from jobtrail.views.postmortem import document, export

    inc = _state(ctx, incident_id, projects)
    today = datetime.now(UTC).date()
    if as_json:
        click.echo(export(inc, "json", today), nl=False)
        return
    doc = document(inc, today)
    pm = doc["postmortem"]
    click.echo(f"{incident_id}: postmortem {pm['status']}, owner {pm['owner'] or '-'}, "
               f"due {pm['due'] or '-'}" + (f", stale: {', '.join(pm['stale'])}"
                                            if pm["stale"] else ""))
    click.echo("checklist:")
    for item in doc["checklist"]:
        mark = {"done": "x", "n/a": "-"}.get(item["state"], " ")
        click.echo(f"  [{mark}] {item['label']}" + (f" ({item['detail']})" if item["detail"]
                                                     else "")
                   + (" OVERDUE" if item["state"] == "overdue" else "")
                   + ("" if item["required"] else " (optional)"))
    for w in doc["warnings"]:
        click.echo(f"blameless check: {w['section']}: {w['found']!r} {w['why']}")
    click.echo("")
    click.echo(export(inc, "md"), nl=False)


@postmortem.command("edit")
@click.argument("incident_id")
@click.argument("section")
@click.option("--text", default=None, help="The section's Markdown (else --file, else stdin)")
@click.option("--file", "path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_BY
@_ID
@click.pass_context
def edit(ctx: click.Context, incident_id: str, section: str, text: str | None,
         path: Path | None, by: str | None, command_id: str | None) -> None:
    """Write SECTION by hand (it is never overwritten by a re-draft)."""
    body = text if text is not None else (path.read_text() if path else click.get_text_stream(
        "stdin").read())
    _command(ctx, incident_id, "edit_postmortem", by, {"section": section, "text": body},
             command_id)


@postmortem.command("amend")
@click.argument("incident_id")
@click.argument("section")
@click.option("--why", required=True, help="Why the published text changes (the revision's note)")
@click.option("--text", default=None, help="The section's new Markdown (else --file, else stdin)")
@click.option("--file", "path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_BY
@_ID
@click.pass_context
def amend(ctx: click.Context, incident_id: str, section: str, why: str, text: str | None,
          path: Path | None, by: str, command_id: str | None) -> None:
    """Amend SECTION of a published postmortem: a new revision, the history kept."""
    body = text if text is not None else (path.read_text() if path else click.get_text_stream(
        "stdin").read())
    _command(ctx, incident_id, "amend_postmortem", by,
             {"section": section, "text": body, "why": why}, command_id)


@postmortem.command("review")
@click.argument("incident_id")
@click.option("--reviewer", "reviewers", multiple=True, help="Who should review it")
@_BY
@_ID
@click.pass_context
def review(ctx: click.Context, incident_id: str, reviewers: tuple[str, ...], by: str | None,
           command_id: str | None) -> None:
    """Ask for review (draft -> in_review)."""
    _command(ctx, incident_id, "request_review", by, {"reviewers": list(reviewers)},
             command_id)


@postmortem.command("publish")
@click.argument("incident_id")
@_BY
@_ID
@click.pass_context
def publish(ctx: click.Context, incident_id: str, by: str | None, command_id: str | None) -> None:
    """Publish (approved -> published); sev1-2 need their learnings recorded first."""
    _command(ctx, incident_id, "publish_postmortem", by, {}, command_id)


def _one_text_verb(name: str, command: str, field: str, doc: str, *,
                   required: bool = True) -> None:
    """Register `postmortem NAME ID --FIELD TEXT`: a verb whose only datum is one text."""
    # no default at all when required: this click takes even default=None as given
    text_option = (click.option(f"--{field}", "text", required=True) if required
                   else click.option(f"--{field}", "text", default=""))

    @postmortem.command(name, help=doc)
    @click.argument("incident_id")
    @text_option
    @_BY
    @_ID
    @click.pass_context
    def verb(ctx: click.Context, incident_id: str, text: str, by: str | None,
             command_id: str | None) -> None:
        _command(ctx, incident_id, command, by, {field: text}, command_id)


_one_text_verb("request-changes", "request_changes", "comment",
               "Send it back to the authors (in_review -> draft).")
_one_text_verb("approve", "approve_postmortem", "comment",
               "Approve (in_review -> approved); the approver must not be an author.",
               required=False)
_one_text_verb("waive", "waive_postmortem", "reason",
               "No postmortem for this incident, and why.")


@postmortem.command("export")
@click.argument("incident_id")
@click.option("--format", "fmt", type=click.Choice(["md", "html", "json"]), default="md")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None)
@_PROJECTS
@click.pass_context
def export_cmd(ctx: click.Context, incident_id: str, fmt: str, out: Path | None,
               projects: tuple[str, ...] = ()) -> None:
    """Markdown (canonical), sanitised HTML (styled like the review page), or JSON."""
    from jobtrail.views.postmortem import export
    from processors.notify.message import Links

    settings = _settings(ctx)
    text = export(_state(ctx, incident_id, projects), fmt, datetime.now(UTC).date(),
                  Links(api=settings.public_url, grafana=settings.grafana_url))
    if out is None:
        click.echo(text, nl=False)
    else:
        out.write_text(text)
        click.echo(f"wrote {out}")


def _default_dir(preferred: str, home: Path, fallback: str) -> Path:
    here = Path(preferred)
    return here if here.is_dir() else home / "learnings" / fallback


def _record(ctx: click.Context, incident_id: str, by: str | None, learning: str,
            data: dict[str, Any], command_id: str | None) -> None:
    _command(ctx, incident_id, "record_learning", by, {**data, "learning": learning},
             command_id)


@postmortem.command("sample")
@click.argument("incident_id")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Default: tests/scenarios/incidents/ when it exists here, else "
                   "HOME/learnings/samples/")
@_BY
@_ID
@click.pass_context
def sample(ctx: click.Context, incident_id: str, out: Path | None, by: str | None,
           command_id: str | None) -> None:
    """Cut a replayable failure sample from the incident's events, replay it, record it."""
    from jobtrail.learn.lessons import LearningFailed, learning_data, write_sample
    from schemas.documents import load_yaml

    settings = _settings(ctx)
    inc = _state(ctx, incident_id)
    spec = load_yaml(settings.topology_file.read_text(), what=str(settings.topology_file)) \
        if settings.topology_file else None
    target = out or _default_dir("tests/scenarios/incidents", settings.home, "samples") / (
        f"sample-{incident_id}.yaml")
    try:
        done = write_sample(_store(settings), inc, target, spec)
    except LearningFailed as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"wrote {done.path}: {done.check}")
    _record(ctx, incident_id, by, "sample", learning_data("sample", done), command_id)


@postmortem.command("monitor")
@click.argument("incident_id")
@click.option("--rules", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              required=True, help="The proposed rules change (YAML overrides)")
@click.option("--sample", "sample_path", type=click.Path(exists=True, dir_okay=False,
                                                         path_type=Path), default=None,
              help="Default: the sample recorded on this postmortem")
@_BY
@_ID
@click.pass_context
def monitor(ctx: click.Context, incident_id: str, rules: Path, sample_path: Path | None,
            by: str | None, command_id: str | None) -> None:
    """Check a rules change against the failure sample (same incident, earlier or with a
    better cause) and record it."""
    from jobtrail.learn.lessons import LearningFailed, check_monitor, learning_data

    inc = _state(ctx, incident_id)
    recorded = inc.pm.learnings.get("sample")
    path = sample_path or (Path(recorded.path) if recorded and recorded.path else None)
    if path is None or not path.exists():
        raise click.ClickException("no failure sample: run `jobtrail postmortem sample` first "
                                   "or pass --sample")
    try:
        check = check_monitor(path, rules)
    except LearningFailed as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{rules}: {check}")
    from jobtrail.learn.lessons import Outcome, digest_of

    _record(ctx, incident_id, by, "monitor",
            learning_data("monitor", Outcome(rules, digest_of(rules),
                                             f"{check} (replayed {path.name})")), command_id)


@postmortem.command("runbook")
@click.argument("incident_id")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="Default: runbooks/ when it exists here, else "
                                 "HOME/learnings/runbooks/")
@_BY
@_ID
@click.pass_context
def runbook(ctx: click.Context, incident_id: str, directory: Path | None, by: str | None,
            command_id: str | None) -> None:
    """Write the incident's section of runbooks/<class>.md and record it."""
    from jobtrail.learn.lessons import learning_data, write_runbook

    settings = _settings(ctx)
    done = write_runbook(_state(ctx, incident_id),
                         directory or _default_dir("runbooks", settings.home, "runbooks"))
    click.echo(f"wrote {done.path}: {done.check}")
    _record(ctx, incident_id, by, "runbook", learning_data("runbook", done), command_id)


@postmortem.command("learning")
@click.argument("incident_id")
@click.argument("kind", type=click.Choice(["sample", "monitor", "runbook"]))
@click.option("--reason", required=True, help="Why this learning will not be made")
@_BY
@_ID
@click.pass_context
def learning(ctx: click.Context, incident_id: str, kind: str, reason: str, by: str | None,
             command_id: str | None) -> None:
    """Record that a learning will not be made, and why."""
    _record(ctx, incident_id, by, kind, {"reason": reason}, command_id)


@click.command("followups")
@click.option("--team", default="", help="Only this owner")
@click.option("--overdue", is_flag=True, help="Only open follow-ups past their due date")
@click.option("--project", "projects", multiple=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def followups(ctx: click.Context, team: str, overdue: bool, projects: tuple[str, ...],
              as_json: bool) -> None:
    """Follow-up actions across incidents, per team (overdue ones with --overdue)."""
    rows = _store(_settings(ctx)).followups(
        list(projects) or None, team=team,
        overdue_on=date.today().isoformat() if overdue else "")
    if as_json:
        for row in rows:
            click.echo(json.dumps(row, default=str))
        return
    if not rows:
        click.echo("no follow-ups" + (" overdue" if overdue else ""))
    team_now = None
    for r in rows:
        if r["owner"] != team_now:
            team_now = r["owner"]
            click.echo(f"{team_now or '(unowned)'}:")
        click.echo(f"  {r['due'] or '-':10} [{r['status']}] {r['title']}  "
                   f"({r['incident_id']} {r['action_id']}, {r['severity']})")


@click.group("scenario")
def scenario() -> None:
    """Failure stories as data files (tests/scenarios/incidents/, postmortem samples)."""


@scenario.command("check")
@click.argument("paths", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
def scenario_check(paths: tuple[Path, ...]) -> None:
    """Replay each file through the pipeline and compare with its `expect`."""
    from jobtrail.learn.lessons import LearningFailed, check_sample
    from jobtrail.learn.scenarios import ScenarioError

    failed = 0
    for path in paths:
        try:
            click.echo(f"ok   {path}: {check_sample(path)}")
        except (LearningFailed, ScenarioError) as exc:
            failed += 1
            click.echo(f"FAIL {exc}")
    if failed:
        raise click.ClickException(f"{failed} of {len(paths)} scenario(s) failed")
