"""`jobtrail rules show`: the detection, ownership and severity rules in force, as the
detector reads them (the file `JOBTRAIL_RULES` names, else the bundled one), so the people
who act on an incident can see why it opened, who owns it and what severity it got."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from jobtrail.cli.common import _settings


def _where(matches: list[Any]) -> str:
    parts = []
    for m in matches:
        if m.any_of:
            parts.append(f"{m.attribute} in {m.any_of}")
        if m.none_of:
            parts.append(f"{m.attribute} not in {m.none_of}")
        if m.contains:
            parts.append(f"{m.attribute} contains {m.contains!r}")
        if m.classified_as:
            parts.append(f"{m.attribute} reads as {m.classified_as}")
    return f" where {' and '.join(parts)}" if parts else ""


def describe(rules: Any, source: str, only: str = "") -> list[str]:
    """The rules as lines a person reads (what opens an incident, its class, owner, severity)."""
    out = [f"rules in force: {source} (version {rules.version})",
           f"windows: cause {rules.cause_window_s:g} s before a symptom (slack "
           f"{rules.cause_slack_s:g} s), grouping {rules.group_window_s:g} s, restart deadline "
           f"{rules.restart_deadline_s:g} s, repeat offender {rules.repeat_offender_count} "
           f"incidents in {rules.repeat_offender_window_s / 86400:g} d", "",
           "signals (infrastructure events that open or join an incident):"]
    for r in rules.signals:
        if only and r.klass != only:
            continue
        threshold = (f" when {r.threshold.count} within {r.threshold.window_s:g} s"
                     if r.threshold.count > 1 else "")
        out.append(f"  {r.name}: {', '.join(r.types)}{_where(r.where)}{threshold} -> "
                   f"{r.klass}" + (f"  ({r.why})" if r.why else ""))
    out += ["", "symptoms (what a job reports; the cause is looked for in its fault domain):"]
    for s in rules.symptoms:
        if only and s.klass != only:
            continue
        out.append(f"  {s.name}: {', '.join(s.types)}{_where(s.where)} -> {s.klass} (rank "
                   f"{s.rank})" + (f"  ({s.why})" if s.why else ""))
    p = rules.progress
    out += ["", f"progress: a hang after {p.hang.after_s:g} s without a step -> "
                f"{p.hang.klass}; fail-slow when steps are {p.fail_slow.ratio:g}x the baseline "
                f"for {p.fail_slow.for_s:g} s -> {p.fail_slow.klass}; a slow node -> "
                f"{p.fail_slow.straggler_class}", "",
            "classes (owner and why; proposed follow-ups):"]
    for name, c in sorted(rules.classes.items()):
        if only and name != only:
            continue
        owner = "the job's own team" if c.team == "job" else c.team
        out.append(f"  {name}: {c.group}-scoped, {c.impact}, owned by {owner}"
                   + (f" ({c.why})" if c.why else ""))
        out += [f"    proposes [{a.kind}] {a.title}" + (f" ({a.team})" if a.team else "")
                for a in c.actions]
    if rules.routing.rules or rules.routing.team_of_project:
        out += ["", "routing overrides (before the class's own team):"]
        out += [f"  {r.name}: {', '.join(r.classes) or 'any class'}"
                + (f" on entities matching {r.entity!r}" if r.entity else "")
                + f" -> {r.team}" + (f" ({r.why})" if r.why else "")
                for r in rules.routing.rules]
        out += [f"  project {project} -> {team}"
                for project, team in sorted(rules.routing.team_of_project.items())]
    sev = rules.severity
    out += ["", "severity (the first level whose thresholds the impact reaches):"]
    out += [f"  {lvl.severity}: {lvl.min_gpus} GPUs or {lvl.min_lost_gpu_hours:g} GPU-h lost"
            for lvl in sev.levels]
    raises = [text for on, text in ((sev.raise_on_repeat, "a repeat on the same entity"),
                                    (sev.raise_on_no_restart, "no restart by the deadline"))
              if on]
    raises.append(f"jobs at priority >= {sev.high_priority}")
    out.append(f"  raised one level by: {', '.join(raises)}")
    return out


@click.group("rules")
def rules() -> None:
    """The detection, ownership and severity rules."""


@rules.command("show")
@click.option("--class", "only", default="", help="Only what concerns this failure class")
@click.option("--json", "as_json", is_flag=True, help="The rules as the detector parsed them")
@click.pass_context
def show(ctx: click.Context, only: str, as_json: bool) -> None:
    """Print the rules in force (`JOBTRAIL_RULES`, else the bundled rules)."""
    from processors.incidents.rules import DEFAULT_RULES, RulesError, load_rules

    path: Path | None = _settings(ctx).rules_file
    try:
        loaded = load_rules(path)
    except (RulesError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    if only and only not in loaded.classes:
        raise click.ClickException(f"no class {only!r} (known: "
                                   f"{', '.join(sorted(loaded.classes))})")
    if as_json:
        click.echo(json.dumps(loaded.model_dump(mode="json", by_alias=True), indent=2,
                              sort_keys=True))
        return
    source = str(path) if path else f"{DEFAULT_RULES} (bundled)"
    click.echo("\n".join(describe(loaded, source, only)))
