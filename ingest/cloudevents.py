"""CloudEvents 1.0 -> canonical events: structured and batched JSON (HTTP), structured mode
over Kafka (the message value is the structured event), and binary mode over HTTP (`ce-*`
headers, see `from_binary`).

- A CloudEvent whose `type` is one of ours (`job.step`), optionally prefixed `io.jobtrail.`,
  maps directly: `data` holds the canonical fields (`project`, `job_id`, `attempt`, `scope`,
  `entity`, `node`, `severity`, `message`, `attributes`); `time` is the CloudEvent's `time`
  (else `data.time`).
- Any other type maps through the mapping file (`JOBTRAIL_CLOUDEVENTS_MAPPING`, same template
  language as the Alertmanager mapping): the entry names our `type` and fills `scope`,
  `entity`, `node`, `project`, `job_id`, `severity`, `message` and `attributes` from the
  `data` object's top-level fields and the CloudEvent's `subject` and `source` (as
  `{ce_subject}`, `{ce_source}`). Unknown types are dead-lettered naming the type.
- The id is `ce-` + a hash of (`source`, `id`): CloudEvents promises that pair is unique, so a
  redelivered CloudEvent is the same event. `specversion` must be `1.0`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ingest.base import Adapter, Context, Reject, fill, raw_evidence
from ingest.canonical import ParseError, loads
from schemas.registry import REGISTRY

PREFIX = "io.jobtrail."
_CANONICAL_FIELDS = ("project", "job_id", "attempt", "scope", "entity", "node", "severity",
                     "message", "attributes", "cluster")
_REQUIRED = ("specversion", "id", "source", "type")


def ce_id(source: str, ident: str) -> str:
    return "ce-" + hashlib.sha256(f"{source}\0{ident}".encode()).hexdigest()[:32]


def _data(ce: dict[str, Any]) -> Any:
    if "data_base64" in ce:
        try:
            return loads(base64.b64decode(ce["data_base64"]))
        except ValueError:
            raise ParseError("data_base64", "not base64-encoded JSON") from None
    data = ce.get("data")
    if isinstance(data, str) and "json" in str(ce.get("datacontenttype", "")):
        try:
            return loads(data)
        except ValueError:
            raise ParseError("data", "datacontenttype says JSON but data is not") from None
    return data


def _one(ce: Any, where: str, mapping: Mapping[str, dict[str, Any]],
         observed: datetime) -> dict[str, Any] | Reject:
    if not isinstance(ce, dict):
        return Reject(where, "a CloudEvent must be a JSON object", raw_evidence(ce))
    for key in _REQUIRED:
        if not ce.get(key):
            return Reject(f"{where}.{key}", "missing (required by CloudEvents 1.0)",
                          raw_evidence(ce))
    if str(ce["specversion"]) != "1.0":
        return Reject(f"{where}.specversion", f"unsupported {ce['specversion']!r} (1.0 only)",
                      raw_evidence(ce))
    try:
        data = _data(ce)
    except ParseError as exc:
        return Reject(f"{where}.{exc.field}", exc.reason, raw_evidence(ce))
    data = data if isinstance(data, dict) else {"value": data}
    ce_type = str(ce["type"])
    ours = ce_type[len(PREFIX):] if ce_type.startswith(PREFIX) else ce_type
    when = ce.get("time") or data.get("time")
    base: dict[str, Any] = {"id": ce_id(str(ce["source"]), str(ce["id"])),
                            "time": when or observed.isoformat()}
    extra = {"ce_type": ce_type, "ce_source": str(ce["source"]), "raw": raw_evidence(ce),
             # `time` is optional in CloudEvents 1.0: without it, when it was received
             "time_source": "line" if when else "observed"}
    if ce.get("subject"):
        extra["ce_subject"] = str(ce["subject"])
    if ours in REGISTRY:
        record = {**base, "type": ours,
                  **{k: data[k] for k in _CANONICAL_FIELDS if data.get(k) is not None}}
        attributes = record.get("attributes")
        if attributes is not None and not isinstance(attributes, dict):
            return Reject(f"{where}.data.attributes", "must be an object", raw_evidence(ce))
        record["attributes"] = {**(attributes or {}), **extra}
        return record
    entry = mapping.get(ce_type)
    if entry is None:
        return Reject(f"{where}.type", f"CloudEvent type {ce_type!r} is not a jobtrail type and "
                      "has no entry in the CloudEvents mapping file", raw_evidence(ce))
    values = {str(k): str(v) for k, v in data.items() if not isinstance(v, dict | list)}
    values.update({"ce_source": str(ce["source"]), "ce_subject": str(ce.get("subject") or "")})
    try:
        fields = {k: fill(entry[k], values, k) for k in _CANONICAL_FIELDS if k in entry}
    except ParseError as exc:
        return Reject(f"{where}.data.{exc.field}", exc.reason, raw_evidence(ce))
    attributes = fields.pop("attributes", {})
    return {**base, "type": entry["type"], **fields,
            "attributes": {**attributes, **extra}}


def parse(text: str, ctx: Context,
          mapping: Mapping[str, dict[str, Any]] | None = None) -> list[dict[str, Any] | Reject]:
    try:
        payload = loads(text)
    except ValueError as exc:
        raise ParseError("", f"not JSON: {exc}") from None
    table = mapping or {}
    if isinstance(payload, list):  # application/cloudevents-batch+json
        return [_one(ce, f"[{i}]", table, ctx.observed_at) for i, ce in enumerate(payload)]
    return [_one(payload, "event", table, ctx.observed_at)]


def from_binary(headers: Mapping[str, str], body: bytes) -> str:
    """A binary-mode HTTP CloudEvent (`ce-*` headers, the body is `data`) as structured JSON."""
    ce: dict[str, Any] = {key[3:].lower(): value for key, value in headers.items()
                          if key.lower().startswith("ce-")}
    content_type = headers.get("Content-Type", "")
    if "json" in content_type:
        try:
            ce["data"] = loads(body or b"null")
        except ValueError:
            raise ParseError("data", "Content-Type says JSON but the body is not") from None
    else:
        ce["data_base64"] = base64.b64encode(body).decode()
    return json.dumps(ce)


def load_mapping(path: str) -> dict[str, dict[str, Any]]:
    from schemas.documents import load_yaml

    with open(path) as handle:
        data = load_yaml(handle.read(), what=path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the mapping is an object keyed by CloudEvent type")
    for name, entry in data.items():
        if not isinstance(entry, dict) or entry.get("type") not in REGISTRY:
            raise ValueError(f"{path}: {name}: `type` must be a jobtrail event type")
    return data


ADAPTER = Adapter("cloudevents", parse, doc="CloudEvents 1.0 (structured, batched, Kafka "
                  "structured mode)")
