"""InfiniBand port state from `ibstat`, `ibv_devinfo` and `ibdev2netdev` output: one
snapshot, or several (a `watch` capture, or snapshots each headed by a time line).

- a port in a down state (State Down/Polling/Init, Physical state Disabled/Polling, or
  `ibdev2netdev -v`'s port state) -> `network.port_down`; in a later snapshot, coming back
  -> `network.port_up`; plain ibdev2netdev's `(Down)` is its netdev's state, which is down
  on healthy hosts (no IPoIB, an uncabled second port): a port down only when it was `(Up)`
  in an earlier snapshot, or when the host's other IPoIB netdevs are up;
- a port whose Rate drops between snapshots (200 -> 100) -> `node.link_degraded`
  (`bus: infiniband`, `speed`, `expected` the earlier rate);
- the first snapshot's healthy ports are not events (nothing changed);
- `ibpanic: ... stat of IB device 'mlx5_8' failed: No such file or directory` (the HCA is
  gone) -> `network.port_down` on `node/mlx5_8`, the detail in `reason`.

A snapshot's time: `watch`'s header (`Every 2.0s: ibstat   gpu-node-1: Sun Nov 30 08:00:00
2026`, which names the host too), or a line holding only a timestamp (`date -Is` between
captures), else the time the output was read (`time_source: observed`). The node is the
header's host, else the shipper's (`--node`). Entity: `node/mlx5_0/1` (device and port).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ingest.base import Adapter, Context, Reject, raw_evidence
from ingest.redact import clip

_WATCH = re.compile(r"^Every [\d.]+s: .*?(?<![\w.-])(?P<host>[\w.-]++): (?P<when>\w{3} \w{3} +\d+ "
                    r"\d\d:\d\d:\d\d \d{4})\s*$")
_CA = re.compile(r"^CA '(?P<dev>[\w-]+)'")
_PORT = re.compile(r"^\s+Port (?P<port>\d+):\s*$")
_FIELD = re.compile(r"^\s+(?P<k>State|Physical state|Rate|Link layer):\s*(?P<v>.+?)\s*$")
# also aligned by `column -t`
_NETDEV = re.compile(r"^\s*(?P<dev>mlx\w+)\s+port\s+(?P<port>\d+)\s+==>\s+(?P<if>\S+)\s+"
                     r"\((?P<st>\w+)\)")
# ibdev2netdev -v: `0000:3b:00.0 mlx5_0 (MT4123 - MCX653105A-HDAT) ... port 1 (ACTIVE) ==> ib0
# (Up)`: the port's own state, then its netdev's
_NETDEV_V = re.compile(r"^\s*(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d\s+"
                       r"(?P<dev>mlx\w+)\s.{0,200}?\bport\s+(?P<port>\d+)\s+\((?P<pst>[A-Z_]+)\)\s+==>\s+"
                       r"(?P<if>\S+)\s+\((?P<st>\w+)\)")
# ibv_devinfo: `hca_id: mlx5_0`, `port:   1`, `state:  PORT_DOWN (1)`
_HCA = re.compile(r"^hca_id:\s*(?P<dev>[\w-]+)")
_DEVINFO_PORT = re.compile(r"^\s+port:\s+(?P<port>\d+)\s*$")
_DEVINFO_STATE = re.compile(r"^\s+state:\s+PORT_(?P<st>[A-Z_]+)")
# ibstat on a host whose HCA went missing
_PANIC = re.compile(r"ibpanic: .{0,200}?IB device '(?P<dev>[\w-]+)' failed: (?P<why>.{1,200})")
_DOWN_STATES = {"down", "polling", "init", "disabled", "armed"}


@dataclass
class Snapshot:
    time: str
    source: str
    host: str = ""
    ports: dict[str, dict[str, str]] = field(default_factory=dict)
    raw: list[str] = field(default_factory=list)


def _stamp(line: str, ctx: Context) -> tuple[str, str] | None:
    from ingest.timestamps import read

    stamp = read(line.strip() + " ", ctx)
    return (stamp.time, stamp.source) if stamp.source != "observed" and not stamp.rest.strip() \
        else None


def _snapshots(text: str, ctx: Context) -> list[Snapshot]:
    from ingest.timestamps import local_time

    shots: list[Snapshot] = []
    device, port = "", ""
    for line in text.splitlines():
        if not line.strip():
            continue
        if m := _WATCH.match(line):
            when = local_time(_ctime(m["when"]), ctx)
            shots.append(Snapshot(when, "line", m["host"], raw=[line]))
            continue
        if (found := _stamp(line, ctx)) is not None:
            shots.append(Snapshot(found[0], found[1], raw=[line]))
            continue
        if not shots:
            shots.append(Snapshot(ctx.observed_at.isoformat(), "observed"))
        shot = shots[-1]
        shot.raw.append(line)
        if m := _CA.match(line) or _HCA.match(line):
            device, port = m["dev"], ""
        elif m := _PORT.match(line) or _DEVINFO_PORT.match(line):
            port = m["port"]
            shot.ports.setdefault(f"{device}/{port}", {})
        elif (m := _FIELD.match(line)) and device and port:
            shot.ports.setdefault(f"{device}/{port}", {})[m["k"]] = m["v"]
        elif (m := _DEVINFO_STATE.match(line)) and device and port:
            shot.ports.setdefault(f"{device}/{port}", {})["State"] = m["st"].capitalize()
        elif m := _PANIC.search(line):
            shot.ports[m["dev"]] = {"State": "Down", "detail": f"missing: {m['why'].strip()}"}
        elif m := _NETDEV_V.match(line):
            shot.ports[f"{m['dev']}/{m['port']}"] = {"State": m["pst"].capitalize(),
                                                    "netdev": m["if"]}
        elif m := _NETDEV.match(line):
            shot.ports[f"{m['dev']}/{m['port']}"] = {"State": m["st"], "netdev": m["if"],
                                                    "netdev_only": "yes"}
    for shot in shots:
        _netdev_inference(shot)
    return [s for s in shots if s.ports]


def _netdev_inference(shot: Snapshot) -> None:
    """Plain ibdev2netdev says its netdev's state (`(Up)`/`(Down)`), not the port's: an
    InfiniBand port without IPoIB, or a RoCE NIC's uncabled second port, is `(Down)` on a
    healthy host (imbue-ai/cluster-health#4). Such a `(Down)` says the port is down only when
    the host's other IPoIB netdevs are up (IPoIB is configured, this one is not running);
    otherwise it is kept as seen, for a later snapshot's change (`(Up)` -> `(Down)`), and is
    no event by itself."""
    ipoib = {p: st for p, st in shot.ports.items()
             if st.get("netdev_only") and st.get("netdev", "").startswith("ib")}
    others_up = sum(1 for st in ipoib.values() if st["State"].lower() == "up")
    for port, state in shot.ports.items():
        if not state.get("netdev_only") or state["State"].lower() != "down":
            continue
        if port in ipoib and others_up:
            continue  # IPoIB runs on its siblings: this port is down
        state["State"] = "Unknown"  # the netdev is down; whether the port is, it does not say
        state["netdev_state"] = "Down"


def _ctime(text: str) -> str:
    """`Sun Nov 30 08:00:00 2026` -> `2026-11-30 08:00:00`."""
    from datetime import datetime

    return datetime.strptime(" ".join(text.split()), "%a %b %d %H:%M:%S %Y").strftime(
        "%Y-%m-%d %H:%M:%S")


def _down(state: dict[str, str]) -> bool:
    logical = state.get("State", "").split(":")[-1].strip().lower()
    physical = state.get("Physical state", "").split(":")[-1].strip().lower()
    return logical in _DOWN_STATES or physical in ("disabled", "polling")


def _rate(state: dict[str, str]) -> float | None:
    m = re.match(r"([\d.]+)", state.get("Rate", ""))
    return float(m.group(1)) if m else None


def parse(text: str, ctx: Context) -> list[dict[str, Any] | Reject]:
    shots = _snapshots(text, ctx)
    if not shots:
        return [Reject("ports", "no ibstat or ibdev2netdev port found", raw_evidence(
            clip(text, 1000)))]
    out: list[dict[str, Any] | Reject] = []
    before: dict[str, dict[str, str]] = {}
    for shot in shots:
        node = shot.host or ctx.node
        if not node:
            out.append(Reject("node", "no host in a watch header and none given by the "
                              "shipper (--node)", raw_evidence("\n".join(shot.raw))))
            continue
        evidence = raw_evidence("\n".join(shot.raw))
        for port, state in sorted(shot.ports.items()):
            old = before.get(port)
            entity = f"{node}/{port}"
            attrs: dict[str, Any] = {"state": state.get("State", ""), "port": port,
                                     "time_source": shot.source, "raw": evidence}
            if "detail" in state:
                attrs["reason"] = state["detail"]
            if state.get("netdev_state") == "Down" and old is not None and \
                    old.get("State", "").lower() == "up":
                state = {**state, "State": "Down"}  # its netdev went from up to down
                shot.ports[port] = state
                attrs["state"] = "Down"
            if _down(state) and (old is None or not _down(old)):
                out.append({"type": "network.port_down", "time": shot.time, "scope": "nic",
                            "entity": entity, "node": node, "severity": "error",
                            "message": f"{port} {state.get('State', '')}".strip(),
                            "attributes": attrs})
            elif old is not None and _down(old) and not _down(state):
                out.append({"type": "network.port_up", "time": shot.time, "scope": "nic",
                            "entity": entity, "node": node, "severity": "info",
                            "message": f"{port} {state.get('State', '')}".strip(),
                            "attributes": attrs})
            now, was = _rate(state), _rate(old or {})
            if now is not None and was is not None and now < was and not _down(state):
                out.append({"type": "node.link_degraded", "time": shot.time, "scope": "nic",
                            "entity": entity, "node": node, "severity": "warning",
                            "message": f"{port} rate {was:g} -> {now:g}",
                            "attributes": {"bus": "infiniband", "link": port,
                                           "speed": f"{now:g} Gb/s",
                                           "expected_speed": f"{was:g} Gb/s",
                                           "time_source": shot.source, "raw": evidence}})
        before.update(shot.ports)
    return out


ADAPTER = Adapter("ibstat", parse, doc="InfiniBand port state: ibstat / ibdev2netdev snapshots "
                  "(one, or several: state and rate changes)", line_oriented=True)
