"""What a reason says: a drain or not-ready whose reason names an Xid (NHC's `check_gpu_xid:
GPU Xid errors detected: ... NVRM: Xid (PCI:0000:9b:00): 79, ...`, an operator's `Xid 79 GPU
fell off the bus`, a collector's copy of either) is that Xid's, whichever reader brought it
(scontrol, sinfo -R, slurmctld, the collector, an alert). The detector reads the number
here, once, so no adapter has to: the drain then matches `drain-names-xid` (a GPU fault,
not a bare node failure), its follow-ups name the GPU, and the explanation says where the
Xid was read. Pure: the stored event keeps what the source said.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from processors.timeline import event_node
from schemas.events import Event

_XID = re.compile(r"(?i)\bxid\b(?:\s{0,2}\(PCI:(?P<pci>[0-9a-f]{1,8}:[0-9a-f]{2}:[0-9a-f]{2}"
                  r"(?:\.\d)?)\))?[\s:=#,)(-]{0,4}(?P<xid>\d{1,3})\b")
_TYPES = frozenset({"node.drained", "node.not_ready"})


def _text(event: Event) -> str:
    reason = event.attributes.get("reason")
    return f"{reason if isinstance(reason, str) else ''} {event.message or ''}"


def named_xid(event: Event, gpu_of: Callable[[str, str], int | None] | None = None) -> Event:
    """`event` with the Xid its reason names (`xid`, `xid_from: reason`, `pci`, and `gpu`
    when `gpu_of(node, pci)` knows the index), or `event` itself."""
    if event.type not in _TYPES or event.attributes.get("xid") is not None:
        return event
    m = _XID.search(_text(event)[:2000])
    if m is None:
        return event
    node = event_node(event)
    attrs: dict[str, Any] = {**event.attributes, "xid": int(m["xid"]), "xid_from": "reason"}
    update: dict[str, Any] = {"attributes": attrs}
    if m["pci"]:
        attrs.setdefault("pci", m["pci"])
        index = gpu_of(node, m["pci"]) if gpu_of is not None and node else None
        if index is not None and attrs.get("gpu") in (None, ""):
            attrs["gpu"] = str(index)
            update.update(entity=f"{node}/gpu{index}", node=node)
    return event.model_copy(update=update)


def said(event: Event) -> str:
    """', Xid 79 named in its reason' for an event `named_xid` read, else ''."""
    attrs = event.attributes
    if attrs.get("xid_from") != "reason":
        return ""
    gpu = f" (GPU {attrs['gpu']})" if attrs.get("gpu") not in (None, "") else ""
    return f", Xid {attrs['xid']}{gpu} named in its reason"
