"""Slurm's `topology.conf` (topology/tree): `SwitchName=s0 Nodes=dev[0-5]`,
`SwitchName=s3 Switches=s[0-2]`, optional `LinkSpeed=`; `#` starts a comment; names are
case-insensitive keys, hostlists as Slurm writes them. Slurm knows which leaf a node hangs
off, not its NIC or port: each node gets one NIC named `fabric` with an empty port (another
source that knows the HCAs and ports takes precedence in the merge).
"""

from __future__ import annotations

import re

from ingest import hostlist
from jobtrail.topology_import.model import Partial, tiers

_PAIR = re.compile(r"(?P<k>\w+)=(?P<v>\S+)")
NIC = "fabric"


class SlurmTopologyError(ValueError):
    pass


def parse(text: str) -> Partial:
    with hostlist.budget():  # the whole file's hostlists share one limit
        return _parse(text)


def _parse(text: str) -> Partial:
    out = Partial("slurm")
    children: dict[str, set[str]] = {}
    leaves: set[str] = set()
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
        children.setdefault(name, set())
        try:
            switches = hostlist.expand(pairs.get("switches", ""), field="Switches")
            nodes = hostlist.expand(pairs.get("nodes", ""), field="Nodes")
        except hostlist.HostlistError as exc:
            raise SlurmTopologyError(f"line {number}: {exc.field}: {exc.reason}") from None
        for child in switches:
            children[name].add(child)
            children.setdefault(child, set()).add(name)  # undirected: tiers() orders them
        if nodes:
            leaves.add(name)
        for node in nodes:
            out.link(node, NIC, name, "")
    for name, (tier, up) in tiers(children, leaves).items():
        out.switch(name, tier, up)
    return out
