"""An attempt's GPUs are a fact with a source (DESIGN §9): what each event says, which source
is better, and the topology's count for a whole-node partition.

A source is `<kind>:<what said it>`; the kind sets the precedence:

    allocation (3)  the scheduler's allocation (TRES/gres allocated, the GPU ids named)
    request    (2)  what the job asked for (ReqTRES, tres_per_node x nodes, --gres, --gpus),
                    or another attempt's count of the same job
    topology   (1)  the topology's GPUs per node, on a partition that allocates whole nodes

A better source revises the attempt's count (the incident's impact is revised through its
log, `processors/incidents/impact.py`); an equal one keeps the larger count, so the fold does
not depend on arrival order. An attempt no source describes has no count (`gpus == 0`,
`gpus_source == ""`): its loss is unknown, never 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from schemas.events import Event

if TYPE_CHECKING:
    from processors.topology import Topology

KINDS = {"allocation": 3, "request": 2, "topology": 1}
UNKNOWN = ("no source gave the attempt's GPU count (an allocation, a request, or the "
           "topology's GPUs per node for a whole-node partition)")
"""Why a loss is unknown when no source said the GPUs."""

Count = tuple[int, str]


def rank(source: str) -> int:
    return KINDS.get(source.split(":", 1)[0], 0) if source else 0


def better(new: Count, current: Count) -> bool:
    """Whether `new` should replace `current`: a better kind of source, or the same kind
    with a larger count (two sources of one kind disagreeing: the larger, whatever came
    first)."""
    if new[0] <= 0:
        return False
    if current[0] <= 0:
        return True
    return (rank(new[1]), new[0]) > (rank(current[1]), current[0])


def said(event: Event) -> Count | None:
    """The GPU count an event states, with its source. A producer that gives `gpus`
    without a source: an allocation on `job.started`, a request on `job.submitted`. The GPU
    ids a start names are an allocation; a submit line is a request."""
    attrs: dict[str, Any] = event.attributes
    count = attrs.get("gpus")
    source = attrs.get("gpus_source")
    if isinstance(count, int) and not isinstance(count, bool) and count > 0:
        if isinstance(source, str) and rank(source):
            return count, source
        kind = "allocation" if event.type == "job.started" else "request"
        return count, f"{kind}:{event.type} gpus"
    ids = attrs.get("gpu_ids")
    if event.type == "job.started" and isinstance(ids, list) and ids:
        return len(ids), f"allocation:{len(ids)} GPU ids"
    line = attrs.get("submit_line")
    if isinstance(line, str):
        from ingest.slurm_gpus import from_submit_line

        nodes = attrs.get("nodes_requested")
        return from_submit_line(line, nodes if isinstance(nodes, int) else None)
    return None


def inherited(count: Count, attempt: int) -> Count:
    """Another attempt's count, for an attempt of the same job no source described: a
    request at best (the job asked for it; this attempt's own allocation may differ)."""
    kind, _, what = count[1].partition(":")
    kind = "request" if KINDS.get(kind, 0) >= KINDS["request"] else kind
    return count[0], f"{kind}:attempt {attempt}'s ({count[1]})" if what else count[1]


def is_inherited(source: str) -> bool:
    return source.startswith("request:attempt ")


def whole_nodes(event: Event, topology: Topology, queue: str = "") -> Event:
    """A start on a whole-node partition that says no GPU count gets the topology's (the
    sum of its nodes' GPUs), source `topology:...`; any other event is returned as it is.
    The stored event keeps what the source said; the attempt and the detector see this."""
    if event.type != "job.started" or said(event) is not None:
        return event
    partition = event.attributes.get("partition")
    partition = partition if isinstance(partition, str) and partition else queue
    nodes = event.attributes.get("nodes")
    if not partition or not isinstance(nodes, list) or not nodes or \
            not topology.whole_node(partition):
        return event
    counts = [topology.gpus_of(str(n)) for n in nodes]
    if any(c is None for c in counts):
        return event  # a node the topology does not know: no count is better than a guess
    total = sum(c or 0 for c in counts)
    if total <= 0:
        return event
    per = sorted({c for c in counts if c})
    each = f"{per[0]} GPUs" if len(per) == 1 else "their GPUs"
    source = (f"topology:{partition} allocates whole nodes, {each} x {len(nodes)} "
              f"node{'s' if len(nodes) != 1 else ''}")
    return event.model_copy(update={"attributes": {**event.attributes, "gpus": total,
                                                   "gpus_source": source}})
