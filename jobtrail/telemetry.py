"""Typed internal events: one `emit()` gives the log line and the counter.

Metric names are stable and documented in docs/operations.md. Counters and gauges are
process-local and exposed at `/metrics` by `jobtrail serve` (and by `jobtrail worker` when
`JOBTRAIL_WORKER_PORT` is set) in Prometheus text format.
"""

from __future__ import annotations

import logging
from collections import Counter
from threading import Lock

log = logging.getLogger("jobtrail")

METRICS = {
    "events_received": "Records received by ingest (HTTP, file, Kafka)",
    "events_stored": "Canonical events newly stored in ClickHouse",
    "events_duplicate": "Redelivered events dropped because their id was already stored",
    "events_dead_lettered": "Inputs sent to the dead-letter path, by stage",
    "store_retries": "ClickHouse writes retried after an error",
    "incidents_opened": "Incidents opened by the detector",
    "incident_open_latency_ms": "Sum of signal-observed to incident-stored times (ms); "
                                "divide by incidents_opened",
    "incident_events": "Incident events appended to the log, by kind",
    "incident_commands": "Incident commands applied, by command",
}

GAUGES = {
    "store_up": "1 while ClickHouse answers, 0 from its first failed try until it answers again",
    "shards_held": "Input partitions whose processor state this worker holds",
    "shard_position": "Last input offset inside a shard's state, by stream",
}

_counters: Counter[tuple[str, str]] = Counter()
_gauges: dict[tuple[str, str], float] = {}
_lock = Lock()


def emit(name: str, value: int = 1, **labels: str) -> None:
    if name not in METRICS:
        raise KeyError(f"undocumented metric {name!r}")
    if not value:
        return
    label = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    with _lock:
        _counters[(name, label)] += value
    log.debug("%s %s +%d", name, label, value)


def gauge(name: str, value: float, **labels: str) -> None:
    """Set a gauge (a value now, not a count)."""
    if name not in GAUGES:
        raise KeyError(f"undocumented gauge {name!r}")
    label = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    with _lock:
        _gauges[(name, label)] = value


def snapshot() -> dict[tuple[str, str], int]:
    with _lock:
        return dict(_counters)


def gauges() -> dict[tuple[str, str], float]:
    with _lock:
        return dict(_gauges)


def prometheus() -> str:
    lines = []
    for name, doc in METRICS.items():
        lines.append(f"# HELP jobtrail_{name}_total {doc}")
        lines.append(f"# TYPE jobtrail_{name}_total counter")
    for (name, label), value in sorted(snapshot().items()):
        lines.append(f"jobtrail_{name}_total{{{label}}} {value}" if label
                     else f"jobtrail_{name}_total {value}")
    for name, doc in GAUGES.items():
        lines.append(f"# HELP jobtrail_{name} {doc}")
        lines.append(f"# TYPE jobtrail_{name} gauge")
    for (name, label), number in sorted(gauges().items()):
        text = f"{number:g}"
        lines.append(f"jobtrail_{name}{{{label}}} {text}" if label else f"jobtrail_{name} {text}")
    return "\n".join(lines) + "\n"
