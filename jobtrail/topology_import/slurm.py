"""Slurm's `topology.conf` (topology/tree): `SwitchName=s0 Nodes=dev[0-5]`,
`SwitchName=s3 Switches=s[0-2]`, optional `LinkSpeed=`; `#` starts a comment; names are
case-insensitive keys, hostlists as Slurm writes them. Slurm knows which leaf a node hangs
off, not its NIC or port: each node gets one NIC named `fabric` with an empty port (another
source that knows the HCAs and ports takes precedence in the merge). Tiers come from the
`Switches=` links, leaves up. A node listed under two leaves (Slurm warns "Multiple leaf
switches contain nodes") is reported in `conflicts` and imported on each of them (`fabric`,
`fabric-2`, ...), never silently on one.
"""

from __future__ import annotations

import re

from ingest import hostlist
from jobtrail.topology_import.model import Partial

_PAIR = re.compile(r"(?P<k>\w+)=(?P<v>\S+)")
NIC = "fabric"


class SlurmTopologyError(ValueError):
    pass


def parse(text: str) -> Partial:
    with hostlist.budget():  # the whole file's hostlists share one limit
        return _parse(text)


def _parse(text: str) -> Partial:
    out = Partial("slurm")
    under: dict[str, list[tuple[str, int]]] = {}  # node -> (leaf, line) in file order
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        pairs = {m.group("k").lower(): m.group("v") for m in _PAIR.finditer(line)}
        name = pairs.get("switchname")
        if not name:
            if "blockname" in pairs or "ringname" in pairs:
                raise SlurmTopologyError(f"line {number}: topology/block and topology/ring "
                                         "have no switches; only topology/tree is read")
            continue  # BlockSizes=..., parameters of other plugins
        out.wiring.setdefault(name, set())
        try:
            switches = hostlist.expand(pairs.get("switches", ""), field="Switches")
            nodes = hostlist.expand(pairs.get("nodes", ""), field="Nodes")
        except hostlist.HostlistError as exc:
            raise SlurmTopologyError(f"line {number}: {exc.field}: {exc.reason}") from None
        for child in switches:
            out.cable(name, child)
        for node in nodes:
            if all(leaf != name for leaf, _ in under.get(node, [])):
                under.setdefault(node, []).append((name, number))
    for node, leaves in under.items():
        for i, (leaf, _) in enumerate(leaves):
            out.link(node, NIC if i == 0 else f"{NIC}-{i + 1}", leaf, "")
        if len(leaves) > 1:
            out.conflicts.append(
                f"{node} is listed under {len(leaves)} leaf switches ("
                + ", ".join(f"{leaf} on line {n}" for leaf, n in leaves)
                + "): Slurm warns 'Multiple leaf switches contain nodes'; imported on each")
    out.tier_switches()
    return out
