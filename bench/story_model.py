"""What a generated story is: the attempts as they really happened (`Run`), the events each
source delivers (canonical, and the raw lines and documents of the source's own files), and
the truth an SRE would write down (`Truth`)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from schemas.events import Event, Source
from schemas.registry import REGISTRY

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
PROJECT = "llm-pretrain"
CLUSTERS = ("cluster-a", "cluster-b")
GPU_BUS = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
"""The PCI bus of GPU 0-7 on the bench's board (the topology's `gpu_pci` says the same)."""


def node(n: int) -> str:
    return f"node-{n:03d}"


def port(n: int) -> str:
    """The rail-0 leaf port of node n on the sample fat tree."""
    return f"leaf-{2 * ((n - 1) // 16) + 1:02d}/p{(n - 1) % 16 + 1}"


def attempt_key(job: str, attempt: int) -> str:
    return f"{PROJECT}/{job}/{attempt}"


@dataclass(frozen=True)
class Truth:
    klass: str
    entity: str
    owner: str
    jobs: tuple[str, ...]
    lost_gpu_hours: float | None = None
    recovery: str = ""
    mode: str = ""
    cluster: str = CLUSTERS[0]
    pattern: str = ""


@dataclass
class Save:
    step: int
    started: datetime
    finished: datetime | None
    """None: the save never finished (the attempt died writing it)."""


@dataclass
class Run:
    """One attempt as it really happened."""

    cluster: str
    job: str
    attempt: int
    nodes: list[int]
    submitted: datetime
    start: datetime
    after: str = "first"
    """What it follows: first, failure (its start-up is that failure's restart),
    preemption (its start-up is no failure's cost)."""
    restored: int | None = None
    """The step it resumed from (after a load that failed, the one it loaded next)."""
    restore_failed: int | None = None
    resumed: datetime | None = None
    """Its first step."""
    steps: list[tuple[datetime, int]] = field(default_factory=list)
    saves: list[Save] = field(default_factory=list)
    symptom: datetime | None = None
    """Its first failure symptom (t_f); None: it did not fail."""
    end: datetime | None = None
    outcome: str = "running"  # completed, failed, node_fail, preempted, running
    requeued: bool = False
    pending: list[tuple[datetime, str]] = field(default_factory=list)
    """The scheduler's pending marks after it ended (held: Resources)."""
    truth: int | None = None
    """Index of the story's truth its failure belongs to."""

    @property
    def gpus(self) -> int:
        return 8 * len(self.nodes)

    @property
    def key(self) -> str:
        return attempt_key(self.job, self.attempt)

    def last_step(self) -> int:
        return self.steps[-1][1] if self.steps else (self.restored or 0)


FileKey = tuple[str, str, str, str]
"""(adapter, cluster, job, node) of a raw file: what its shipper says about it."""


@dataclass
class Story:
    seed: int
    mode: str
    klass: str
    pattern: str = "single"
    events: list[tuple[str, Event]] = field(default_factory=list)
    truth: list[Truth] = field(default_factory=list)
    herrings: list[str] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    lines: dict[FileKey, list[tuple[datetime, int, str]]] = field(default_factory=dict)
    docs: dict[FileKey, list[dict[str, Any]]] = field(default_factory=dict)
    lineage: list[Run] = field(default_factory=list)
    """The victim job's attempts (a resubmission under a new job id included)."""
    fault_times: list[datetime] = field(default_factory=list)
    undeliverable: Counter[str] = field(default_factory=Counter)
    """Canonical event types this checkout's registry does not know (not delivered)."""
    _n: int = 0

    def add(self, source: str, type_: str, at: datetime, cluster: str = CLUSTERS[0],
            **fields: Any) -> Event | None:
        if type_ not in REGISTRY:
            self.undeliverable[type_] += 1
            return None
        attributes = fields.pop("attributes", {})
        natural = json.dumps([self.seed, cluster, type_, at.isoformat(), fields, attributes],
                             sort_keys=True, default=str)
        digest = hashlib.sha256(natural.encode()).hexdigest()[:16]
        job = fields.get("job_id")
        event = Event(id=f"s{self.seed}-{digest}", type=type_,
                      source=Source(REGISTRY[type_].source), time=at, cluster=cluster,
                      project=PROJECT if job else "", observed_at=at, attributes=attributes,
                      **fields)
        self.events.append((source, event))
        return event

    def line(self, key: FileKey, at: datetime, text: str) -> None:
        """A line of a source's own file (`key`: adapter, cluster, job, node)."""
        self._n += 1
        self.lines.setdefault(key, []).append((at, self._n, text))

    def doc(self, key: FileKey, record: dict[str, Any]) -> None:
        """A record of a source's own JSON document (sacct, an Alertmanager webhook)."""
        self.docs.setdefault(key, []).append(record)


# --- how sources write their lines --------------------------------------------------------


def iso(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def slurmctld(story: Story, cluster: str, at: datetime, text: str) -> None:
    story.line(("slurmctld", cluster, "", ""), at, f"[{iso(at)[:-1]}] {text}")


def kernel(story: Story, cluster: str, n: int, at: datetime, text: str) -> None:
    story.line(("node-log", cluster, "", node(n)), at, f"{iso(at)} {node(n)} kernel: {text}")


def train(story: Story, run: Run, n: int, at: datetime, text: str, stamped: bool = True) -> None:
    """A line of the training output of `run`'s job on node n (one file per job and node,
    the attempts appended, as torchrun's per-node logs are)."""
    story.line(("training-log", run.cluster, run.job, node(n)), at,
               f"{iso(at)} {text}" if stamped else text)


def hostlist(nodes: list[int]) -> str:
    """node-[001-004,009] (Slurm's compressed form)."""
    nums = sorted(nodes)
    if len(nums) == 1:
        return node(nums[0])
    parts, start, prev = [], nums[0], nums[0]
    for n in [*nums[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        parts.append(f"{start:03d}" if start == prev else f"{start:03d}-{prev:03d}")
        if n is not None:
            start = prev = n
    return "node-[" + ",".join(parts) + "]"


def seconds(delta: timedelta) -> float:
    return delta.total_seconds()
