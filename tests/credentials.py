"""The credential corpus: kinds of secret x places they turn up in, and a scanner.

Each kind is a realistic, seeded fake credential with the *needles* whose presence anywhere
would be a leak (the random part; for a URL the password; for a PEM key its body). Each
placement turns a secret into one HTTP request (canonical events, dead-letter material,
source adapters) or an incident command. `leaks(blob, secrets)` finds needles, and any
16-character fragment of them, in whatever a runtime stored, produced, logged or exported.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_RNG = random.Random(11)
_ALNUM = string.ascii_letters + string.digits


def _rand(n: int, alphabet: str = _ALNUM) -> str:
    return "".join(_RNG.choice(alphabet) for _ in range(n))


@dataclass(frozen=True)
class Secret:
    kind: str
    value: str
    needles: tuple[str, ...]
    one_line: bool = True


def _token(kind: str, prefix: str, body: str) -> Secret:
    return Secret(kind, prefix + body, (body,))


def _kinds() -> list[Secret]:
    aws_secret = _rand(40, _ALNUM + "/+")
    password = _rand(18)
    pem_body = "\n".join(_rand(64, _ALNUM + "+/") for _ in range(4))
    jwt = ".".join(["eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9", "eyJ" + _rand(40), _rand(43)])
    return [
        _token("aws-access-key-id", "AKIA", _rand(16, string.ascii_uppercase + string.digits)),
        Secret("aws-secret-key", aws_secret, (aws_secret,)),
        _token("github-pat", "ghp_", _rand(36)),
        _token("github-fine-grained", "github_pat_", _rand(22) + "_" + _rand(59)),
        _token("gitlab-pat", "glpat-", _rand(20)),
        _token("slack-bot", "xoxb-", f"{_rand(12, string.digits)}-{_rand(13, string.digits)}-"
                                    f"{_rand(24)}"),
        _token("openai", "sk-proj-", _rand(48)),
        _token("huggingface", "hf_", _rand(34)),
        _token("google-api-key", "AIza", _rand(35, _ALNUM + "_-")),
        _token("stripe-live", "sk_live_", _rand(24)),
        Secret("jwt", jwt, (jwt.split(".", 1)[1],)),
        Secret("url-password", f"postgres://svc_train:{password}@db.internal:5432/runs",
               (password,)),
        Secret("private-key", f"-----BEGIN RSA PRIVATE KEY-----\n{pem_body}\n"
                              "-----END RSA PRIVATE KEY-----",
               tuple(pem_body.splitlines()), one_line=False),
    ]


KINDS = _kinds()
T = "2026-11-30T09:00:00Z"


def _step(**extra: Any) -> dict[str, Any]:
    record = {"type": "job.step", "time": T, "cluster": "cluster-a", "project": "llm-pretrain",
              "job_id": "job-cred", "attempt": 1, "attributes": {"step": 1}}
    record.update(extra)
    return record


@dataclass(frozen=True)
class Request:
    path: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Placement:
    name: str
    build: Callable[[Secret, str], Request | dict[str, Any] | None]
    """A request, a command (dict: command, by, command_id, data), or None when the
    combination cannot be expressed (a multi-line key in an HTTP header)."""


def _event(secret: Secret, tag: str, **extra: Any) -> Request:
    return Request("/v1/events", json.dumps(_step(id=f"cred-{tag}", **extra)).encode())


def _merged(secret: Secret, tag: str, attributes: dict[str, Any]) -> Request:
    return _event(secret, tag, attributes={"step": 1, **attributes})


JOB_HEADERS = {"X-Jobtrail-Project": "llm-pretrain", "X-Jobtrail-Job": "job-cred",
               "X-Jobtrail-Attempt": "1", "X-Jobtrail-Node": "node-001",
               "X-Jobtrail-Cluster": "cluster-a"}


def _alert(secret: Secret, tag: str) -> Request:
    body = {"version": "4", "status": "firing", "receiver": "jobtrail",
            "alerts": [{"status": "firing",
                        "labels": {"alertname": "IBPortDown", "switch": "leaf-01", "port": "p1",
                                   "severity": "critical", "cluster": "cluster-a"},
                        "annotations": {"summary": f"port down, see {secret.value}"},
                        "startsAt": T, "fingerprint": f"fp-{tag}"}]}
    return Request("/v1/ingest/alertmanager", json.dumps(body).encode())


def _k8s(secret: Secret, tag: str) -> Request:
    body = {"kind": "Event", "apiVersion": "v1",
            "metadata": {"name": f"w.{tag}", "namespace": "llm-pretrain", "uid": f"u-{tag}"},
            "involvedObject": {"kind": "Pod", "namespace": "llm-pretrain", "name": "w-0"},
            "reason": "BackOff", "type": "Warning", "count": 1,
            "message": f"Back-off restarting; env had {secret.value}",
            "firstTimestamp": T, "lastTimestamp": T}
    return Request("/v1/ingest/kubernetes", json.dumps(body).encode())


def _cloudevent(secret: Secret, tag: str) -> Request:
    body = {"specversion": "1.0", "id": f"ce-{tag}", "source": "urn:trainer", "time": T,
            "type": "io.jobtrail.job.step",
            "data": {"project": "llm-pretrain", "job_id": "job-cred", "attempt": 1,
                     "message": f"resumed with {secret.value}", "attributes": {"step": 2}}}
    return Request("/v1/ingest/cloudevents", json.dumps(body).encode(),
                   {"Content-Type": "application/cloudevents+json"})


def _log(path: str, text: str, headers: dict[str, str] | None = None) -> Request:
    return Request(path, text.encode(), headers or {})


PLACEMENTS = [
    Placement("event.message", lambda s, t: _event(s, t, message=f"loading with {s.value}")),
    Placement("event.attribute", lambda s, t: _merged(s, t, {"note": s.value})),
    Placement("event.nested-attribute",
              lambda s, t: _merged(s, t, {"cfg": {"env": {"vars": ["x", s.value]}}})),
    Placement("event.attribute-key", lambda s, t: _merged(s, t, {s.value: 1})),
    Placement("event.sensitive-key", lambda s, t: _merged(s, t, {"DB_PASS": s.value})),
    Placement("event.entity", lambda s, t: _event(s, t, scope="rank", entity=s.value)),
    Placement("event.node", lambda s, t: _event(s, t, node=s.value)),
    Placement("event.job_id", lambda s, t: _event(s, t, job_id=f"job-{s.value}")),
    Placement("event.cluster", lambda s, t: _event(s, t, cluster=f"c-{s.value}")),
    Placement("event.producer-header", lambda s, t: None if not s.one_line else Request(
        "/v1/events", json.dumps(_step(id=f"cred-{t}")).encode(),
        {"X-Jobtrail-Producer": s.value})),
    Placement("event.id", lambda s, t: Request("/v1/events", json.dumps(
        _step(id=f"evt-{t}-{s.value}")).encode())),
    Placement("event.escaped-json", lambda s, t: _event(
        s, t, message=json.dumps({"cfg": json.dumps({"token": s.value, "url": s.value})}))),
    Placement("event.long-message", lambda s, t: _event(s, t, message="x" * 490 + s.value)),
    Placement("dead.broken-json", lambda s, t: Request(
        "/v1/events", ('{"type": "job.step", "message": ' + json.dumps(s.value)).encode())),
    Placement("dead.invalid-field", lambda s, t: _event(
        s, t, message=s.value, attributes={"step": -1})),
    Placement("dead.value-in-reason", lambda s, t: _event(s, t, time=s.value)),
    Placement("dead.escaped-slashes", lambda s, t: Request("/v1/events", (
        '{"message": "' + s.value.replace("/", "\\/").replace("\n", "\\n") + '",').encode())),
    Placement("adapter.training-log", lambda s, t: _log(
        "/v1/ingest/training-log", f"2026-11-30T09:00:01Z [Rank 0] NCCL WARN NET/IB : "
                                   f"error with {s.value}\n", JOB_HEADERS)),
    Placement("adapter.training-log-raw-cut", lambda s, t: _log(
        "/v1/ingest/training-log", "2026-11-30T09:00:02Z step=5 loss=2.0 " + "y" * 4080 +
        f" {s.value}\n", JOB_HEADERS)),
    Placement("adapter.alertmanager", _alert),
    Placement("adapter.node-log", lambda s, t: _log(
        "/v1/ingest/node-log", f"Nov 30 09:00:03 node-001 kernel: NVRM: Xid (PCI:0000:3b:00): "
                               f"79, pid=1, GPU has fallen off the bus. {s.value}\n")),
    Placement("adapter.kubernetes", _k8s),
    Placement("adapter.cloudevents", _cloudevent),
    Placement("command.note", lambda s, t: {"command": "note",
                                            "command_id": f"n-{t}",
                                            "data": {"text": f"rotated {s.value}"}}),
    Placement("command.action-title", lambda s, t: {"command": "add_action",
                                                    "command_id": f"a-{t}",
                                                    "data": {"title": f"revoke {s.value}"}}),
    Placement("command.by", lambda s, t: {"command": "note", "by": s.value,
                                          "command_id": f"b-{t}", "data": {"text": "hi"}}),
    Placement("command.command-id", lambda s, t: {"command": "note",
                                                  "command_id": f"c-{t}-{s.value}",
                                                  "data": {"text": "hi"}}),
    Placement("command.nested-data", lambda s, t: {"command": "note",
                                                   "command_id": f"d-{t}",
                                                   "data": {"text": "x",
                                                            "extra": {"k": [s.value]}}}),
]


@dataclass(frozen=True)
class Case:
    placement: Placement
    secret: Secret

    @property
    def tag(self) -> str:
        return f"{self.placement.name}.{self.secret.kind}"


def corpus() -> list[Case]:
    """Every placement with a fresh secret of every kind (one secret per case, so a leak
    names its case). The same corpus on every call, whatever ran before it in the session:
    a test that passes alone passes in CI's order (the breadth of random keys is
    tests/ingest/test_redact.py's)."""
    _RNG.seed(11)
    return [Case(placement, secret) for placement in PLACEMENTS for secret in _kinds()]


