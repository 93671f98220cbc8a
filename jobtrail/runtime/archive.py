"""The store as the processors' archive: evicted incidents are read back from `incident_log`
(`processors/incidents/archive.py`). One per cluster pipeline: the prior incidents a
postmortem draft lists are that cluster's."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from jobtrail.store import Store
from processors.incidents.model import IncidentEvent


class StoreArchive:
    def __init__(self, store: Store, cluster: str) -> None:
        self.store = store
        self.cluster = cluster

    def log(self, incident_id: str) -> Sequence[IncidentEvent]:
        return self.store.incident_log(incident_id)

    def on_entities(self, entities: Collection[str]) -> Sequence[str]:
        return [i for i in self.store.incidents_on(entities)
                if self.store.incident_cluster(i) in (self.cluster, None)]
