"""`jobtrail collect kubernetes`: follow the API server with list + watch (the official client)
and turn what it says into the same events the file adapter gives (`ingest/kubernetes.py`).

Per resource: list (paged) and submit every object, remember the list's resourceVersion, then
watch from it with bookmarks (`allowWatchBookmarks`), each watch bounded by `timeoutSeconds`
and resumed from the last resourceVersion seen (an object's or a bookmark's). `410 Gone` (the
version is older than the server keeps) drops the cursor and relists; any other failure
(connection refused, reset, 5xx) waits with capped exponential backoff and resumes from the
cursor. The cursor is saved (atomically, `HOME/collect/kubernetes.json`) only after what it
covers was submitted, so a restart resumes where the last run stopped; what is seen twice (a
relist, a redelivery after a crash between submit and save) has the same event ids (the
adapter's `k8s-<uid>-<count>`, conditions keyed by their transition time) and is stored once.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ingest.adapters import Adapter, Context, run
from ingest.canonical import Decoded

log = logging.getLogger("jobtrail.collect.kubernetes")


@dataclass(frozen=True)
class Resource:
    """One watched collection: core/batch through their typed APIs, the rest as custom
    objects (`group`/`version`/`plural`)."""

    name: str
    kind: str
    api: str  # "core", "batch" or "custom"
    method: str = ""
    group: str = ""
    version: str = ""
    plural: str = ""


RESOURCES: dict[str, Resource] = {r.name: r for r in (
    Resource("events", "Event", "core", "list_event_for_all_namespaces"),
    Resource("jobs", "Job", "batch", "list_job_for_all_namespaces"),
    Resource("pytorchjobs", "PyTorchJob", "custom", group="kubeflow.org", version="v1",
             plural="pytorchjobs"),
    Resource("mpijobs", "MPIJob", "custom", group="kubeflow.org", version="v2beta1",
             plural="mpijobs"),
    Resource("workloads", "Workload", "custom", group="kueue.x-k8s.io", version="v1beta1",
             plural="workloads"),
    Resource("jobsets", "JobSet", "custom", group="jobset.x-k8s.io", version="v1alpha2",
             plural="jobsets"),
    Resource("volcanojobs", "Job", "custom", group="batch.volcano.sh", version="v1alpha1",
             plural="jobs"),
)}
"""Pods are not watched: their failures reach jobtrail as Events and job conditions."""

Submit = Callable[[Sequence[Decoded]], None]


class Cursor:
    """resourceVersion per resource, saved atomically after what it covers is submitted."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        try:
            self.versions: dict[str, str] = json.loads(path.read_text())
        except (OSError, ValueError):
            self.versions = {}

    def get(self, name: str) -> str | None:
        with self._lock:
            return self.versions.get(name)

    def set(self, name: str, version: str | None) -> None:
        with self._lock:
            if version is None:
                self.versions.pop(name, None)
            else:
                self.versions[name] = version
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.versions, sort_keys=True))
            os.replace(tmp, self.path)


class Backoff:
    def __init__(self, first_s: float = 0.5, cap_s: float = 30.0) -> None:
        self.first_s, self.cap_s, self.next_s = first_s, cap_s, first_s

    def wait(self, stop: threading.Event) -> None:
        stop.wait(self.next_s)
        self.next_s = min(self.cap_s, self.next_s * 2)

    def reset(self) -> None:
        self.next_s = self.first_s


