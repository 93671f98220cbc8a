"""Grafana alerting webhook -> canonical events, both formats Grafana has sent.

- **Unified alerting** (Grafana 8+): an Alertmanager-shaped body (`receiver`, `status`,
  `alerts[]` with `labels`, `annotations`, `startsAt`, `endsAt`, `fingerprint`, `values`) plus
  Grafana's `orgId`, `title`, `state`, `message`; `version` is `"1"`. Each alert is read exactly
  like an Alertmanager alert through the same mapping file (keyed by `alertname`); a single
  query value (`values: {"B": 3}`) is offered to the mapping as `{value}`.
- **Legacy alerting** (Grafana <= 7, `ruleName`, `state`, `evalMatches[]`, `tags`): the rule name
  is the `alertname`, `tags` and each match's `tags` are the labels, the match's value is
  `{value}`. One event per match (a rule evaluates many series, e.g. one per switch port);
  `state: ok` with no matches yields one resolved event from the rule's tags. The legacy body
  carries no time: the event time is the receive time (`attributes.time_source = observed`)
  and the id is the content plus the receive minute, so a retry within a minute is the same
  event. `no_data`, `paused` and `pending` are not failures and are dead-lettered with that
  reason (visible, not silently dropped).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ingest.alertmanager import DEFAULT_MAPPING, alert_record
from ingest.base import Adapter, Context, Reject, json_object, raw_evidence
from ingest.canonical import ParseError

_LEGACY_STATUS = {"alerting": "firing", "ok": "resolved"}


def _legacy(payload: dict[str, Any], ctx: Context,
            mapping: dict[str, dict[str, Any]]) -> list[dict[str, Any] | Reject]:
    state = str(payload.get("state") or "")
    status = _LEGACY_STATUS.get(state)
    if status is None:
        return [Reject("state", f"legacy state {state!r} is not a firing or resolved alert",
                       raw_evidence(payload))]
    name = str(payload.get("ruleName") or "")
    if not name:
        return [Reject("ruleName", "missing", raw_evidence(payload))]
    if not isinstance(payload.get("tags") or {}, dict):
        return [Reject("tags", "tags must be an object of name: value", raw_evidence(payload))]
    tags = {str(k): str(v) for k, v in (payload.get("tags") or {}).items()}
    matches = payload.get("evalMatches") or []
    if not isinstance(matches, list):
        return [Reject("evalMatches", "not a list", raw_evidence(payload))]
    minute = ctx.observed_at.replace(second=0, microsecond=0).isoformat()
    series = matches or [{"tags": {}}]
    out: list[dict[str, Any] | Reject] = []
    for i, match in enumerate(series):
        if not isinstance(match, dict):
            out.append(Reject(f"evalMatches[{i}]", "a match must be an object",
                              raw_evidence(match)))
            continue
        if not isinstance(match.get("tags") or {}, dict):
            out.append(Reject(f"evalMatches[{i}].tags", "tags must be an object of name: value",
                              raw_evidence(match)))
            continue
        labels = {**tags, **{str(k): str(v) for k, v in (match.get("tags") or {}).items()},
                  "alertname": name}
        if match.get("value") is not None:
            labels["value"] = str(match["value"])
        content = json.dumps([payload.get("ruleId"), state, labels, minute], sort_keys=True)
        fingerprint = hashlib.sha256(content.encode()).hexdigest()[:16]
        alert = {"status": status, "labels": labels, "fingerprint": fingerprint,
                 "annotations": {"summary": str(payload.get("title") or name),
                                 "description": str(payload.get("message") or "")},
                 "startsAt": ctx.observed_at.isoformat(), "endsAt": ctx.observed_at.isoformat()}
        record = alert_record(alert, i, {}, ctx, mapping, prefix="grafana-legacy")
        if isinstance(record, dict):
            record["id"] = f"grafana-legacy-{fingerprint}-{status}"
            record["attributes"].update({"time_source": "observed",
                                         "rule_id": payload.get("ruleId"),
                                         "raw": raw_evidence({**payload, "evalMatches": [match]})})
        out.append(record)
    return out


def parse(text: str, ctx: Context,
          mapping: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any] | Reject]:
    payload = json_object(text, "the webhook body")
    table = mapping or DEFAULT_MAPPING
    if "alerts" in payload:
        alerts = payload["alerts"]
        if not isinstance(alerts, list):
            raise ParseError("alerts", "not a list")
        out = [alert_record(alert, i, payload, ctx, table, prefix="grafana")
               for i, alert in enumerate(alerts)]
        for record in out:
            if isinstance(record, dict):
                record["attributes"]["org_id"] = payload.get("orgId")
        return out
    if "ruleName" in payload or "evalMatches" in payload:
        return _legacy(payload, ctx, table)
    raise ParseError("alerts", "neither a unified (alerts[]) nor a legacy (ruleName, "
                     "evalMatches) Grafana alert body")


ADAPTER = Adapter("grafana", parse, doc="Grafana alerting webhook (unified and legacy)")
