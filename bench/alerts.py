"""How fast notifications are decided and delivered, against baselines in the same run.

- decide: `--incidents` incident logs (the ib-flap-64 story cloned, `--per-minute` opened
  per minute of event time) against `--subscriptions` subscriptions: decisions and incidents
  per second, and the cost in units of one fold of the same logs (what any reader of the
  log pays anyway: the baseline);
- deliver: one delivery pass of the due webhooks to a local receiver (decided, signed, sent,
  recorded in chDB): per-message latency p50/p95 and messages per second, against posting
  the same bodies with the same HTTP client and no store (the ratio).

    python -m bench.alerts --incidents 1000 --subscriptions 20
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any


def _logs(incidents: int, per_minute: int) -> dict[str, list[Any]]:
    from jobtrail.learn import scenarios
    story = scenarios.load(scenarios.LIBRARY / "ib-flap-64.yaml")
    log, _ = scenarios.run(story)
    step = timedelta(minutes=1) / per_minute
    out: dict[str, list[Any]] = {}
    for i in range(incidents):
        inc = f"inc-bench{i:06d}"
        out[inc] = [e.model_copy(update={"incident_id": inc, "id": f"{e.id}-{i}",
                                         "time": e.time + step * i}) for e in log]
    return out


def _subscriptions(n: int) -> list[Any]:
    from processors.notify.model import Matcher, Subscription

    teams = ["network", "training-infra", "storage", "hardware-ops"]
    return [Subscription.model_validate({
        "id": f"sub-bench{i:03d}", "name": f"s{i}", "owner": f"team:{teams[i % 4]}",
        "matchers": [Matcher.parse(f"team={teams[i % 4]}").model_dump()]
        + ([Matcher.parse("severity=~sev[12]").model_dump()] if i % 2 else []),
        "channel": {"kind": "webhook", "target": "secret:hook", "secret": "secret:signing"},
        "repeat_s": 0, "rate_limit": {"count": 100000, "per_s": 60}}) for i in range(n)]


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_decide(logs: dict[str, list[Any]], subs: list[Any]) -> dict[str, float]:
    from processors.incidents.model import fold
    from processors.notify.decide import decide

    now = max(e.time for log in logs.values() for e in log)
    started = time.perf_counter()
    for log in logs.values():
        fold(log)
    folded = time.perf_counter() - started
    started = time.perf_counter()
    decisions = decide(subs, [], logs, now)
    took = time.perf_counter() - started
    return {"incidents": len(logs), "subscriptions": len(subs), "decisions": len(decisions),
            "decide_s": round(took, 3), "decisions_per_s": round(len(decisions) / took),
            "incidents_per_s": round(len(logs) / took, 1), "one_fold_s": round(folded, 3),
            "decide_in_folds": round(took / folded, 2)}


def bench_deliver(logs: dict[str, list[Any]], subs: list[Any], limit: int) -> dict[str, float]:
    from jobtrail.alerts.egress import Policy
    from jobtrail.alerts.secrets import Secrets, new_signing_secret
    from jobtrail.alerts.store import AlertStore
    from jobtrail.alerts.worker import Deliverer, http_post
    from jobtrail.config import Settings
    from jobtrail.store import Store
    from processors.incidents.model import IncidentEvent
    from processors.notify import channels
    from processors.notify.decide import decide
    from tests.alerts_kit import receiver

    loopback = Policy.from_hosts(["127.0.0.1"])  # the same policy the deliverer runs under
    home = Path(tempfile.mkdtemp(prefix="bench-alerts-"))
    store = Store.connect(f"chdb://{home / 'chdb'}", "bench")
    store.migrate()
    chosen = dict(list(logs.items())[:limit])
    events: list[IncidentEvent] = [e for log in chosen.values() for e in log]
    from processors.pipeline import Outputs

    store.write(Outputs(incidents=events))
    alerts = AlertStore(store)
    with receiver() as box:
        secrets = Secrets(home, env={})
        secrets.put("hook", f"{box.url}/hook")
        secrets.put("signing", new_signing_secret())
        for sub in subs[:2]:
            alerts.put_subscription(sub, by="bench")
        now = datetime.now(UTC)
        alerts.write_decisions(decide(alerts.subscriptions(), [], chosen, now))
        deliverer = Deliverer(alerts, secrets, Settings(home=home, alert_hosts=("127.0.0.1",)))
        started = time.perf_counter()
        jobs, cancelled = deliverer.prepare(now)
        sent = deliverer.deliver(jobs, now)
        deliverer.finish(sent, cancelled, now)
        took = time.perf_counter() - started
        latencies = [ms for _, _, ms in sent]
        bodies = [(channels.render("webhook", job.msg), job.msg["id"]) for job in jobs]
        raw = []
        started = time.perf_counter()
        for body, msg_id in bodies:
            t0 = time.perf_counter()
            http_post(f"{box.url}/raw", body, {"webhook-id": msg_id}, policy=loopback)
            raw.append((time.perf_counter() - t0) * 1000)
        raw_took = time.perf_counter() - started
    n = len(sent)
    return {"messages": n, "pass_s": round(took, 3),
            "messages_per_s": round(n / took, 1) if took else 0.0,
            "send_p50_ms": round(_pct(latencies, 0.5), 2) if latencies else 0.0,
            "send_p95_ms": round(_pct(latencies, 0.95), 2) if latencies else 0.0,
            "raw_post_p95_ms": round(_pct(raw, 0.95), 2) if raw else 0.0,
            "raw_posts_per_s": round(len(raw) / raw_took, 1) if raw_took else 0.0,
            "ratio_to_raw": round((n / took) / (len(raw) / raw_took), 3) if raw and took
            else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--incidents", type=int, default=1000)
    parser.add_argument("--per-minute", type=int, default=1000)
    parser.add_argument("--subscriptions", type=int, default=20)
    parser.add_argument("--deliver", type=int, default=200,
                        help="incidents whose notifications the delivery pass sends")
    args = parser.parse_args()
    logs = _logs(args.incidents, args.per_minute)
    subs = _subscriptions(args.subscriptions)
    print("decide:", bench_decide(logs, subs))
    print("deliver:", bench_deliver(logs, subs, args.deliver))


if __name__ == "__main__":
    main()
