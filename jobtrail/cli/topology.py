"""`jobtrail topology import`: the topology file from the fabric's own descriptions.

The first import writes the baseline (`--out`, what `JOBTRAIL_TOPOLOGY` points at) and a copy
of what it read (`<out>.imported.yaml`). Every later import compares with that copy: a NIC
cabled somewhere new becomes a `topology.link` event at the time of the import (for
`ibnetdiscover`, the time its output says it was generated), written to `--events` for
`jobtrail ingest`; the baseline is never rewritten, so questions about the past keep the past's
wiring. What events cannot say (a NIC gone, a switch's uplinks) is printed.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import yaml


@click.group("topology")
def topology() -> None:
    """The cluster's wiring: import it from Slurm, ibnetdiscover and Kubernetes labels."""


def _imported(out: Path) -> Path:
    return out.with_name(f"{out.stem}.imported.yaml")


def _dump(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=True))


@topology.command("import")
@click.option("--cluster", required=True, help="The cluster this wiring belongs to.")
@click.option("--ibnetdiscover", "ib", type=click.Path(exists=True, path_type=Path),
              help="`ibnetdiscover` output: switches, ports, HCAs (hosts from descriptions).")
@click.option("--slurm", type=click.Path(exists=True, path_type=Path),
              help="Slurm's topology.conf (topology/tree).")
@click.option("--kubernetes", "k8s", type=click.Path(exists=True, path_type=Path),
              help="`kubectl get nodes -o json`: network-topology node labels.")
@click.option("--rack-label", default="", help="The node label that names the rack.")
@click.option("--hand", type=click.Path(exists=True, path_type=Path),
              help="A topology file (same schema) for what no source knows: filesystems, "
                   "GPU PCI tables; its entries win.")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="The baseline topology file (written only by the first import).")
@click.option("--events", type=click.Path(path_type=Path),
              help="Where to write the changes as topology.link events (JSON lines).")
@click.option("--at", "at_text", default="",
              help="When this wiring was observed (default: ibnetdiscover's own time, else now).")
def import_(cluster: str, ib: Path | None, slurm: Path | None, k8s: Path | None,
            rack_label: str, hand: Path | None, out: Path, events: Path | None,
            at_text: str) -> None:
    """Merge the sources (hand file, ibnetdiscover, Slurm, Kubernetes, in that precedence)."""
    from ingest.canonical import ParseError, to_event
    from jobtrail.topology_import import ibnetdiscover, kubernetes, merge
    from jobtrail.topology_import import slurm as slurm_topology
    from schemas.documents import load_yaml
    from schemas.events import parse_time
    from schemas.topology import TopologyError, TopologyFile, load

    if not (ib or slurm or k8s or hand):
        raise click.UsageError("name at least one source (--ibnetdiscover, --slurm, "
                               "--kubernetes, --hand)")
    parts = []
    at = parse_time(at_text) if at_text else None
    try:
        if ib:
            text = ib.read_text(errors="replace")
            parts.append(ibnetdiscover.parse(text))
            seen = ibnetdiscover.generated_at(text)
            at = at or (parse_time(seen) if seen else None)
        if slurm:
            parts.append(slurm_topology.parse(slurm.read_text()))
        if k8s:
            parts.append(kubernetes.parse(k8s.read_text(), rack_label))
        manual = load_yaml(hand.read_text(), what=str(hand)) if hand else None
    except (ValueError, yaml.YAMLError) as exc:
        raise click.ClickException(str(exc)) from None
    when = at or parse_time(datetime.now(UTC))
    try:
        merged = merge.merge(parts, manual, cluster=cluster, valid_from=when)
    except ValueError as exc:
        raise click.ClickException(f"the merged topology is not valid: {exc}") from None
    for part in parts:
        click.echo(f"{part.source}: {len(part.nics)} nodes, {len(part.switches)} switches"
                   + (f", {len(part.skipped)} skipped (no host named)" if part.skipped else ""))
        for conflict in part.conflicts:
            click.echo(f"  {part.source}: {conflict}", err=True)
    snapshot = _imported(out)
    try:
        previous = load(snapshot) if snapshot.exists() else None
    except TopologyError as exc:
        raise click.ClickException(str(exc)) from None
    data = json.loads(merged.model_dump_json())
    if not out.exists():
        _dump(out, data)
        click.echo(f"wrote the baseline {out}: {len(merged.nodes)} nodes, "
                   f"{len(merged.switches)} switches (point JOBTRAIL_TOPOLOGY at it)")
    drafts, notes = merge.changes(previous, merged, when)
    for note in notes:
        click.echo(f"  {note}")
    if previous is not None:
        valid = []
        for draft in drafts:
            try:
                valid.append(to_event(draft, producer=f"topology-import@{cluster}",
                                      observed_at=when))
            except ParseError as exc:
                raise click.ClickException(
                    f"{draft['entity']}: {exc.field}: {exc.reason}") from None
        click.echo(f"{len(valid)} link change(s) since the previous import")
        if events is not None:
            events.parent.mkdir(parents=True, exist_ok=True)
            events.write_text("".join(e.model_dump_json() + "\n" for e in valid))
            click.echo(f"wrote {events} (store them: jobtrail ingest {events})")
        elif valid:
            click.echo("give --events FILE to keep them", err=True)
    _dump(snapshot, data)
    TopologyFile.model_validate(data)  # what was written reads back
