"""Lay the sources over each other into one `TopologyFile`, and say what changed since the
previous import as `topology.link` events.

Precedence: the hand file, then the sources in the order given (the CLI's: ibnetdiscover,
Slurm, Kubernetes). A node's NICs come whole from the first source that has any for it, so a
node `ibnetdiscover` saw with its HCAs and ports never also gets Slurm's port-less `fabric`
link. Switches are the union, tiered over the union of every source's wiring (the links one
source knows complete another's: `ibnetdiscover`'s cables under Slurm's tree, or the reverse),
leaves up. What only people know (filesystems and their targets, GPU PCI tables, GPUs per
node) comes from the hand file.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from jobtrail.topology_import.model import Partial, tiers
from schemas.topology import TopologyFile


def merge(parts: Sequence[Partial], hand: dict[str, Any] | None, *, cluster: str,
          valid_from: datetime) -> TopologyFile:
    hand = dict(hand or {})
    nodes: dict[str, dict[str, Any]] = {}
    switches: dict[str, dict[str, Any]] = {}
    for part in parts:
        for node, nics in sorted(part.nics.items()):
            entry = nodes.setdefault(node, {})
            if "nics" not in entry:
                entry["nics"] = {nic: {"switch": link.switch, "port": link.port,
                                       **({"rail": link.rail} if link.rail is not None else {})}
                                 for nic, link in sorted(nics.items())}
        for node, rack in part.racks.items():
            nodes.setdefault(node, {}).setdefault("rack", rack)
        for name, (tier, up) in sorted(part.switches.items()):
            entry = switches.setdefault(name, {"tier": tier, "uplinks": []})
            entry["uplinks"] = sorted(set(entry["uplinks"]) | up)
    wiring: dict[str, set[str]] = {}
    for part in parts:
        for name, peers in part.wiring.items():
            wiring.setdefault(name, set()).update(peers)
    edge = set().union(*(part.edge for part in parts)) if parts else set()
    if edge:
        for name, (tier, up) in tiers(wiring, edge).items():
            switches[name] = {"tier": tier, "uplinks": sorted(up)}
    for node, spec in (hand.get("nodes") or {}).items():
        nodes[node] = {**nodes.get(node, {}), **(spec or {})}
    for name, spec in (hand.get("switches") or {}).items():
        switches[name] = {**switches.get(name, {}), **(spec or {})}
    return TopologyFile.model_validate({
        "cluster": hand.get("cluster") or cluster,
        "valid_from": hand.get("valid_from") or valid_from,
        "nodes": nodes, "switches": switches,
        "filesystems": hand.get("filesystems") or {},
        "gpu_pci": hand.get("gpu_pci") or {},
    })


def changes(old: TopologyFile | None, new: TopologyFile, at: datetime,
            ) -> tuple[list[dict[str, Any]], list[str]]:
    """(`topology.link` drafts for every NIC cabled somewhere new at `at`, what else changed
    in words). A first import has no previous wiring: its file is the baseline, no events."""
    if old is None:
        return [], []
    events: list[dict[str, Any]] = []
    notes: list[str] = []
    for node, spec in sorted(new.nodes.items()):
        before = old.nodes.get(node)
        for nic, link in sorted(spec.nics.items()):
            was = before.nics.get(nic) if before else None
            if was is not None and (was.switch, was.port) == (link.switch, link.port):
                continue
            previous = f"{was.switch}/{was.port}" if was else None
            events.append({
                "type": "topology.link", "time": at.isoformat(), "cluster": new.cluster,
                "scope": "nic", "entity": f"{node}/{nic}", "node": node, "severity": "info",
                "message": (f"{node}/{nic} cabled to {link.switch}/{link.port}"
                            + (f" (was {previous})" if previous else " (new)")),
                "attributes": {"node": node, "nic": nic, "switch": link.switch,
                               "port": link.port,
                               **({"previous": previous} if previous else {})}})
    for node, spec in sorted(old.nodes.items()):
        gone = sorted(set(spec.nics) - set(new.nodes[node].nics)) if node in new.nodes \
            else sorted(spec.nics)
        for nic in gone:
            notes.append(f"{node}/{nic}: no longer seen (was on "
                         f"{spec.nics[nic].switch}/{spec.nics[nic].port}); its link stays "
                         "open until a topology.link moves it")
    for name, switch in sorted(new.switches.items()):
        was_switch = old.switches.get(name)
        if was_switch is None:
            notes.append(f"switch {name}: new ({switch.tier})")
        elif (was_switch.tier, sorted(was_switch.uplinks)) != (switch.tier,
                                                                sorted(switch.uplinks)):
            notes.append(f"switch {name}: {was_switch.tier} {sorted(was_switch.uplinks)} -> "
                         f"{switch.tier} {sorted(switch.uplinks)}")
    for name in sorted(set(old.switches) - set(new.switches)):
        notes.append(f"switch {name}: no longer seen")
    return events, notes
