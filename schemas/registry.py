"""The closed registry of event types and their attribute models.

This is the one place adapters, processors and dashboards agree on what a `type` means.
Each attribute model allows extra keys (kept, not dropped) but types the keys it names, so
`job.failed` with `exit_code: "oops"` is rejected with the field named.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from schemas.events import Source

# bounds of the columns these land in (a value past them could never be stored: the record is
# dead-lettered naming the field, instead of failing every insert of its batch)
MAX_GPUS = 10_000_000
MAX_STEP = 2**62

class Attributes(BaseModel):
    # a port or GPU given as a number (`"port": 12`) is the string "12": sources disagree;
    # NaN and Infinity are refused (they would be stored as null)
    model_config = ConfigDict(extra="allow", coerce_numbers_to_str=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """`"step": true` is not step 1."""
        if isinstance(value, bool) and info.field_name is not None:
            field = cls.model_fields.get(info.field_name)
            if field is not None and _numeric(field.annotation):
                raise ValueError("must be a number, not true/false")
        return value


def _numeric(annotation: Any) -> bool:
    options = get_args(annotation) or (annotation,)
    return bool not in options and any(t in (int, float) for t in options)


class NoAttributes(Attributes):
    pass


# --- scheduler -------------------------------------------------------------------------


class JobSubmitted(Attributes):
    user: str | None = None
    queue: str | None = None
    priority: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)
    image: str | None = None
    code_version: str | None = None
    data_version: str | None = None
    config_hash: str | None = None
    gpus: int | None = Field(default=None, ge=0, le=MAX_GPUS)
    gpus_source: str | None = None
    """What said the GPU count (`allocation:...`, `request:...`): processors/gpus.py."""
    nodes_requested: int | None = Field(default=None, ge=0)
    mounts: list[str] = Field(default_factory=list)
    checkpoint_dir: str | None = None


class JobPending(Attributes):
    reason: str


class JobAdmitted(Attributes):
    """A queueing layer (Kueue, Volcano) let the job through; pods may still be starting."""

    queue: str | None = None
    stage: str | None = None  # quota_reserved, admitted, scheduled


class JobStarted(Attributes):
    nodes: list[str] = Field(default_factory=list)
    gpus: int | None = Field(default=None, ge=0, le=MAX_GPUS)
    gpus_source: str | None = None
    """What said the GPU count (`allocation:...`, `request:...`): processors/gpus.py."""
    gpu_ids: list[str] = Field(default_factory=list)
    # rank -> node; JSON object keys are strings, so ranks are strings here
    ranks: dict[str, str] = Field(default_factory=dict)
    image: str | None = None
    code_version: str | None = None
    data_version: str | None = None
    mounts: list[str] = Field(default_factory=list)


class JobEnded(Attributes):
    """Shared by the scheduler's terminal types: completed, failed, cancelled, timeout."""

    exit_code: int | None = Field(default=None, ge=-(2**31), le=2**31 - 1)
    reason: str | None = None
    failed_ranks: list[int] = Field(default_factory=list)
    failed_nodes: list[str] = Field(default_factory=list)
    step: int | None = Field(default=None, ge=0, le=MAX_STEP)


class JobRequeued(Attributes):
    reason: str | None = None
    next_attempt: int | None = Field(default=None, ge=0, le=1_000_000)


class JobPreempted(Attributes):
    reason: str | None = None
    by_job: str | None = None


# --- job (what the training process says) ----------------------------------------------


class JobStep(Attributes):
    step: int = Field(ge=0, le=MAX_STEP)
    step_time_s: float | None = Field(default=None, ge=0)
    samples_per_s: float | None = Field(default=None, ge=0)
    loss: float | None = None


class WorkerExited(Attributes):
    rank: int | None = Field(default=None, ge=0)
    exit_code: int | None = Field(default=None, ge=-(2**31), le=2**31 - 1)
    signal: str | None = None
    root_cause: bool | None = None


class CheckpointSaved(Attributes):
    step: int = Field(ge=0, le=MAX_STEP)
    path: str
    model_version: str | None = None
    data_version: str | None = None
    duration_s: float | None = Field(default=None, ge=0)
    size_bytes: int | None = Field(default=None, ge=0)


class CheckpointStarted(Attributes):
    """A save that started: a checkpoint only when the framework says it finished
    (`checkpoint.saved`), or a rerun restores it."""

    step: int = Field(ge=0, le=MAX_STEP)
    path: str | None = None


