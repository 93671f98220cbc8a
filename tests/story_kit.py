"""A library scenario fed through the shared pipeline, and people's commands on its
incidents at chosen times (postmortem and alert tests)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
import yaml

from jobtrail.learn import scenarios
from processors.incidents.model import Actor, Command, Incident, IncidentEvent, InvalidTransition
from processors.pipeline import Pipeline

SEVERITY = {"sev1": 1, "sev2": 2, "sev3": 3, "sev4": 4}


class Story:
    """A library scenario fed through the pipeline, and people's commands on its incidents."""

    def __init__(self, name: str, batch: int = 1, raw: str | None = None,
                 upto: int | None = None) -> None:
        text = raw if raw is not None else (scenarios.LIBRARY / f"{name}.yaml").read_text()
        self.scenario = scenarios.load_document(yaml.safe_load(text))
        self.pipeline = Pipeline(timedelta(seconds=30), scenarios.wiring(self.scenario),
                                 rules=self.scenario.rules)
        self.log: list[Any] = []
        self.fed = 0
        self.batch = batch
        self.feed(upto)
        self.clock = self.scenario.events[-1].time + timedelta(minutes=5)
        self.n = 0

    def feed(self, upto: int | None = None) -> None:
        events = self.scenario.events[self.fed:upto]
        for i in range(0, len(events), self.batch):
            self.log.extend(self.pipeline.process(events[i:i + self.batch]).incidents)
        self.fed += len(events)

    @property
    def main(self) -> Incident:
        """The worst incident (then the earliest)."""
        incs = self.pipeline.detector.incidents.values()
        return min(incs, key=lambda i: (SEVERITY.get(i.severity, 9), i.opened_at, i.id))

    def do(self, command: str, by: str = "ic-ana", incident: str = "",
           at: datetime | None = None, happened: datetime | None = None,
           **data: Any) -> Incident:
        """`at`: when it is recorded (the story's clock); `happened`: the command's `--at`."""
        self.n += 1
        self.clock = at or self.clock + timedelta(minutes=1)
        inc_id = incident or self.main.id
        out = self.pipeline.command(Command(
            command_id=f"cmd-{self.n}", incident_id=inc_id, command=command,  # type: ignore[arg-type]
            actor=Actor(kind="person", name=by), time=self.clock, data=data, at=happened))
        self.log.extend(out.incidents)
        return self.pipeline.detector.incidents[inc_id]

    def refused(self, command: str, by: str = "ic-ana", **data: Any) -> str:
        with pytest.raises(InvalidTransition) as caught:
            self.do(command, by, **data)
        return str(caught.value)



    def logs(self) -> dict[str, list[IncidentEvent]]:
        out: dict[str, list[IncidentEvent]] = {}
        for e in self.log:
            out.setdefault(e.incident_id, []).append(e)
        return out
