"""`jobtrail report`: continuous-operation reports (issue 33), as Markdown.

`capacity` (why jobs waited, per queue, project and cause), `goodput JOB` (where a job's
wall time went), `changes` (what each change touched and whether it regressed),
`retention` (the policy in force; `--materialize` applies it to old parts).
Every report is bound to the projects given (`--project`, repeatable).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import click

from jobtrail.cli.common import Finite, _parse_when, _settings, _store


@click.group("report")
def report() -> None:
    """Continuous-operation reports: capacity, goodput, changes, retention."""


def _write(text: str, out: Path | None) -> None:
    if out is None:
        click.echo(text, nl=False)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    click.echo(f"wrote {out}")


@report.command("capacity")
@click.option("--project", "projects", multiple=True, required=True,
              help="A project whose waits are reported (repeatable).")
@click.option("--since", default=None, help="ISO time; default: 7 days before --until")
@click.option("--until", default=None, help="ISO time; default: now")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Write the Markdown report here instead of stdout.")
@click.pass_context
def capacity(ctx: click.Context, projects: tuple[str, ...], since: str | None,
             until: str | None, out: Path | None) -> None:
    """Waiting GPU-hours per queue, project and cause, and the biggest constraint."""
    from jobtrail.reports import capacity as cap
    from jobtrail.reports.capacity_load import load

    settings = _settings(ctx)
    spec = settings.topology_spec()
    if spec is None:
        raise click.ClickException("the capacity report needs JOBTRAIL_TOPOLOGY (node GPUs "
                                   "and leaves)")
    hi = _parse_when(until) or datetime.now(UTC)
    lo = _parse_when(since) or hi - timedelta(days=7)
    cluster, waits = load(_store(settings), spec, list(projects), lo, hi)
    title = f"Capacity {lo:%Y-%m-%d %H:%M} to {hi:%Y-%m-%d %H:%M} UTC"
    _write(cap.markdown(cap.attribute(cluster, waits), title=title), out)


@report.command("goodput")
@click.argument("job")
@click.option("--project", required=True, help="Project the job belongs to (always required)")
@click.option("--out", type=click.Path(path_type=Path), default=None)
@click.pass_context
def goodput(ctx: click.Context, job: str, project: str, out: Path | None) -> None:
    """JOB's goodput split, ETTR, failure costs and checkpoint interval."""
    from jobtrail.reports import goodput as gp

    store = _store(_settings(ctx))
    g = gp.load(store, project, job)
    if not g.attempts:
        raise click.ClickException(f"no started attempt of {project}/{job}")
    _write(gp.markdown(g, gp.incident_costs(store, project, job)), out)


@report.command("changes")
@click.option("--project", "projects", multiple=True, required=True,
              help="A project whose attempts are compared (repeatable).")
@click.option("--since", default=None, help="ISO time; default: 7 days before --until")
@click.option("--until", default=None, help="ISO time; default: now")
@click.option("--window-days", type=Finite(0, 365, min_open=True), default=7.0,
              help="How long before and after each change to compare.")
@click.option("--out", type=click.Path(path_type=Path), default=None)
@click.pass_context
def changes(ctx: click.Context, projects: tuple[str, ...], since: str | None,
            until: str | None, window_days: float, out: Path | None) -> None:
    """Every change.* with the jobs and nodes it touched, before/after, and a verdict."""
    from jobtrail.reports import changes as ch

    hi = _parse_when(until) or datetime.now(UTC)
    lo = _parse_when(since) or hi - timedelta(days=7)
    reports = ch.load(_store(_settings(ctx)), list(projects), lo, hi,
                      window=timedelta(days=window_days))
    _write(ch.markdown(reports, title=f"Changes {lo:%Y-%m-%d} to {hi:%Y-%m-%d}"), out)


@report.command("retention")
@click.option("--materialize", is_flag=True,
              help="Recompute every part's TTL dates on the tables that have a TTL (a "
                   "mutation; a change of policy does it by itself at start).")
@click.pass_context
def retention(ctx: click.Context, materialize: bool) -> None:
    """The retention policy in force (JOBTRAIL_RETENTION_*_DAYS), applied to the tables."""
    from jobtrail.reports import retention as policy

    settings = _settings(ctx)
    store = _store(settings)  # opening it applies the policy: a change is altered there
    policy.apply(store, settings.retention, materialize=materialize)
    for name, days in settings.retention.as_dict().items():
        click.echo(f"{name}: {'kept forever' if not days else f'{days} days'}")
    click.echo("the tables hold these TTLs"
               + ("; every part's TTL dates recomputed" if materialize else ""))
