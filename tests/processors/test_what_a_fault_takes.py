"""What a fault takes with it (issue 41, item 8), on the pure functions: the Xid a drain's
reason names, whichever reader brought the drain; the node a switch port's event is about."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from processors.incidents import reasons
from schemas.events import Event, Scope, Source

T = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def _drain(reason: str, **attrs: object) -> Event:
    return Event(id="d1", type="node.drained", source=Source.node, time=T, cluster="c",
                 scope=Scope.node, entity="node-012", node="node-012",
                 attributes={"reason": reason, **attrs})


@pytest.mark.parametrize(("reason", "xid", "pci"), [
    # NHC's check_gpu_xid (Azure/azurehpc PR #648) quotes the dmesg line
    ("check_gpu_xid: GPU Xid errors detected: [ 3611.425861] NVRM: Xid (PCI:0000:9b:00): 79, "
     "pid=0, GPU has fallen off the bus.", 79, "0000:9b:00"),
    ("NHC: check_nv_healthmon: Xid 79", 79, None),  # NHC's nv_healthmon check
    ("Xid 79 GPU fell off the bus [root@2026-11-30T09:00:00]", 79, None),  # an operator's
    ("XID=48 double bit ECC", 48, None),
    ("xid: 119 GSP timeout", 119, None),
])
def test_a_drain_reason_naming_an_xid_carries_it(reason: str, xid: int, pci: str | None) -> None:
    named = reasons.named_xid(_drain(reason), lambda node, p: 3 if node == "node-012" else None)
    assert (named.attributes["xid"], named.attributes["xid_from"]) == (xid, "reason")
    assert named.attributes.get("pci") == pci
    if pci:  # the topology's PCI table names the GPU: the entity, the follow-ups
        assert (named.entity, named.node, named.attributes["gpu"]) == (
            "node-012/gpu3", "node-012", "3")
        assert reasons.said(named) == ", Xid 79 (GPU 3) named in its reason"
    else:
        assert named.entity == "node-012"
        assert reasons.said(named) == f", Xid {xid} named in its reason"


@pytest.mark.parametrize("reason", [
    "Kill task failed", "maintenance: PSU swap", "check_gpu_xid: no Xid", "gpu_xid_99 check",
    "Not responding"])
def test_a_reason_that_names_no_xid_is_unchanged(reason: str) -> None:
    event = _drain(reason)
    assert reasons.named_xid(event) is event and reasons.said(event) == ""


def test_an_xid_the_source_gave_wins_over_the_reason() -> None:
    event = _drain("Xid 48", xid=79)
    assert reasons.named_xid(event) is event


def _ctx() -> object:
    from jobtrail.learn import sample
    from processors.incidents.book import Book
    from processors.incidents.context import Context
    from processors.incidents.rules import load_rules
    from processors.topology import Topology
    from schemas.topology import TopologyFile

    wiring = Topology.from_file(TopologyFile.model_validate(sample.topology()))
    return Context(Book(), load_rules(), lambda: wiring)


def _event(type_: str, minute: float, scope: Scope, entity: str, node: str | None = None,
           **attrs: object) -> Event:
    from datetime import timedelta
    return Event(id=f"{type_}-{entity}-{minute}", type=type_, source=Source.node,
                 time=T + timedelta(minutes=minute), cluster="c", scope=scope, entity=entity,
                 node=node, attributes=attrs)


def test_a_power_loss_takes_the_nodes_own_ports_and_no_others() -> None:
    from processors.incidents import power

    ctx = _ctx()
    rules = ctx.rules  # type: ignore[attr-defined]

    def rule_of(e: Event) -> object:
        return power.observe(ctx, e, rules.signal_rule(e.type, e.attributes, e.message))  # type: ignore[arg-type]

    # node-007 is cabled to leaf-01/p7 and leaf-02/p7 in the sample fat tree
    assert power.node_of(ctx, _event("network.port_down", 0, Scope.port, "leaf-02/p7",  # type: ignore[arg-type]
                                     switch="leaf-02", port="p7")) == "node-007"
    off = _event("node.power", 0, Scope.node, "node-007", "node-007", state="off")
    assert rule_of(off).name == "node-power-lost"  # type: ignore[attr-defined]
    taken = [_event("network.port_down", 0.02, Scope.port, "leaf-01/p7", switch="leaf-01",
                    port="p7"),
             _event("network.port_down", 0.02, Scope.nic, "node-007/mlx5_1", "node-007"),
             _event("node.not_ready", 5, Scope.node, "node-007", "node-007",
                    reason="Not responding")]
    assert [rule_of(e).name for e in taken] == [power.RULE] * 3  # type: ignore[attr-defined]
    kept = [_event("network.port_down", 0.02, Scope.port, "leaf-01/p8", switch="leaf-01",
                   port="p8"),  # node-008's
            _event("node.not_ready", 61, Scope.node, "node-007", "node-007"),  # past 1 h
            _event("node.xid", 1, Scope.gpu, "node-007/gpu1", "node-007", xid=79)]
    assert [rule_of(e).name for e in kept] == [  # type: ignore[attr-defined]
        "ib-port-flap", "node-not-ready", "gpu-xid-fatal"]


def test_what_is_still_drained_is_read_off_the_evidence() -> None:
    """Drained, then back (node.ready after the drain): out of the list; drained again, or
    drained and never back: in it, since its first drain; a moved piece does not count."""
    from processors.incidents.aggregate import still_drained

    def at(minute: int) -> datetime:
        from datetime import timedelta
        return T + timedelta(minutes=minute)

    evidence = [(at(1), "node.drained", "node-005", "consequence"),
                (at(2), "node.drained", "node-006/gpu3", "signal"),
                (at(3), "node.ready", "node-005", "recovery"),
                (at(4), "node.drained", "node-007", "moved"),
                (at(5), "node.drained", "node-006", "consequence")]
    assert still_drained(evidence) == [("node-006", at(2))]


def test_a_consequence_for_another_team_is_heard_by_that_team() -> None:
    """The network team's incident holds a GPU off the bus and a drained node: hardware ops'
    subscription (`team=hardware-ops`) is told, once, `followup_proposed` (and, the
    follow-ups being there within the first wait, of the opening too); the network team's
    hears its incident as before, and not of another team's follow-up."""
    from datetime import timedelta

    from jobtrail.learn.scenarios import LIBRARY, load, run
    from processors.notify.changes import labels
    from processors.notify.decide import decide
    from processors.notify.model import Matcher, Subscription

    scenario = load(LIBRARY / "consequences-get-their-own-owners.yaml")
    log, _ = run(scenario)
    (network,) = {e.incident_id for e in log if e.kind == "opened"}
    logs = {network: [e for e in log if e.incident_id == network]}

    def sub(team: str) -> Subscription:
        return Subscription.model_validate({
            "id": f"sub-{team}", "name": team, "owner": f"team:{team}",
            "matchers": [Matcher.parse(f"team={team}").model_dump()],
            "channel": {"kind": "webhook", "target": "env:HOOK"}})

    later = scenario.start + timedelta(hours=2)
    decided = decide([sub("hardware-ops"), sub("network")], [], logs, later)
    heard = {(d.subscription_id, d.transition) for d in decided if d.status == "pending"}
    assert ("sub-hardware-ops", "followup_proposed") in heard
    assert [t for s, t in heard if s == "sub-hardware-ops"].count("followup_proposed") == 1
    assert ("sub-network", "opened") in heard and ("sub-network", "followup_proposed") \
        not in heard
    from processors.incidents.model import fold
    assert labels(fold(log)[network])["team"] == ("network", "hardware-ops")