class CheckpointFailed(Attributes):
    step: int | None = Field(default=None, ge=0, le=MAX_STEP)
    path: str | None = None
    reason: str
    operation: str | None = None
    """`save` (default) or `restore`: a load that failed (a truncated shard, a missing
    file) means the rerun did not resume from it."""


class CheckpointRestored(Attributes):
    step: int = Field(ge=0, le=MAX_STEP)
    path: str | None = None


class NcclTimeout(Attributes):
    rank: int | None = Field(default=None, ge=0)
    seq_num: int | None = None
    op_type: str | None = None
    timeout_ms: int | None = Field(default=None, ge=0)


class NcclError(Attributes):
    rank: int | None = Field(default=None, ge=0)
    error: str | None = None
    device: str | None = None


# --- network / storage / node / change -------------------------------------------------


class PortState(Attributes):
    switch: str | None = None
    port: str | None = None
    peer: str | None = None


class LinkErrors(Attributes):
    switch: str | None = None
    port: str | None = None
    counter: str | None = None
    value: float | None = None


class StorageLatency(Attributes):
    filesystem: str | None = None
    target: str | None = None
    latency_ms: float = Field(ge=0)
    op: str | None = None


class StorageCapacity(Attributes):
    filesystem: str | None = None
    target: str | None = None
    used_pct: float = Field(ge=0, le=100)


class StorageIoError(Attributes):
    filesystem: str | None = None
    target: str | None = None
    error: str | None = None


class NodeXid(Attributes):
    xid: int = Field(ge=0)
    gpu: str | None = None
    pci: str | None = None
    detail: str | None = None


class NodeEcc(Attributes):
    gpu: str | None = None
    kind: str | None = None  # "sbe" / "dbe"
    count: int | None = Field(default=None, ge=0)


class NodeHealth(Attributes):
    """A DCGM health-watch finding for one GPU subsystem."""

    gpu: str | None = None
    system: str  # memory, pcie, nvlink, thermal, power, infoROM, ...
    status: str  # warning, failure


class GpuThrottled(Attributes):
    """GPU clocks held below what was asked (nvidia-smi / DCGM clock event reasons)."""

    gpu: str | None = None
    reason: str  # thermal, power_brake, hw_slowdown, sw_power_cap, sw_thermal, ...
    clock_mhz: float | None = Field(default=None, ge=0)
    expected_mhz: float | None = Field(default=None, ge=0)


class GpuThermal(Attributes):
    gpu: str | None = None
    temperature_c: float
    limit_c: float | None = None


class LinkDegraded(Attributes):
    """A PCIe or NVLink link running narrower or slower than it should."""

    gpu: str | None = None
    bus: str  # pcie, nvlink
    link: str | None = None
    width: int | None = Field(default=None, ge=0)
    expected_width: int | None = Field(default=None, ge=0)
    speed: str | None = None
    expected_speed: str | None = None


class StorageAvailability(Attributes):
    filesystem: str | None = None
    target: str | None = None
    server: str | None = None


class StorageThrottled(Attributes):
    filesystem: str | None = None
    target: str | None = None
    op: str | None = None
    exhausted: bool = False  # the client gave up retrying


class NodeReason(Attributes):
    reason: str | None = None


class NodePower(Attributes):
    """A node's power as its BMC logged it (IPMI SEL, Redfish): `off` (the node lost power),
    `on` (power restored), `degraded` (a supply lost its input or failed; the node runs on
    the others)."""

    state: str  # off, on, degraded
    cause: str | None = None  # power_down, ac_lost, psu_failure, power_cycle, ...
    sensor: str | None = None
    record: str | None = None  # the SEL record id


class ChangeApplied(Attributes):
    kind: str  # driver, firmware, image, scheduler_policy, switch_config, ...
    before: str | None = None
    after: str | None = None
    ticket: str | None = None


class TopologyLink(Attributes):
    node: str
    nic: str
    switch: str
    port: str


class OperatorNote(Attributes):
    author: str | None = None


@dataclass(frozen=True)
class EventType:
    name: str
    source: Source
    attributes: type[Attributes]
    job_scoped: bool = False
    """True when the event is meaningless without a job id (validated at ingest)."""
    doc: str = ""


