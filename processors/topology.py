"""Time-versioned wiring: which node (NIC) sat on which switch port, when.

Built from a topology file and changed by `topology.link` events. Each link has a validity
interval; moving a cable closes the old link at the event's time and opens the new one, so
lookups at an earlier time still see the old wiring. Indexed by node, switch and port, so a
lookup costs the size of one switch's links, never a scan of the cluster.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from schemas.events import Event, Scope
from schemas.topology import TopologyFile


@dataclass
class Link:
    node: str
    nic: str
    switch: str
    port: str
    valid_from: datetime
    valid_to: datetime | None = None

    def at(self, time: datetime) -> bool:
        return self.valid_from <= time and (self.valid_to is None or time < self.valid_to)


class Topology:
    def __init__(self) -> None:
        self._by_nic: dict[tuple[str, str], list[Link]] = defaultdict(list)
        self._by_switch: dict[str, list[Link]] = defaultdict(list)
        self._nics_of: dict[str, set[str]] = defaultdict(set)
        self._uplinks: dict[str, set[str]] = defaultdict(set)
        self._downlinks: dict[str, set[str]] = defaultdict(set)
        self._target_fs: dict[str, str] = {}
        self._filesystems_of: dict[str, set[str]] = defaultdict(set)
        self._applied: set[str] = set()
        self.origin = ""
        """A digest of the topology file this was built from ('' for none)."""
        self._gpu_pci: dict[str, dict[str, int]] = {}
        self._gpu_pci_default: dict[str, int] = {}
        self._rack_of: dict[str, str] = {}
        self._gpus_of: dict[str, int] = {}
        self._whole_node: set[str] = set()

    @classmethod
    def from_file(cls, spec: TopologyFile) -> Topology:
        import hashlib

        topology = cls()
        topology.origin = hashlib.sha256(spec.model_dump_json().encode()).hexdigest()[:16]
        for name, switch in spec.switches.items():
            for up in switch.uplinks:
                topology._uplinks[name].add(up)
                topology._downlinks[up].add(name)
        topology._gpu_pci_default = {pci_key(k): v for k, v in spec.gpu_pci.items()}
        topology._whole_node = {name for name, p in spec.partitions.items() if p.whole_node}
        for node, node_spec in spec.nodes.items():
            topology._gpus_of[node] = node_spec.gpus
            if node_spec.rack:
                topology._rack_of[node] = node_spec.rack
            if node_spec.gpu_pci:
                topology._gpu_pci[node] = {pci_key(k): v for k, v in node_spec.gpu_pci.items()}
            for nic, link in node_spec.nics.items():
                topology.link(node, nic, link.switch, link.port, spec.valid_from)
        for fs, fs_spec in spec.filesystems.items():
            for target in fs_spec.targets:
                topology._target_fs[target] = fs
                topology._target_fs[f"{fs}-{target}"] = fs
                topology._filesystems_of[target].add(fs)
        return topology

    def link(self, node: str, nic: str, switch: str, port: str, time: datetime) -> None:
        """From `time` on, node/nic is cabled to switch/port (closing what was there)."""
        for old in self._by_nic[(node, nic)]:
            if old.at(time):
                old.valid_to = time
        for old in self._by_switch[switch]:
            if old.port == port and old.at(time):
                old.valid_to = time
        new = Link(node, nic, switch, port, time)
        self._by_nic[(node, nic)].append(new)
        self._nics_of[node].add(nic)
        self._by_switch[switch].append(new)

    def apply(self, event: Event) -> bool:
        """Fold a `topology.link` event; idempotent by event id."""
        if event.type != "topology.link" or event.id in self._applied:
            return False
        a = event.attributes
        self.link(str(a["node"]), str(a["nic"]), str(a["switch"]), str(a["port"]), event.time)
        self._applied.add(event.id)
        return True

    def under(self, switch: str, time: datetime) -> list[tuple[Link, str]]:
        """Links under `switch` at `time` (through leaves for a spine), with the path prefix."""
        out = [(link, switch) for link in self._by_switch.get(switch, ()) if link.at(time)]
        for leaf in sorted(self._downlinks.get(switch, ())):
            out.extend((link, f"{switch} → {leaf}") for link in self._by_switch.get(leaf, ())
                       if link.at(time))
        return out

    def ever_under(self, switch: str, port: str = "") -> list[Link]:
        """Every link ever under `switch` (through its leaves for a spine), whatever its
        time, or only those on its `port` (`p9` and `9` name one port)."""
        links = [*self._by_switch.get(switch, ()),
                 *(link for leaf in sorted(self._downlinks.get(switch, ()))
                   for link in self._by_switch.get(leaf, ()))]
        if port:
            links = [link for link in links
                     if link.port.removeprefix("p") == port.removeprefix("p")]
        return links

    def switches_of(self, node: str, time: datetime) -> set[str]:
        """Leaves the node is cabled to at `time`, and their spines."""
        leaves = {link.switch for link in self.links_of(node, time)}
        return leaves | {spine for leaf in leaves for spine in self._uplinks.get(leaf, ())}

    def rack_of(self, node: str) -> str:
        """The node's rack, '' when the topology file does not say."""
        return self._rack_of.get(node, "")

    def gpus_of(self, node: str) -> int | None:
        """The node's GPUs as the topology file says (None: a node it does not list)."""
        return self._gpus_of.get(node)

    def whole_node(self, partition: str) -> bool:
        """Whether the partition allocates whole nodes (`partitions.<name>.whole_node`)."""
        return partition in self._whole_node

    def links_of(self, node: str, time: datetime) -> list[Link]:
        return [link for nic in sorted(self._nics_of.get(node, ()))
                for link in self._by_nic[(node, nic)] if link.at(time)]

    def filesystem_of_target(self, target: str) -> str | None:
        return self._target_fs.get(target)

    def target_named(self, target: str, fsname: str) -> str | None:
        """The filesystem of `target` when a Lustre line spells it `<fsname>-<target>`
        (`scratch-OST0012`) and the topology names the filesystem otherwise (`lustre-scratch`
        with target `OST0012`): the one filesystem holding `target` whose name is `fsname`,
        or has it as a dash-separated part; None when none or several do."""
        if not fsname:
            return None
        found = [fs for fs in self._filesystems_of.get(target, ()) if fs == fsname
                 or fsname in fs.split("-")]
        return found[0] if len(found) == 1 else None

    def nic_named(self, node: str, entity: str) -> str | None:
        """A NIC port spelt `<node>/<nic>/<port>` (`node-019/mlx5_0/1`, ibstat's HCA port) as
        the topology names the NIC (`node-019/mlx5_0`), when it knows that NIC; else None."""
        head, _, port = entity.rpartition("/")
        name, _, nic = head.partition("/")
        if name != node or not port.isdigit() or nic not in self._nics_of.get(node, ()):
            return None
        return head

    def gpu_of(self, node: str, pci: str) -> int | None:
        """The GPU index at PCI address `pci` on `node`, from the topology's GPU table."""
        key = pci_key(pci)
        found = self._gpu_pci.get(node, {}).get(key)
        return found if found is not None else self._gpu_pci_default.get(key)


