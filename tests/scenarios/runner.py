"""Scenario files: input events in arrival order, and the rows an SRE expects to see."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from jobtrail.learn import sample

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Scenario:
    name: str
    project: str
    records: list[dict[str, Any]]
    expect: set[tuple[str, str, str, str]]

    @property
    def jobs(self) -> list[str]:
        return sorted({r["job_id"] for r in self.records if r.get("job_id")})

    def jsonl(self) -> str:
        return "\n".join(json.dumps(r) for r in self.records) + "\n"


def load(name: str) -> Scenario:
    data = yaml.safe_load((HERE / f"{name}.yaml").read_text())
    records = []
    for event in data["events"]:
        record = {"cluster": sample.CLUSTER, **event}
        if record.get("job_id"):
            record.setdefault("project", data["project"])
        records.append(record)
    expect = {(e["job"], e["event"], e["relation"], e["link_path"]) for e in data["expect"]}
    return Scenario(data["name"], data["project"], records, expect)


def attributed(rows_by_job: dict[str, list[dict[str, Any]]]) -> set[tuple[str, str, str, str]]:
    """The non-self rows, as (job, event, relation, link path); fails on a doubled row."""
    out: list[tuple[str, str, str, str]] = [
        (job, r["event_id"], r["relation"], r["link_path"])
        for job, rows in rows_by_job.items() for r in rows if r["relation"] != "self"]
    assert len(out) == len(set(out)), f"duplicate rows: {sorted(out)}"
    return set(out)
