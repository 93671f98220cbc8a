"""The Kubeflow training operator's own log (part of the kubernetes adapter), as `kubectl
logs` prints it: logrus text (`time="2024-02-21T09:30:16Z" level=info msg="..."
job=default.test-tfjob`), zap JSON (`{"level":"info","ts":...,"msg":"..."}`) and zap console
(`2022-02-28T09:49:55.707Z	ERROR	Reconcile PyTorchJob error	{"pytorchjob": "default/x"}`,
`1.7085078165525672e+09	DEBUG	...`).

What the operator logs of a job's life (kubeflow/trainer `pytorchjob_controller.go`:
`logrus.Info("PyTorchJob %s is created.")`, `"PyTorchJob %s is successfully completed."`,
and the condition messages `... is running.`, `... is restarting because N Worker
replica(s) failed.`, `... is failed because ...`) -> `job.submitted`, `job.completed`,
`job.started`, `job.requeued`, `job.failed`, at the line's time. Its reconcile chatter (the
per-replica counts `PyTorchJob=x, ReplicaType=Master expected=1, running=1, ...`,
`Reconciling for job x`, its own errors updating a status) is no event of the job's.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from ingest.base import Context, raw_evidence
from ingest.redact import clip

_LOGRUS = re.compile(r'^\s*time="(?P<time>[^"]{1,64})" level=(?P<level>\w{1,10}) '
                     r'msg="(?P<msg>(?:[^"\\\n]|\\.){0,4000})"(?P<rest>[^\n]{0,2000})$')
_ZAP_CONSOLE = re.compile(r"^\s*(?P<time>\d{4}-\d\d-\d\dT[\d:.]{8,20}(?:Z|[+-]\d\d:?\d\d)|"
                          r"\d\.\d{1,20}e\+\d\d)\t(?P<level>[A-Z]{4,7})\t(?:[\w./-]{1,200}\t)?"
                          r"(?P<msg>[^\t\n]{1,4000})(?:\t(?P<fields>\{[^\n]{0,4000}\}))?\s*$")
_KINDS = r"(?P<kind>PyTorchJob|TFJob|MPIJob|XGBoostJob|PaddleJob|JAXJob|MXJob|TrainJob)"
_LIFE = re.compile(_KINDS + r" (?:(?P<ns>[a-z0-9][\w.-]{0,62})/)?(?P<name>[a-z0-9][\w.-]{0,252}) "
                   r"(?P<what>is created|(?:is )?successfully completed|is running|"
                   r"is restarting|is failed|has failed)(?: because (?P<why>[^\n]{1,300}?))?\.?$")
_TYPES = {"is created": "job.submitted", "successfully completed": "job.completed",
          "is successfully completed": "job.completed", "is running": "job.started",
          "is restarting": "job.requeued", "is failed": "job.failed", "has failed": "job.failed"}
_FIELD_JOB = re.compile(r"\bjob=(?P<ns>[a-z0-9][\w-]{0,62})[./](?P<name>[\w.-]{1,252})")


def _line(line: str) -> tuple[str, str, str, dict[str, Any]] | None:
    """(time, level, msg, fields) of an operator log line, or None."""
    if len(line) > 16_000:
        return None
    if (m := _LOGRUS.match(line)) is not None:
        fields: dict[str, Any] = {}
        if job := _FIELD_JOB.search(m["rest"]):
            fields = {"namespace": job["ns"], "name": job["name"]}
        return m["time"], m["level"].lower(), m["msg"].replace('\\"', '"'), fields
    if (m := _ZAP_CONSOLE.match(line)) is not None:
        try:
            fields = json.loads(m["fields"]) if m["fields"] else {}
        except ValueError:
            fields = {}
        return m["time"], m["level"].lower(), m["msg"], fields if isinstance(fields, dict) else {}
    text = line.strip()
    if text.startswith("{") and '"msg"' in text and '"level"' in text:
        try:
            doc = json.loads(text)
        except ValueError:
            return None
        if isinstance(doc, dict) and "msg" in doc and ("ts" in doc or "time" in doc):
            return str(doc.get("ts") or doc.get("time")), str(doc.get("level")), \
                str(doc["msg"]), doc
    return None


def recognise(text: str) -> bool:
    """Whether `text` is the operator's log: most of its first lines are its lines."""
    lines = [line for line in text[:100_000].splitlines()[:200] if line.strip()]
    read = sum(1 for line in lines if _line(line) is not None)
    return bool(lines) and read * 2 >= len(lines)


def _when(stamp: str, ctx: Context) -> tuple[str, str]:
    try:
        if re.fullmatch(r"\d\.\d+e\+\d\d|\d{9,11}(?:\.\d+)?", stamp):
            return datetime.fromtimestamp(float(stamp), tz=UTC).isoformat(), "line"
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        return (when if when.tzinfo else when.replace(tzinfo=UTC)).isoformat(), "line"
    except (ValueError, OverflowError):
        return ctx.observed_at.isoformat(), "observed"


def records(text: str, ctx: Context) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for line in text.splitlines():
        found = _line(line)
        if found is None:
            continue
        stamp, _level, msg, fields = found
        m = _LIFE.search(msg.strip())
        if m is None:
            continue
        type_ = _TYPES[m["what"]]
        named = str(fields.get(m["kind"].lower()) or "")
        namespace = m["ns"] or fields.get("namespace") or (named.split("/")[0] if "/" in named
                                                          else "")
        project = ctx.project or str(namespace)
        if not project:
            continue  # a job of no known namespace: the shipper must name the project
        when, source = _when(stamp, ctx)
        attrs: dict[str, Any] = {"time_source": source, "k8s_object": f"{m['kind']}/{m['name']}",
                                 "source": "training-operator", "raw": raw_evidence(line)}
        if m["why"]:
            attrs["reason"] = clip(m["why"], 200)
        record: dict[str, Any] = {
            "type": type_, "time": when, "project": project, "job_id": ctx.job_id or m["name"],
            "severity": "error" if type_ == "job.failed" else "warning"
            if type_ == "job.requeued" else "info", "message": clip(msg, 500),
            "attributes": attrs}
        if ctx.attempt is not None:
            record["attempt"] = ctx.attempt
        out.append(record)
    return out
