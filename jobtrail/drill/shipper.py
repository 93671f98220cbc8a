"""The drill's training-log shipper: each attempt's `train-<restarts>.log` through the
training-log adapter with the job and attempt the file name gives (what a site's log shipper
does), each line tagged with the drill."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from ingest.adapters import Context, registry, run
from jobtrail.collect.slurm_cursor import Sink
from schemas.events import Event


class TrainingLogShipper:
    def __init__(self, sink: Sink, run_dir: Path, *, project: str, cluster: str,
                 job_id: Callable[[], str], drill_id: str) -> None:
        self.sink, self.run_dir, self.project, self.cluster = sink, run_dir, project, cluster
        self.drill_id = drill_id
        self.job_id = job_id
        self.offsets: dict[str, int] = {}
        self.adapter = registry()["training-log"]

    def step(self) -> int:
        sent = 0
        for path in sorted(self.run_dir.glob("train-*.log")):
            m = re.fullmatch(r"train-(\d+)\.log", path.name)
            if not m:
                continue
            with path.open("rb") as f:
                f.seek(self.offsets.get(path.name, 0))
                chunk = f.read()
            end = chunk.rfind(b"\n") + 1
            if not end:
                continue
            self.offsets[path.name] = self.offsets.get(path.name, 0) + end
            ctx = Context(producer="drill-shipper", observed_at=datetime.now(UTC),
                          cluster=self.cluster, project=self.project, job_id=self.job_id(),
                          attempt=int(m.group(1)) + 1, origin=str(path))
            records = [r.model_copy(update={"attributes": {**r.attributes,
                                                          "drill": self.drill_id}})
                       if isinstance(r, Event) and self.drill_id else r
                       for r in run(self.adapter, chunk[:end].decode("utf-8", "replace"), ctx)]
            if records:
                self.sink.submit(records)
                sent += len(records)
        return sent