def pci_key(pci: str) -> str:
    """`0000:9B:00.0`, `00000000:9b:00.0` and `9b:00` are one address: bus and device."""
    parts = pci.strip().lower().split(":")
    if len(parts) >= 2:
        bus, device = parts[-2], parts[-1].split(".")[0]
        return f"{int(bus, 16):02x}:{int(device, 16):02x}" if _hex(bus) and _hex(device) \
            else pci.strip().lower()
    return pci.strip().lower()


def _hex(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return True


def entity_named(topology: Topology, event: Event) -> Event:
    """The event's entity as the topology names it, so one thing has one name whatever
    source spoke of it: a Lustre client's `scratch-OST0012` as the target `OST0012` of the
    filesystem the topology calls `lustre-scratch`, an HCA port `node-019/mlx5_0/1` as the
    NIC `node-019/mlx5_0` (the spelling read stays in the attributes: `fsname`, `port`)."""
    attrs = event.attributes
    if event.scope == Scope.target and isinstance(target := attrs.get("target"), str) \
            and target and event.entity != target:
        fs = topology.target_named(target, str(attrs.get("fsname") or ""))
        if fs is not None:
            return event.model_copy(update={"entity": target, "attributes": {
                **attrs, "filesystem": attrs.get("filesystem") or fs}})
    if event.scope == Scope.nic and event.node and event.entity:
        nic = topology.nic_named(event.node, event.entity)
        if nic is not None:
            return event.model_copy(update={"entity": nic})
    return event
