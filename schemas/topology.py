"""The cluster's wiring: node -> GPUs, NICs -> leaf switch/port -> spine; filesystems -> targets.

A topology file (YAML or JSON, documented in docs/topology.md) gives the wiring in force from
its `valid_from`; `topology.link` events change it while running (a cable moved, a node
replaced), each from its own time, so a question about last Tuesday uses last Tuesday's
wiring.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from schemas.events import parse_time


class NicSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    switch: str
    port: str
    rail: int | None = None


class NodeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rack: str | None = None
    gpus: int = Field(default=8, ge=0)
    nics: dict[str, NicSpec] = Field(default_factory=dict)
    gpu_pci: dict[str, int] = Field(default_factory=dict)
    """PCI bus address -> GPU index on this node (overrides the file's `gpu_pci`)."""


class SwitchSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tier: str = "leaf"
    uplinks: list[str] = Field(default_factory=list)


class FilesystemSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str = "lustre"
    targets: list[str] = Field(default_factory=list)


class PartitionSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    whole_node: bool = False
    """Jobs get whole nodes (`OverSubscribe=EXCLUSIVE`): a job that says no GPU count holds
    every GPU of its nodes (processors/gpus.py)."""


class TopologyFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cluster: str
    valid_from: datetime = Field(default_factory=lambda: parse_time(0))
    nodes: dict[str, NodeSpec] = Field(default_factory=dict)
    switches: dict[str, SwitchSpec] = Field(default_factory=dict)
    filesystems: dict[str, FilesystemSpec] = Field(default_factory=dict)
    partitions: dict[str, PartitionSpec] = Field(default_factory=dict)
    gpu_pci: dict[str, int] = Field(default_factory=dict)
    """PCI bus address (`0000:9b:00.0`, as `nvidia-smi -q` prints it) -> GPU index, for
    every node of the same build; a kernel Xid names the PCI address, the people fixing it
    need the index."""

    @field_validator("valid_from", mode="before")
    @classmethod
    def _time(cls, value: Any) -> Any:
        return parse_time(value)


class TopologyError(ValueError):
    pass


def load(path: Path) -> TopologyFile:
    """Parse and validate; errors name the file and the key (`nodes.node-001.nics`)."""
    from schemas.files import load_yaml

    return load_yaml(path, TopologyFile, TopologyError, "topology")


def fat_tree(nodes: int = 64, rails: int = 2, nodes_per_leaf: int = 16,
             cluster: str = "cluster-a") -> dict[str, Any]:
    """A 2-rail fat tree: each node has one HCA per rail, rail r of leaf group g on leaf
    `leaf-{g*rails+r+1:02d}`, every leaf up to every spine of its rail."""
    out: dict[str, Any] = {"cluster": cluster, "valid_from": "2026-01-01T00:00:00Z",
                           "nodes": {}, "switches": {}, "filesystems": {}}
    groups = (nodes + nodes_per_leaf - 1) // nodes_per_leaf
    for r in range(rails):
        out["switches"][f"spine-{r + 1:02d}"] = {"tier": "spine"}
    for g in range(groups):
        for r in range(rails):
            out["switches"][f"leaf-{g * rails + r + 1:02d}"] = {
                "tier": "leaf", "uplinks": [f"spine-{r + 1:02d}"]}
    for i in range(nodes):
        g, slot = divmod(i, nodes_per_leaf)
        out["nodes"][f"node-{i + 1:03d}"] = {
            "rack": f"rack-{g + 1:02d}", "gpus": 8,
            "nics": {f"mlx5_{r}": {"switch": f"leaf-{g * rails + r + 1:02d}",
                                   "port": f"p{slot + 1}", "rail": r} for r in range(rails)}}
    out["filesystems"] = {
        "lustre-scratch": {"kind": "lustre", "targets": [f"OST{t:04d}" for t in range(16)]},
        "ckpt-store": {"kind": "object", "targets": ["bucket-ckpt"]},
        "nfs-home": {"kind": "nfs", "targets": ["home01"]},
    }
    return out
