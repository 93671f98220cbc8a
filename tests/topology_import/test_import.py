"""`jobtrail topology import` on real public outputs (tests/topology_import/fixtures/SOURCES.md),
a re-import that yields `topology.link` events at the observed time, and a generated
2,000-node fabric."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml

from jobtrail.topology_import import ibnetdiscover, kubernetes, merge, slurm
from schemas.topology import load
from tests.trust_kit import cli, stats

FIXTURES = Path(__file__).parent / "fixtures"
DGX = FIXTURES / "ibnetdiscover" / "nvidia_topograph_dgx_ndr.out"
AT = datetime(2026, 12, 1, tzinfo=UTC)


def test_ibnetdiscover_of_a_real_ndr_fabric() -> None:
    text = DGX.read_text()
    part = ibnetdiscover.parse(text)
    tiers = [tier for tier, _ in part.switches.values()]
    assert (tiers.count("leaf"), tiers.count("spine"), len(part.switches)) == (31, 9, 40)
    assert len(part.nics) == 122  # hosts named by their HCAs' descriptions
    # `[1] "H-e09d7303007a4bd8"[1](...) # "a08-p1-dgx-04-c01 mlx5_5" lid 647 4xNDR`
    link = part.nics["a08-p1-dgx-04-c01"]["mlx5_5"]
    assert (link.switch, link.port) == ("A09-P1-IBLEAF-04-04", "1")
    tier, uplinks = part.switches["A09-P1-IBLEAF-04-04"]
    assert tier == "leaf" and "A10-P1-IBSPINE-02" in uplinks and "B10-P1-IBSPINE-09" in uplinks
    assert part.switches["A10-P1-IBSPINE-02"] == ("spine", set())
    # unnamed ConnectX-7 ports and SHARP aggregation nodes name no host
    assert any("MT4129 ConnectX7" in s for s in part.skipped)
    assert any("Aggregation Node" in s for s in part.skipped)
    assert ibnetdiscover.generated_at(text) == datetime(2025, 8, 6, 16, 11, 23)


def test_ibnetdiscover_man_page_example_names_switches_by_guid() -> None:
    part = ibnetdiscover.parse((FIXTURES / "ibnetdiscover" / "rdma_core_man_example.txt")
                               .read_text())
    assert part.nics == {}  # "MT23108 InfiniHost Mellanox Technologies": no host
    assert len(part.skipped) == 5
    assert set(part.switches) == {"S-005442ba00003080", "S-0008f10400410015"}


def test_ibnetdiscover_alone_keeps_the_switch_wiring_with_unnamed_hosts() -> None:
    """The same real fabric with every HCA left at its default description (no node_desc set,
    as in the man page's example): the leaves are still the switches compute HCAs hang off, and
    the switch-to-switch links still give the spines and every leaf's uplinks."""
    text = DGX.read_text()
    unnamed = re.sub(r'# "[\w.-]+ (?:mlx5_\d+|HCA-\d+)"', '# "MT4129 ConnectX7   Mellanox '
                     'Technologies"', text)
    assert unnamed != text
    part = ibnetdiscover.parse(unnamed)
    assert part.nics == {}  # no host named anywhere
    tiers = [tier for tier, _ in part.switches.values()]
    assert (tiers.count("leaf"), tiers.count("spine")) == (31, 9)
    cabled = sum(1 for line in text.splitlines() if re.match(r'\[\d+\]\s+"S-', line))
    assert cabled > 48  # the switch-to-switch lines the file holds
    leaf_up = part.switches["A09-P1-IBLEAF-04-04"][1]
    assert {"A10-P1-IBSPINE-02", "B10-P1-IBSPINE-09"} <= leaf_up
    assert sum(len(up) for _, up in part.switches.values()) == sum(
        len(peers) for name, peers in part.wiring.items() if "LEAF" in name)
    # the merged file, from ibnetdiscover alone, carries the tiers and uplinks
    merged = merge.merge([part], None, cluster="dgx-a", valid_from=AT)
    assert merged.switches["A10-P1-IBSPINE-02"].tier == "spine"
    assert "A10-P1-IBSPINE-02" in merged.switches["A09-P1-IBLEAF-04-04"].uplinks


def test_director_line_asics_get_their_own_port_names() -> None:
    """Two HCAs on port 3 of two line cards of one director switch: `L05/U1/3` and
    `L07/U1/3`, not both `3`; the director's links between its own ASICs are not uplinks, its
    link to an outside switch is."""
    part = ibnetdiscover.parse((FIXTURES / "ibnetdiscover" / "director_line_asics.out")
                               .read_text())
    a, b = part.nics["node-041"]["mlx5_0"], part.nics["node-043"]["mlx5_0"]
    assert (a.switch, a.port) == ("ib-core", "L05/U1/3")
    assert (b.switch, b.port) == ("ib-core", "L07/U1/3")
    assert part.nics["node-042"]["mlx5_0"].port == "L05/U1/4"
    assert part.switches == {"ib-core": ("leaf", {"ib-top-01"}), "ib-top-01": ("spine", set())}
    assert part.conflicts == []


def test_slurm_upper_switches_are_tiered_with_ibnetdiscover_in_front() -> None:
    """Slurm's tree under an ibnetdiscover run that names none of these switches: the upper
    switches are tiered from Slurm's links (not left `leaf` by the first source)."""
    conf = slurm.parse("SwitchName=leaf1 Nodes=n[1-2]\nSwitchName=leaf2 Nodes=n[3-4]\n"
                       "SwitchName=spine1 Switches=leaf[1-2]\n"
                       "SwitchName=core1 Switches=spine1\n")
    assert conf.switches["spine1"] == ("spine", {"core1"})
    assert conf.switches["core1"] == ("core", set())
    ib = ibnetdiscover.parse((FIXTURES / "ibnetdiscover" / "rdma_core_man_example.txt")
                             .read_text())
    merged = merge.merge([ib, conf], None, cluster="c", valid_from=AT)
    assert (merged.switches["spine1"].tier, merged.switches["core1"].tier) == ("spine", "core")
    assert merged.switches["leaf1"].uplinks == ["spine1"]
    # the same switches in both sources (ibnetdiscover first, its HCAs unnamed): the spine
    # Slurm's tree names above the leaf is a spine in the merged file
    dgx = ibnetdiscover.parse(re.sub(r'# "[\w.-]+ (?:mlx5_\d+|HCA-\d+)"',
                                     '# "MT4129 ConnectX7   Mellanox Technologies"',
                                     DGX.read_text()))
    tree = slurm.parse("SwitchName=A09-P1-IBLEAF-04-04 Nodes=a08-p1-dgx-04-c[01-17]\n"
                       "SwitchName=A10-P1-IBSPINE-02 Switches=A09-P1-IBLEAF-04-04\n")
    same = merge.merge([dgx, tree], None, cluster="c", valid_from=AT)
    assert same.switches["A10-P1-IBSPINE-02"].tier == "spine"
    assert same.switches["A09-P1-IBLEAF-04-04"].tier == "leaf"
    # the two sources' wiring together: Slurm names the ibnetdiscover switch as a leaf's peer
    both = merge.merge([ib, slurm.parse("SwitchName=top Switches=S-005442ba00003080\n")],
                       None, cluster="c", valid_from=AT)
    assert both.switches["top"].tier == "spine"
    assert both.switches["S-005442ba00003080"].uplinks == ["top"]


def test_a_node_under_two_leaves_is_reported_and_kept_on_both(tmp_path: Path) -> None:
    text = "SwitchName=leaf1 Nodes=n[1-2]\nSwitchName=leaf2 Nodes=n[2-3]\n" \
           "SwitchName=spine Switches=leaf[1-2]\n"
    part = slurm.parse(text)
    assert part.conflicts == ["n2 is listed under 2 leaf switches (leaf1 on line 1, leaf2 on "
                              "line 2): Slurm warns 'Multiple leaf switches contain nodes'; "
                              "imported on each"]
    assert {nic: link.switch for nic, link in part.nics["n2"].items()} == {
        "fabric": "leaf1", "fabric-2": "leaf2"}
    conf = tmp_path / "topology.conf"
    conf.write_text(text)
    done = cli(tmp_path / "home", "topology", "import", "--cluster", "c", "--slurm", str(conf),
               "--out", str(tmp_path / "t.yaml"))
    assert "n2 is listed under 2 leaf switches" in done.stderr
    assert set(load(tmp_path / "t.yaml").nodes["n2"].nics) == {"fabric", "fabric-2"}


def test_slurm_topology_conf_tree() -> None:
    part = slurm.parse((FIXTURES / "slurm" / "topology_conf_man_example.conf").read_text())
    assert part.switches == {"s0": ("leaf", {"s3"}), "s1": ("leaf", {"s3"}),
                             "s2": ("leaf", {"s3"}), "s3": ("spine", set())}
    assert len(part.nics) == 18
    assert part.nics["dev7"]["fabric"].switch == "s1"


def test_kubernetes_node_labels() -> None:
    eks = kubernetes.parse((FIXTURES / "kubernetes" / "eks_network_node_layers.json")
                           .read_text())
    node = "ip-192-168-51-1.us-west-2.compute.internal"
    assert eks.nics[node]["fabric"].switch == "nn-8888888888example"  # layer 3: the nearest
    assert eks.switches["nn-8888888888example"] == ("leaf", {"nn-7777777777example"})
    assert eks.switches["nn-7777777777example"] == ("spine", {"nn-4444444444example"})
    assert eks.switches["nn-4444444444example"] == ("core", set())
    tiers = kubernetes.parse((FIXTURES / "kubernetes" / "topograph_fabric_tiers.json")
                             .read_text())
    assert tiers.nics["node-a"]["fabric"].switch == "s1"
    assert tiers.switches == {"s1": ("leaf", {"s2"}), "s2": ("spine", {"s3"}),
                              "s3": ("core", set())}


def test_merge_keeps_the_best_source_per_node_and_the_hand_file() -> None:
    ib = ibnetdiscover.parse(DGX.read_text())
    conf = slurm.parse("SwitchName=leaf-x Nodes=a08-p1-dgx-04-c01,extra-node\n")
    hand = yaml.safe_load((FIXTURES / "hand.yaml").read_text())
    merged = merge.merge([ib, conf], hand, cluster="ignored", valid_from=AT)
    assert merged.cluster == "dgx-a"  # the hand file wins
    # ibnetdiscover knew this node's HCAs and ports: Slurm's port-less link is not added
    assert "fabric" not in merged.nodes["a08-p1-dgx-04-c01"].nics
    assert merged.nodes["extra-node"].nics["fabric"].switch == "leaf-x"
    assert merged.filesystems["lustre-scratch"].targets[0] == "OST0000"
    assert merged.gpu_pci["0000:61:00.0"] == 3


def _moved(text: str) -> str:
    """The same fabric after a cable moved: c01's mlx5_5 from port 1 to port 30 of its leaf."""
    old = '[1]\t"H-e09d7303007a4bd8"'
    assert old in text
    return text.replace(old, '[30]\t"H-e09d7303007a4bd8"', 1)


def test_reimport_gives_the_moves_as_topology_link_events(tmp_path: Path) -> None:
    out, events = tmp_path / "topology.yaml", tmp_path / "changes.jsonl"
    first = cli(tmp_path / "home", "topology", "import", "--cluster", "dgx-a",
                "--ibnetdiscover", str(DGX), "--hand", str(FIXTURES / "hand.yaml"),
                "--out", str(out), "--events", str(events))
    assert "wrote the baseline" in first.stdout
    baseline = out.read_text()
    assert load(out).nodes["a08-p1-dgx-04-c01"].nics["mlx5_5"].port == "1"
    assert not events.exists()  # a first import is the baseline: nothing moved

    moved = tmp_path / "ibnetdiscover-later.out"
    moved.write_text(_moved(DGX.read_text()).replace(
        "generated on Wed Aug  6 16:11:23 2025", "generated on Thu Aug  7 09:30:00 2025"))
    again = cli(tmp_path / "home", "topology", "import", "--cluster", "dgx-a",
                "--ibnetdiscover", str(moved), "--hand", str(FIXTURES / "hand.yaml"),
                "--out", str(out), "--events", str(events))
    assert "1 link change(s)" in again.stdout
    assert out.read_text() == baseline  # never a silent overwrite of the past's wiring
    [change] = [json.loads(line) for line in events.read_text().splitlines()]
    assert change["type"] == "topology.link"
    assert change["time"].startswith("2025-08-07T09:30:00")  # when the fabric said so
    assert change["attributes"] == {"node": "a08-p1-dgx-04-c01", "nic": "mlx5_5",
                                    "switch": "A09-P1-IBLEAF-04-04", "port": "30",
                                    "previous": "A09-P1-IBLEAF-04-04/1"}
    # the events are what jobtrail stores
    cli(tmp_path / "home", "ingest", str(events))
    assert stats(tmp_path / "home")["final"]["events"] == 1
    # importing the same again: nothing new
    third = cli(tmp_path / "home", "topology", "import", "--cluster", "dgx-a",
                "--ibnetdiscover", str(moved), "--hand", str(FIXTURES / "hand.yaml"),
                "--out", str(out), "--events", str(events))
    assert "0 link change(s)" in third.stdout


def generated_fabric(nodes: int = 2000, rails: int = 8, per_leaf: int = 32,
                     spines_per_rail: int = 4) -> str:
    """ibnetdiscover-shaped output of a rail-optimised fat tree: one HCA per rail per node,
    rail r of leaf group g on its own leaf, every leaf up to its rail's spines."""
    groups = (nodes + per_leaf - 1) // per_leaf
    lines = ["#", "# Topology file: generated on Tue Dec  1 00:00:00 2026", "#", ""]

    def guid(kind: str, n: int) -> str:
        return f"{kind}-{n:016x}"

    def leaf_name(g: int, r: int) -> str:
        return f"MF0;LEAF-{g:03d}-R{r}:MQM9790/U1"

    def spine_name(r: int, s: int) -> str:
        return f"MF0;SPINE-R{r}-{s}:MQM9790/U1"

    for g in range(groups):
        for r in range(rails):
            leaf = 0x10000 + g * rails + r
            lines.append(f'Switch\t65 "{guid("S", leaf)}"\t\t# "{leaf_name(g, r)}" '
                         f"enhanced port 0 lid {leaf % 60000} lmc 0")
            for slot in range(per_leaf):
                node = g * per_leaf + slot
                if node >= nodes:
                    break
                hca = 0x100000 + node * rails + r
                lines.append(f'[{slot + 1}]\t"{guid("H", hca)}"[1]({hca:x}) \t\t# '
                             f'"node-{node + 1:04d} mlx5_{r}" lid {hca % 60000} 4xNDR')
            for s in range(spines_per_rail):
                spine = 0x20000 + r * spines_per_rail + s
                lines.append(f'[{33 + s}]\t"{guid("S", spine)}"[{g + 1}]\t\t# '
                             f'"{spine_name(r, s)}" lid {spine % 60000} 4xNDR')
            lines.append("")
    for r in range(rails):
        for s in range(spines_per_rail):
            spine = 0x20000 + r * spines_per_rail + s
            lines.append(f'Switch\t65 "{guid("S", spine)}"\t\t# "{spine_name(r, s)}" '
                         f"enhanced port 0 lid {spine % 60000} lmc 0")
            for g in range(groups):
                leaf = 0x10000 + g * rails + r
                lines.append(f'[{g + 1}]\t"{guid("S", leaf)}"[{33 + s}]\t\t# '
                             f'"{leaf_name(g, r)}" lid {leaf % 60000} 4xNDR')
            lines.append("")
    return "\n".join(lines)


def test_a_generated_2000_node_fabric() -> None:
    text = generated_fabric()
    started = time.perf_counter()
    part = ibnetdiscover.parse(text)
    merged = merge.merge([part], None, cluster="big", valid_from=AT)
    elapsed = time.perf_counter() - started
    assert len(merged.nodes) == 2000
    assert sum(len(n.nics) for n in merged.nodes.values()) == 16_000
    tiers = [s.tier for s in merged.switches.values()]
    assert (tiers.count("leaf"), tiers.count("spine")) == (63 * 8, 32)
    assert merged.nodes["node-2000"].nics["mlx5_7"].switch == "LEAF-062-R7"
    assert merged.switches["LEAF-062-R7"].uplinks == [f"SPINE-R7-{s}" for s in range(4)]
    print(f"2,000 nodes x 8 HCAs: parsed and merged in {elapsed:.2f} s")
