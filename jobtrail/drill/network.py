"""The `network-partition` drill's fabric: two network namespaces, one per rank, joined by a
veth pair the drill creates, so one worker's traffic to its peer can be cut (`ip link set
... down` inside rank 0's namespace) and restored, without touching the host's own
interfaces or routes. Needs root and `ip` (iproute2); addresses are link-local
(169.254.213.0/24, one /30 per drill), never routed off the host.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from dataclasses import dataclass


class NetworkUnavailable(RuntimeError):
    """This machine cannot build the drill's namespaces (not root, no iproute2)."""


def _ip(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *argv], capture_output=True, text=True, timeout=30,
                          check=False)
    if check and done.returncode != 0:
        raise NetworkUnavailable(f"ip {' '.join(argv)} exited {done.returncode}: "
                                 f"{done.stderr.strip()}")
    return done


@dataclass(frozen=True)
class Pair:
    """Rank 0's namespace and address (it listens there), rank 1's namespace, the veth ends."""

    ns0: str
    ns1: str
    dev0: str
    dev1: str
    addr0: str
    addr1: str
    port: int = 29500

    @property
    def rendezvous(self) -> str:
        return f"{self.addr0}:{self.port}"

    @classmethod
    def named(cls, drill_id: str) -> Pair:
        digest = hashlib.sha256(drill_id.encode()).hexdigest()
        tag, block = digest[:6], int(digest[6:8], 16) % 64
        return cls(f"jt-{tag}-r0", f"jt-{tag}-r1", f"jt{tag}a", f"jt{tag}b",
                   f"169.254.213.{block * 4 + 1}", f"169.254.213.{block * 4 + 2}")


def create(pair: Pair) -> None:
    if shutil.which("ip") is None:
        raise NetworkUnavailable("iproute2's `ip` is not installed")
    destroy(pair)  # a crashed drill's leftovers
    _ip("netns", "add", pair.ns0)
    _ip("netns", "add", pair.ns1)
    _ip("link", "add", pair.dev0, "type", "veth", "peer", "name", pair.dev1)
    for ns, dev, addr in ((pair.ns0, pair.dev0, pair.addr0), (pair.ns1, pair.dev1, pair.addr1)):
        _ip("link", "set", dev, "netns", ns)
        _ip("-n", ns, "addr", "add", f"{addr}/30", "dev", dev)
        _ip("-n", ns, "link", "set", dev, "up")
        _ip("-n", ns, "link", "set", "lo", "up")


def cut(pair: Pair) -> str:
    """Rank 0's end of the link down: its traffic to its peer stops (both ranks time out)."""
    _ip("-n", pair.ns0, "link", "set", pair.dev0, "down")
    return f"ip -n {pair.ns0} link set {pair.dev0} down (rank 0 cut off from rank 1)"


def restore(pair: Pair) -> None:
    _ip("-n", pair.ns0, "link", "set", pair.dev0, "up", check=False)


def is_up(pair: Pair) -> bool:
    done = _ip("-n", pair.ns0, "-o", "link", "show", pair.dev0, check=False)
    flags = done.stdout.split("<", 1)[-1].split(">", 1)[0].split(",")
    return done.returncode == 0 and "UP" in flags


def destroy(pair: Pair) -> None:
    """Remove the namespaces (their veth ends go with them); quiet when already gone."""
    for ns in (pair.ns0, pair.ns1):
        _ip("netns", "del", ns, check=False)
