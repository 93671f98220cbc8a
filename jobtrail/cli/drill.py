"""`jobtrail drill run` and `jobtrail drill show` (docs/drills.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from jobtrail.cli.common import count, seconds
from jobtrail.config import Settings


@click.group()
def drill() -> None:
    """Recovery drills against a live scheduler."""


@drill.command("run")
@click.option("--kind", type=click.Choice(["kill-worker", "node-down",
                                           "checkpoint-unwritable"]), required=True)
@click.option("--workdir", type=click.Path(path_type=Path), default=None,
              help="A directory every node can reach (default: <home>/drills/runs)")
@click.option("--log", "log_path", type=click.Path(path_type=Path),
              default=Path("/var/log/slurm/slurmctld.log"), show_default=True)
@click.option("--project", default="", help="Project of the drill job (default: its account)")
@click.option("--steps", type=count(1, 100_000), default=60, show_default=True)
@click.option("--checkpoint-every", type=count(1, 100_000), default=5, show_default=True)
@click.option("--timeout", "timeout_s", type=seconds(0, 86400), default=180,
              show_default=True,
              help="Seconds to wait for each stage")
@click.pass_context
def run_drill(ctx: click.Context, kind: str, workdir: Path | None, log_path: Path,
              project: str, steps: int, checkpoint_every: int, timeout_s: float) -> None:
    """Submit the representative job, inject the fault, verify recovery from jobtrail's own
    timeline and incident; write the report (Markdown and JSON)."""
    from jobtrail.app import open_runtime
    from jobtrail.collect.sinks import RuntimeSink
    from jobtrail.collect.slurm import SlurmCollector
    from jobtrail.drill.run import Drill, Options

    settings: Settings = ctx.obj
    runtime = open_runtime(settings)
    if runtime.mode != "embedded":
        raise click.ClickException("drills read their incident back at once: run them on an "
                                   "embedded home (unset JOBTRAIL_KAFKA)")
    try:
        sink = RuntimeSink(runtime)
        folder = settings.home / "drills"
        collector = SlurmCollector(sink, folder / "slurm-cursor.json", project=project,
                                   log_path=log_path)
        collector.step()  # catch up with the scheduler before the drill's own job
        account = project or "root"
        if not project:
            import getpass

            account = _account(getpass.getuser()) or "root"
        run = Drill(Options(kind, (workdir or folder / "runs").resolve(), steps,
                            checkpoint_every, timeout_s=timeout_s),
                    sink=sink, store=runtime.store, collector=collector,
                    command=runtime.command, project=account,
                    cluster=collector.cluster or "default")
        report = run.run()
        path = report.save(folder)
    finally:
        runtime.close()
    click.echo(report.to_markdown())
    click.echo(f"report: {path} and {path.with_suffix('.md')}", err=True)
    sys.exit(0 if report.passed else 1)


def _account(user: str) -> str:
    """The user's default Slurm account (the project the collector gives its jobs)."""
    import subprocess

    done = subprocess.run(["sacctmgr", "-n", "-P", "show", "user", user, "format=DefaultAccount"],
                          capture_output=True, text=True, timeout=30, check=False)
    return done.stdout.strip().splitlines()[0] if done.stdout.strip() else ""


@drill.command("show")
@click.argument("drill_id", required=False)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def show(ctx: click.Context, drill_id: str | None, as_json: bool) -> None:
    """A drill's report (the latest without DRILL_ID)."""
    from jobtrail.drill.report import DrillReport

    folder = ctx.obj.home / "drills"
    found = sorted(folder.glob("drill-*.json"), key=lambda p: p.stat().st_mtime)
    if drill_id:
        found = [p for p in found if p.stem == drill_id]
    if not found:
        raise click.ClickException(f"no drill report{' ' + drill_id if drill_id else ''} "
                                   f"under {folder}")
    report = DrillReport.from_json(found[-1].read_text())
    click.echo(report.to_json() if as_json else report.to_markdown())