class Collector:
    def __init__(self, api_client: Any, adapter: Adapter, submit: Submit, cursor: Cursor, *,
                 cluster: str = "default", watch_timeout_s: int = 300,
                 page_size: int = 500) -> None:
        self.api_client = api_client
        self.adapter = adapter
        self.submit = submit
        self.cursor = cursor
        self.cluster = cluster
        self.watch_timeout_s = watch_timeout_s
        self.page_size = page_size
        self.stop = threading.Event()
        self.last_activity = time.monotonic()
        self._submit_lock = threading.Lock()

    # --- the API ----------------------------------------------------------------------------

    def _list_function(self, resource: Resource) -> tuple[Callable[..., Any], dict[str, Any]]:
        from kubernetes import client

        if resource.api == "core":
            return getattr(client.CoreV1Api(self.api_client), resource.method), {}
        if resource.api == "batch":
            return getattr(client.BatchV1Api(self.api_client), resource.method), {}
        custom = client.CustomObjectsApi(self.api_client)
        return custom.list_cluster_custom_object, {
            "group": resource.group, "version": resource.version, "plural": resource.plural}

    def _relist(self, resource: Resource) -> str:
        """Every object, page by page; returns the list's resourceVersion."""
        function, fixed = self._list_function(resource)
        token: str | None = None
        version = ""
        for _ in range(100_000):  # pages; a cluster with 50 M objects is not one we list
            kwargs: dict[str, Any] = {**fixed, "limit": self.page_size,
                                      "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            page = json.loads(function(**kwargs).data)
            items = [{**item, "kind": item.get("kind") or resource.kind}
                     for item in page.get("items") or []]
            self._deliver(resource, [{"type": "ADDED", "object": i} for i in items])
            meta = page.get("metadata") or {}
            version = str(meta.get("resourceVersion") or version)
            token = meta.get("continue") or None
            if not token:
                break
        return version

    def _deliver(self, resource: Resource, events: list[dict[str, Any]]) -> None:
        if not events:
            return
        text = "\n".join(json.dumps(e) for e in events)
        ctx = Context(producer=f"kubernetes@{self.cluster}", observed_at=datetime.now(UTC),
                      cluster=self.cluster, origin=f"watch/{resource.name}",
                      kind=resource.kind)
        decoded = run(self.adapter, text, ctx)
        with self._submit_lock:
            self.last_activity = time.monotonic()
            self.submit(decoded)
            self.last_activity = time.monotonic()

    # --- following --------------------------------------------------------------------------

    def follow(self, resource: Resource) -> None:
        """List + watch `resource` until `stop` is set."""
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        backoff = Backoff()
        function, fixed = self._list_function(resource)
        for _ in range(10_000_000):  # watches end every watch_timeout_s; bounded regardless
            if self.stop.is_set():
                return
            try:
                version = self.cursor.get(resource.name)
                if version is None:
                    version = self._relist(resource)
                    self.cursor.set(resource.name, version)
                    log.info("%s: listed at resourceVersion %s", resource.name, version)
                stream = watch.Watch()
                for event in stream.stream(function, **fixed, resource_version=version,
                                           allow_watch_bookmarks=True,
                                           timeout_seconds=self.watch_timeout_s):
                    raw = event.get("raw_object") or {}
                    seen = str((raw.get("metadata") or {}).get("resourceVersion") or "")
                    if event.get("type") != "BOOKMARK":
                        obj = {**raw, "kind": raw.get("kind") or resource.kind}
                        self._deliver(resource, [{"type": event["type"], "object": obj}])
                    if seen:
                        self.cursor.set(resource.name, seen)
                        version = seen
                    if self.stop.is_set():
                        stream.stop()
                backoff.reset()
            except ApiException as exc:
                if exc.status == 410:
                    log.warning("%s: resourceVersion %s is gone (410): relisting",
                                resource.name, self.cursor.get(resource.name))
                    self.cursor.set(resource.name, None)
                    continue
                log.warning("%s: API error %s, retrying in %.1f s", resource.name, exc.status,
                            backoff.next_s)
                backoff.wait(self.stop)
            except Exception as exc:  # connection refused/reset, a truncated stream
                log.warning("%s: %s: %s, retrying in %.1f s", resource.name,
                            type(exc).__name__, exc, backoff.next_s)
                backoff.wait(self.stop)

    def run(self, resources: Sequence[Resource], *, until_idle_s: float = 0) -> None:
        """Follow every resource on its own thread until stopped (or, with `until_idle_s`,
        until nothing arrived for that long: backfills and tests)."""
        self.last_activity = time.monotonic()
        threads = [threading.Thread(target=self.follow, args=(r,), name=f"watch-{r.name}",
                                    daemon=True) for r in resources]
        for thread in threads:
            thread.start()
        try:
            while any(t.is_alive() for t in threads):
                # idle: nothing delivered for that long, and no delivery in progress
                if until_idle_s and not self._submit_lock.locked() and \
                        time.monotonic() - self.last_activity > until_idle_s:
                    break
                self.stop.wait(0.2)
        finally:
            self.stop.set()
            for thread in threads:
                thread.join(timeout=self.watch_timeout_s + 10)
