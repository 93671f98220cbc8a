"""`kubectl describe pod` container blocks (part of the kubernetes adapter, split from
`ingest/kubectl_text.py`, which reads them inside a pasted table or describe; the adapter in
`ingest/kubernetes.py` and the auto-detection in `ingest/auto.py` use them too).

`State:`/`Last State:` Terminated with a Reason (`OOMKilled` -> `job.oom`, `Error` ->
`job.worker_exited` with its exit code) at its `Finished:` time; without one, stamped when
read (`time_source: observed`).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from ingest.base import Context, Reject, raw_evidence
from ingest.kubernetes_objects import job_of_pod
from ingest.redact import clip

_STATE = re.compile(r"^(?P<indent>\s*)(?P<which>State|Last State):\s+(?P<state>\w+)\s*$")
_FIELD = re.compile(r"^\s+(?P<key>Reason|Exit Code|Started|Finished|Signal):\s+"
                    r"(?P<value>.*\S)\s*$")


def has_states(text: str) -> bool:
    """A describe's container block (`State:  Terminated`) without an Events table."""
    return any(_STATE.match(line) for line in text.splitlines()[:400] if len(line) < 500)


def container_states(lines: list[str], ctx: Context) -> list[dict[str, Any] | Reject]:
    """`State:` / `Last State:` Terminated blocks of `kubectl describe pod`."""

    name = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Name:")), "")
    out: list[dict[str, Any] | Reject] = []
    i = 0
    while i < len(lines):
        m = _STATE.match(lines[i]) if len(lines[i]) < 500 else None
        i += 1
        if not m or m["state"] != "Terminated":
            continue
        start = i - 1
        fields: dict[str, str] = {}
        while i < len(lines) and (f := _FIELD.match(lines[i]) if len(lines[i]) < 500
                                  else None):
            fields[f["key"]] = f["value"]
            i += 1
        reason = fields.get("Reason", "")
        type_ = {"OOMKilled": "job.oom", "Error": "job.worker_exited"}.get(reason)
        if type_ is None:
            continue
        block = "\n".join(lines[start:i])
        job = ctx.job_id or (job_of_pod(name) if name else "")
        if not (ctx.project and job):
            out.append(Reject("job_id", "a describe block without the pod's Name: ship it "
                              "with --project and --job", raw_evidence(block)))
            continue
        when, source = ctx.observed_at.isoformat(), "observed"
        if fields.get("Finished"):
            try:
                when = datetime.strptime(fields["Finished"], "%a, %d %b %Y %H:%M:%S %z"
                                         ).isoformat()
                source = "line"
            except ValueError:
                pass
        attributes: dict[str, Any] = {"reason": reason, "time_source": source,
                                      "state": m["which"], "raw": raw_evidence(block)}
        if fields.get("Exit Code", "").lstrip("-").isdigit():
            attributes["exit_code"] = int(fields["Exit Code"])
        if type_ == "job.oom":
            attributes["kind"] = "host"
        record: dict[str, Any] = {
            "id": f"kubectl-{ctx.cluster}-{job}-{name}-{m['which']}-{reason}-"
                  f"{fields.get('Finished', '')}",
            "type": type_, "time": when, "project": ctx.project, "job_id": job,
            "severity": "error", "message": clip(f"{m['which']}: Terminated ({reason})", 500),
            "attributes": attributes}
        if name:
            record.update({"scope": "rank", "entity": name})
        if ctx.attempt is not None:
            record["attempt"] = ctx.attempt
        out.append(record)
    return out