_TYPES = [
    EventType("job.submitted", Source.scheduler, JobSubmitted, True, "Job accepted"),
    EventType("job.pending", Source.scheduler, JobPending, True, "Job waits; reason explains why"),
    EventType("job.admitted", Source.scheduler, JobAdmitted, True,
              "Queue admitted the job (quota reserved, gang scheduled)"),
    EventType("job.started", Source.scheduler, JobStarted, True, "Attempt placed on nodes"),
    EventType("job.requeued", Source.scheduler, JobRequeued, True, "Attempt ended, job requeued"),
    EventType("job.preempted", Source.scheduler, JobPreempted, True, "Attempt preempted"),
    EventType("job.completed", Source.scheduler, JobEnded, True, "Attempt finished successfully"),
    EventType("job.failed", Source.scheduler, JobEnded, True, "Attempt failed"),
    EventType("job.cancelled", Source.scheduler, JobEnded, True, "Attempt cancelled"),
    EventType("job.timeout", Source.scheduler, JobEnded, True, "Attempt hit its time limit"),
    EventType("job.step", Source.job, JobStep, True, "Training progress"),
    EventType("job.worker_exited", Source.job, WorkerExited, True, "A rank's process exited"),
    EventType("job.oom", Source.job, WorkerExited, True, "CUDA or host out of memory"),
    EventType("checkpoint.started", Source.job, CheckpointStarted, True,
              "Checkpoint save started (not a checkpoint until it finished)"),
    EventType("checkpoint.saved", Source.job, CheckpointSaved, True, "Checkpoint written"),
    EventType("checkpoint.failed", Source.job, CheckpointFailed, True, "Checkpoint write failed"),
    EventType("checkpoint.restored", Source.job, CheckpointRestored, True, "Checkpoint loaded"),
    EventType("comm.nccl_timeout", Source.job, NcclTimeout, True, "NCCL watchdog timeout"),
    EventType("comm.nccl_error", Source.job, NcclError, True, "NCCL error"),
    EventType("network.port_down", Source.network, PortState, doc="Switch or NIC port down"),
    EventType("network.port_up", Source.network, PortState, doc="Switch or NIC port up"),
    EventType("network.link_errors", Source.network, LinkErrors, doc="Link error counters"),
    EventType("storage.latency", Source.storage, StorageLatency, doc="I/O latency observed"),
    EventType("storage.capacity", Source.storage, StorageCapacity, doc="Fill level"),
    EventType("storage.io_error", Source.storage, StorageIoError, doc="I/O error"),
    EventType("storage.unavailable", Source.storage, StorageAvailability,
              doc="Server or target unreachable (NFS not responding, Lustre connection lost)"),
    EventType("storage.available", Source.storage, StorageAvailability,
              doc="Server or target reachable again"),
    EventType("storage.throttled", Source.storage, StorageThrottled,
              doc="Object store throttled requests (S3 SlowDown / 503)"),
    EventType("node.xid", Source.node, NodeXid, doc="NVIDIA Xid from the kernel log"),
    EventType("node.ecc", Source.node, NodeEcc, doc="GPU ECC error"),
    EventType("node.health", Source.node, NodeHealth, doc="DCGM health-watch finding"),
    EventType("node.throttled", Source.node, GpuThrottled,
              doc="GPU clocks throttled (thermal, power brake, HW slowdown)"),
    EventType("node.thermal", Source.node, GpuThermal, doc="GPU or node temperature high"),
    EventType("node.link_degraded", Source.node, LinkDegraded,
              doc="PCIe or NVLink link running below its width or speed"),
    EventType("node.not_ready", Source.node, NodeReason, doc="Node not ready"),
    EventType("node.ready", Source.node, NodeReason, doc="Node ready again"),
    EventType("node.drained", Source.node, NodeReason, doc="Node drained by scheduler or ops"),
    EventType("node.power", Source.node, NodePower,
              doc="Node power from its BMC (IPMI SEL, Redfish): off, on, degraded"),
    EventType("change.applied", Source.change, ChangeApplied, doc="Platform change applied"),
    EventType("operator.note", Source.operator, OperatorNote, doc="Human note"),
    EventType("topology.link", Source.topology, TopologyLink,
              doc="From this time on, node/nic is cabled to switch/port"),
]

REGISTRY: dict[str, EventType] = {t.name: t for t in _TYPES}


def lookup(type_name: str) -> EventType | None:
    return REGISTRY.get(type_name)


def validate_attributes(event_type: EventType, attributes: dict[str, Any]) -> dict[str, Any]:
    """Validate against the type's model; typed keys are normalised, extra keys kept."""
    model = event_type.attributes.model_validate(attributes)
    return model.model_dump(mode="json", exclude_none=True)
