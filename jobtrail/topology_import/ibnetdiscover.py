"""`ibnetdiscover` output (infiniband-diags): switches, their ports and what each port
reaches; HCAs; hosts from the node descriptions.

A switch block starts `Switch <ports> "S-<guid>" # "<description>" ... lid N`, then one line
per cabled port: `[<port>] "H-<guid>"[<peer port>](<port guid>) # "<host> <hca>" lid N 4xNDR`
or `[<port>] "S-<guid>"[<peer port>] # "<switch description>" ...`. A switch is named by its
description (`MF0;A09-P1-IBLEAF-04-04:MQM9701/U1` -> `A09-P1-IBLEAF-04-04`, the name set on
the switch), else by its GUID when the description is the vendor's default. A host is the first
word of an HCA's description (`a08-p1-dgx-04-c01 mlx5_5`), its NIC the second; HCAs that name
no host (`MT4129 ConnectX7 Mellanox Technologies`, SHARP aggregation nodes) are listed as
skipped. Leaves are the switches with compute HCAs, named or not (a SHARP aggregation node is
not one); tiers above follow the switch-to-switch links. Ports keep ibnetdiscover's numbers
(`17`); on a director switch, whose ASICs are listed one by one under one name
(`MF0;ib-core:CS7520/L05/U1`, line 5 ASIC 1; `/S01/U1` a spine ASIC), a port is named with its
ASIC (`L05/U1/17`), so two HCAs on two line cards never share a port name, and the links
between its own ASICs are not uplinks. The `# Topology file: generated on ...` line is the
time the wiring was observed.
"""

from __future__ import annotations

import re
from datetime import datetime

from jobtrail.topology_import.model import Partial

_NODE = re.compile(r'^(?P<kind>Switch|Ca|Rt)\s+\d+\s+"(?P<id>[SHR]-[0-9a-fA-Fx]+)"\s*#\s*'
                   r'"(?P<desc>[^"]*)"')
_PORT = re.compile(r'^\[(?P<port>\d+)\](?:\([0-9a-fA-Fx]+\))?\s+"(?P<peer>[SHR]-[0-9a-fA-Fx]+)"'
                   r'\[(?P<peer_port>\d+)\][^#]*#\s*(?:lid \d+ lmc \d+ )?"(?P<desc>[^"]*)"')
_SWITCH_NAME = re.compile(r"^MF0;(?P<name>[^:]+):(?P<model>[^/\s]*)(?P<asic>(?:/[^/\s]+)*)")
_DIRECTOR_ASIC = re.compile(r"^[LS]\d+/U\d+$")
_GENERATED = re.compile(r"^#\s*Topology file: generated on (?P<when>.+?)\s*$")
_VENDOR = re.compile(r"Mellanox|Voltaire|Technologies|InfiniHost|ConnectX|Aggregation", re.I)
_AGGREGATION = re.compile(r"Aggregation Node", re.I)


def switch_name(guid_id: str, description: str) -> str:
    """The name set on the switch, else its GUID (`S-...`) when the description is generic."""
    if m := _SWITCH_NAME.match(description):
        return m.group("name")
    text = description.strip()
    if text and " " not in text and ";" not in text:
        return text
    return guid_id


def asic_of(description: str) -> str:
    """The ASIC of a director switch a description names (`L05/U1`, `S01/U1`), else ''."""
    if m := _SWITCH_NAME.match(description):
        asic = m.group("asic").strip("/")
        if _DIRECTOR_ASIC.match(asic):
            return asic
    return ""


def host_of(description: str) -> tuple[str, str] | None:
    """(host, nic) from an HCA description, or None when it names no host."""
    words = description.split()
    if len(words) != 2 or _VENDOR.search(description):
        return None
    return words[0], words[1]


def generated_at(text: str) -> datetime | None:
    for line in text.splitlines()[:10]:
        if m := _GENERATED.match(line.strip()):
            try:
                return datetime.strptime(" ".join(m.group("when").split()),
                                         "%a %b %d %H:%M:%S %Y")
            except ValueError:
                return None
    return None


def parse(text: str) -> Partial:
    out = Partial("ibnetdiscover")
    names: dict[str, str] = {}   # S-guid -> name, from every mention
    asics: dict[str, str] = {}   # S-guid -> director ASIC
    links: list[tuple[str, str, str, str]] = []  # (switch id, port, peer id, peer desc)
    current: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if m := _NODE.match(line):
            current = m.group("id") if m.group("kind") == "Switch" else None
            if current:
                names[current] = switch_name(current, m.group("desc"))
                asics[current] = asic_of(m.group("desc"))
            continue
        if current and (m := _PORT.match(line)):
            peer = m.group("peer")
            if peer.startswith("S-"):
                names.setdefault(peer, switch_name(peer, m.group("desc")))
                asics.setdefault(peer, asic_of(m.group("desc")))
            links.append((current, m.group("port"), peer, m.group("desc")))
    for name in names.values():
        out.wiring.setdefault(name, set())
    for switch_id, number, peer, desc in links:
        switch = names[switch_id]
        port = f"{asics[switch_id]}/{number}" if asics.get(switch_id) else number
        if peer.startswith("S-"):
            out.cable(switch, names[peer])
            continue
        if peer.startswith("H-") and not _AGGREGATION.search(desc):
            out.edge.add(switch)  # a compute HCA hangs off it, named or not
        found = host_of(desc)
        if found is None:
            out.skipped.append(f"{switch} port {port}: {desc or peer}")
            continue
        host, nic = found
        if nic in out.nics.get(host, {}):
            was = out.nics[host][nic]
            out.conflicts.append(f"{host} {nic}: described on {was.switch} port {was.port} "
                                 f"and on {switch} port {port} (two HCAs with one "
                                 "description): kept the first")
            continue
        out.link(host, nic, switch, port)
    out.tier_switches()
    return out
