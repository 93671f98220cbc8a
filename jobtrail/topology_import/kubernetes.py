"""Kubernetes node labels (`kubectl get nodes -o json`, a NodeList) -> which switch each node
hangs off and the tiers above it.

The network-topology labels in use, lowest tier first, are read in this order of preference:
- Topograph: `fabric.topograph.run/tier-0`, `tier-1`, ... (tier 0 next to the node);
- EKS: `topology.k8s.aws/network-node-layer-3`, `-2`, `-1` (layer 1 the top);
- GKE: `cloud.google.com/gce-topology-subblock`, `cloud.google.com/gce-topology-block`;
- `network.topology.nvidia.com/leaf`, `/spine`, `/core`.
The rack is `topology.kubernetes.io/rack` or the configured label; the zone is not a switch.
Like Slurm, labels say which switch, not which NIC or port: one NIC named `fabric`.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from jobtrail.topology_import.model import Partial

NIC = "fabric"
LABEL_FAMILIES: tuple[tuple[str, ...], ...] = (
    tuple(f"fabric.topograph.run/tier-{i}" for i in range(8)),
    tuple(f"topology.k8s.aws/network-node-layer-{i}" for i in (4, 3, 2, 1)),
    ("cloud.google.com/gce-topology-subblock", "cloud.google.com/gce-topology-block"),
    ("network.topology.nvidia.com/leaf", "network.topology.nvidia.com/spine",
     "network.topology.nvidia.com/core"),
)
RACK_LABELS = ("topology.kubernetes.io/rack",)


class KubernetesLabelsError(ValueError):
    pass


def _items(doc: Any) -> list[dict[str, Any]]:
    if isinstance(doc, dict) and isinstance(doc.get("items"), list):
        return [i for i in doc["items"] if isinstance(i, dict)]
    if isinstance(doc, list):
        return [i for i in doc if isinstance(i, dict)]
    if isinstance(doc, dict) and doc.get("kind") == "Node":
        return [doc]
    raise KubernetesLabelsError("expected a NodeList (kubectl get nodes -o json) or a list "
                                "of Node objects")


def parse(text: str, rack_label: str = "") -> Partial:
    out = Partial("kubernetes")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise KubernetesLabelsError(f"not JSON: {exc}") from None
    for item in _items(doc):
        meta = item.get("metadata") or {}
        name = str(meta.get("name") or "")
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        if not name:
            continue
        for key in (rack_label, *RACK_LABELS):
            if key and labels.get(key):
                out.racks[name] = labels[key]
                break
        chain = next(([labels[k] for k in family if labels.get(k)]
                      for family in LABEL_FAMILIES if any(labels.get(k) for k in family)), [])
        if not chain:
            out.skipped.append(f"{name}: no network-topology label")
            continue
        out.link(name, NIC, chain[0], "")
        for lower, upper in itertools.pairwise(chain):
            out.cable(lower, upper)
    out.tier_switches()
    return out
