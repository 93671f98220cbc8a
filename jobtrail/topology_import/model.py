"""What one topology source knows, before the sources are merged."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class NicLink:
    switch: str
    port: str
    rail: int | None = None


@dataclass
class Partial:
    """Nodes -> NIC -> link, switches -> (tier, uplinks), racks; named for its source.

    `wiring` (which switches are cabled to which, undirected) and `edge` (the switches hosts
    hang off) are what the tiers are computed from: `merge` recomputes them over the union of
    every source's wiring, so a source that knows the links completes one that does not."""

    source: str
    nics: dict[str, dict[str, NicLink]] = field(default_factory=dict)
    switches: dict[str, tuple[str, set[str]]] = field(default_factory=dict)
    racks: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    """What the source described but named no node (an unnamed HCA, a SHARP node)."""
    wiring: dict[str, set[str]] = field(default_factory=dict)
    edge: set[str] = field(default_factory=set)
    conflicts: list[str] = field(default_factory=list)
    """What the source says that cannot all be true (a node under two leaves): reported, and
    imported as the source says it, never silently reduced to one reading."""

    def link(self, node: str, nic: str, switch: str, port: str) -> None:
        self.nics.setdefault(node, {})[nic] = NicLink(switch, port)
        self.edge.add(switch)
        self.wiring.setdefault(switch, set())

    def cable(self, a: str, b: str) -> None:
        """A switch-to-switch link (a link inside one switch, between its ASICs, is none)."""
        self.wiring.setdefault(a, set())
        self.wiring.setdefault(b, set())
        if a != b:
            self.wiring[a].add(b)
            self.wiring[b].add(a)

    def switch(self, name: str, tier: str = "leaf", uplinks: set[str] | None = None) -> None:
        old_tier, old_up = self.switches.get(name, (tier, set()))
        self.switches[name] = (old_tier if name in self.switches else tier,
                               old_up | (uplinks or set()))

    def tier_switches(self) -> None:
        """Set every switch's tier and uplinks from this source's own wiring."""
        for name, (tier, up) in tiers(self.wiring, self.edge).items():
            self.switch(name, tier, up)


def tiers(children: dict[str, set[str]], leaves: set[str]) -> dict[str, tuple[str, set[str]]]:
    """Switch tiers from the leaves up (leaf, spine, core, then `tier-N`), with each switch's
    uplinks: its neighbours one tier up. `children` maps a switch to the switches it links.
    A switch no leaf reaches keeps tier `leaf` (nothing says otherwise)."""
    names = ("leaf", "spine", "core")
    level = {leaf: 0 for leaf in leaves}
    frontier = set(leaves)
    for depth in range(1, 16):  # a fabric deeper than 16 tiers is not a fabric we read
        nxt = {n for s in frontier for n in children.get(s, ()) if n not in level}
        if not nxt:
            break
        for name in nxt:
            level[name] = depth
        frontier = nxt
    for name in children:
        level.setdefault(name, 0)
    out: dict[str, tuple[str, set[str]]] = {}
    for name, depth in level.items():
        up = {n for n in children.get(name, ()) if level.get(n, -1) == depth + 1}
        out[name] = (names[depth] if depth < len(names) else f"tier-{depth}", up)
    return out