def fragments(needle: str, size: int = 16) -> set[str]:
    if len(needle) <= size:
        return {needle}
    return {needle[i:i + size] for i in range(0, len(needle) - size + 1, 4)}


def leaked(blob: str, cases: list[Case]) -> list[Case]:
    """The cases any fragment of whose needles appears in `blob`. JSON escaping (`\\/`,
    `\\n`, `\\"`) is undone first, so an escaped copy counts too."""
    plain = blob.replace("\\/", "/").replace("\\n", "\n").replace('\\"', '"')
    return [case for case in cases
            if any(part in blob or part in plain for needle in case.secret.needles
                   for part in fragments(needle))]


def report(tried: list[Case], leaks: list[Case], skipped: int) -> str:
    """Tried/leaked per placement and per kind, for the test output and the closing note."""
    lines = [f"credential corpus: {len(tried)} tried, {len(leaks)} leaked, {skipped} "
             "combinations not expressible"]
    for label, key in (("placement", lambda c: c.placement.name),
                       ("kind", lambda c: c.secret.kind)):
        groups: dict[str, list[int]] = {}
        for case in tried:
            counts = groups.setdefault(key(case), [0, 0])
            counts[0] += 1
            counts[1] += case in leaks
        lines.append(f"  by {label}: " + ", ".join(f"{k} {v[1]}/{v[0]}"
                                                 for k, v in sorted(groups.items())))
    return "\n".join(lines)
