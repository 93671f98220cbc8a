"""The failure-mode library (`bench/failure_modes.yaml`) as typed data: each mode's share,
truth, first signals, symptoms and recovery, and the multi-attempt patterns' weights.
Validated on load: an unknown key, signal or symptom kind is an error naming it."""

from __future__ import annotations

import random
from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

LIBRARY = Path(__file__).with_name("failure_modes.yaml")

SignalKind = Literal["xid", "ecc_dbe", "thermal", "port_down", "link_errors", "nic_down",
                     "node_down", "power_off", "storage_io", "storage_unavailable",
                     "client_enospc", "dcgm_fail", "change", "maintenance_drain"]
SymptomKind = Literal["nccl", "nccl_net", "exit", "oom", "nan"]
EntityKind = Literal["gpu", "node", "port", "nic", "target", "attempt"]
Pattern = Literal["single", "chain", "crash_loop", "fallback_unfinished",
                  "fallback_restore_failed", "resubmit_new_id"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Report(_Strict):
    component: str = ""
    category: str = ""
    count: int = Field(ge=1)
    printed_share: float | None = None
    source: Literal["llama3", "supplement"] = "llama3"


class TruthSpec(_Strict):
    klass: str = Field(alias="class")
    entity: EntityKind
    owner: str
    """A team, or `job`: the job's own team (project:<project>)."""


class Signal(_Strict):
    kind: SignalKind
    at: int = 0
    """Seconds after the fault (negative: a warning before it)."""
    chance: float = 1.0
    xid: tuple[int, ...] = ()
    count: int = 1
    up_after: tuple[int, int] | None = None
    error: str = "EIO"
    target: str = ""
    test: str = ""
    what: str = ""


class Symptom(_Strict):
    kind: SymptomKind
    at: tuple[int, int] = (0, 0)
    """Seconds after the fault, drawn between the two."""
    message: str | tuple[str, ...] = ""
    all_ranks: bool = False


class Mode(_Strict):
    name: str
    report: Report
    truth: TruthSpec
    signals: tuple[Signal, ...] = ()
    symptoms: tuple[Symptom, ...] = ()
    ends: Literal["failed", "node_fail", "preempted"]
    restart: Literal["requeue", "manual"]
    drain: str = ""

    @property
    def job_own(self) -> bool:
        return self.truth.owner == "job"


class Library(_Strict):
    source: dict[str, str | int]
    supplement_note: str = ""
    modes: tuple[Mode, ...]
    patterns: dict[Pattern, int]

    def mode(self, name: str) -> Mode:
        for mode in self.modes:
            if mode.name == name:
                return mode
        raise KeyError(f"no failure mode {name!r} in {LIBRARY.name}")

    def draw(self, rng: random.Random, where: str = "any") -> Mode:
        """A mode by its weight; `where`: `hardware` (a fault of one GPU, for a crash
        loop), `own` (the job's own failure, FAILED without a requeue)."""
        pool = [m for m in self.modes if where == "any"
                or (where == "hardware" and m.truth.entity == "gpu" and m.signals
                    and m.signals[-1].kind == "xid")
                or (where == "own" and m.restart == "manual")]
        return rng.choices(pool, weights=[m.report.count for m in pool])[0]

    def pattern(self, rng: random.Random) -> Pattern:
        names = sorted(self.patterns)
        return rng.choices(names, weights=[self.patterns[n] for n in names])[0]


@cache
def library(path: Path = LIBRARY) -> Library:
    return Library.model_validate(yaml.safe_load(path.read_text()))
