"""JSON Schema export of the envelope and every type's attributes (`jobtrail schema export`).

`jobtrail-event.schema.json` validates any canonical event: the envelope, with `attributes`
chosen by `type` through if/then branches, so a Go or Rust producer gets the same answer as
our pydantic models for the typed keys (extra attribute keys are allowed, as here).
"""

from __future__ import annotations

from typing import Any

from schemas.events import SCHEMA_VERSION, Event
from schemas.registry import REGISTRY

_BASE = "https://jobtrail.dev/schemas"


def export() -> dict[str, dict[str, Any]]:
    envelope = Event.model_json_schema(mode="validation")
    envelope["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    envelope["$id"] = f"{_BASE}/v{SCHEMA_VERSION}/jobtrail-event.schema.json"
    envelope["title"] = "jobtrail canonical event"
    envelope["properties"]["type"]["enum"] = sorted(REGISTRY)
    # producers may omit the id (derived from the natural key) and source (from the type)
    envelope["required"] = [r for r in envelope.get("required", []) if r not in ("id", "source")]
    documents: dict[str, dict[str, Any]] = {}
    branches = []
    for name, entry in sorted(REGISTRY.items()):
        attrs = entry.attributes.model_json_schema(mode="validation")
        attrs["$id"] = f"{_BASE}/v{SCHEMA_VERSION}/attributes/{name}.schema.json"
        attrs["title"] = f"{name} attributes"
        attrs["description"] = entry.doc
        documents[f"attributes/{name}.schema.json"] = attrs
        then: dict[str, Any] = {"properties": {"attributes": {"$ref": attrs["$id"]}}}
        if entry.job_scoped:
            then["required"] = ["job_id", "project"]
        branches.append({"if": {"properties": {"type": {"const": name}}}, "then": then})
    envelope["allOf"] = branches
    documents["jobtrail-event.schema.json"] = envelope
    return documents
