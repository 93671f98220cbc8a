"""The alerts stage: the decide pass (incident logs + subscriptions -> the outbox) and the
delivery pass (the outbox -> channels, every attempt recorded).

Both are restart-safe because their state is in the store: decisions have deterministic ids
and are only written when new or changed; a delivery's retry schedule is its attempt rows
(`next_at`), so a killed worker resumes where the rows say. Delivery is at-least-once: a
crash between a send and its record sends again with the same `webhook-id`, which receivers
deduplicate on (the Standard Webhooks contract).

Retries: 408, 429, 5xx and network errors are retried with exponential backoff (10 s
doubling, capped at 1 h, with a deterministic jitter of 50-100 %), or after `Retry-After`
when the endpoint sends it; given up after `delivery_attempts` (8) or 24 h. Other 4xx answers
are not retried. 410 Gone disables the subscription (the owner sees why in
`jobtrail subscriptions`).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import smtplib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from email.utils import parsedate_to_datetime
from typing import Any

from jobtrail.alerts import egress
from jobtrail.alerts.links import ACK_LINK_TTL_S, ack_link, unsubscribe_token
from jobtrail.alerts.secrets import MissingSecret, Secrets
from jobtrail.alerts.store import AlertStore
from processors.incidents.model import IncidentEvent
from processors.notify import channels
from processors.notify.decide import decide
from processors.notify.message import Links, message
from processors.notify.model import Decision, Subscription

log = logging.getLogger("jobtrail.alerts")
BASE_S, CAP_S, MAX_AGE = 10.0, 3600.0, timedelta(hours=24)
RETRIED = {408, 429}


@dataclass
class Attempt:
    notification_id: str
    subscription_id: str
    attempt: int
    at: datetime
    status: str  # sent, failed (retried at next_at), gave_up, gone, cancelled, test
    code: int = 0
    latency_ms: int = 0
    error: str = ""
    next_at: datetime | None = None
    channel: str = ""
    message_ids: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Reply:
    code: int
    headers: Mapping[str, str]
    error: str = ""
    own: bool = False
    """The error is the subscriber's own configuration (a missing secret reference), not
    something about the network: shown as is."""


@dataclass
class Job:
    """One message to send: a notification, or a digest of several."""

    sub: Subscription
    ids: list[str]
    number: int
    first: datetime
    msg: dict[str, Any]


HttpSend = Callable[[str, bytes, Mapping[str, str]], Reply]
MailSend = Callable[[EmailMessage], None]


def http_post(url: str, body: bytes, headers: Mapping[str, str], *,
              policy: egress.Policy | None = None,
              resolver: egress.Resolver = egress.system_resolver,
              timeout_s: float = 10.0) -> Reply:
    """POST under the channel policy (default: public addresses only), to the checked
    address, never following a redirect (`jobtrail.alerts.egress`)."""
    answer = egress.post(url, body, headers, policy=policy or egress.Policy(),
                         resolver=resolver, timeout_s=timeout_s)
    return Reply(answer.code, answer.headers, answer.error)


def smtp_sender(settings: Any, env: Mapping[str, str]) -> MailSend:
    def send(mail: EmailMessage) -> None:
        if not settings.smtp:
            raise OSError("no SMTP relay configured (JOBTRAIL_SMTP=host:port)")
        host, _, port = settings.smtp.rpartition(":")
        with smtplib.SMTP(host or settings.smtp, int(port or 25), timeout=10) as smtp:
            if settings.smtp_starttls:
                smtp.starttls()
            user = env.get("JOBTRAIL_SMTP_USER")
            if user:
                smtp.login(user, env.get("JOBTRAIL_SMTP_PASSWORD", ""))
            smtp.send_message(mail)

    return send


def backoff(notification_id: str, attempt: int) -> float:
    """Seconds before retry `attempt + 1`: exponential, capped, with a jitter that is a
    function of the notification and attempt (deterministic, yet spread across ids)."""
    raw = min(CAP_S, BASE_S * 2.0 ** (attempt - 1))
    digest = hashlib.sha256(f"{notification_id}:{attempt}".encode()).digest()
    return raw * (0.5 + digest[0] / 512)


def retry_after(headers: Mapping[str, str], now: datetime) -> float | None:
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    if not value:
        return None
    try:
        return max(0.0, float(str(value)))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - now).total_seconds())


def group_logs(events: Sequence[IncidentEvent]) -> dict[str, list[IncidentEvent]]:
    out: dict[str, list[IncidentEvent]] = {}
    for e in events:
        out.setdefault(e.incident_id, []).append(e)
    return out


def decide_pass(alerts: AlertStore, now: datetime | None = None,
                since: datetime | None = None) -> tuple[int, int]:
    """Decide from the incident logs (all, or those that changed after `since` and the
    open unacknowledged sev1s); returns (decisions, rows written)."""
    now = now or datetime.now(UTC)
    if since is None:
        logs = group_logs(alerts.store.load_incident_log())
        scope = None
    else:
        scope = alerts.changed_since(since)
        logs = {i: alerts.store.incident_log(i) for i in scope}
    decisions = decide(alerts.subscriptions(), alerts.silences(), logs, now,
                       watermark=alerts.watermark() if since is not None else None,
                       seen=alerts.seen_at(scope))
    return len(decisions), alerts.write_decisions(decisions, scope)


class Deliverer:
    def __init__(self, alerts: AlertStore, secrets: Secrets, settings: Any,
                 http: HttpSend | None = None, mail: MailSend | None = None, *,
                 resolver: egress.Resolver = egress.system_resolver) -> None:
        self.alerts = alerts
        self.secrets = secrets
        self.settings = settings
        self.policy = egress.Policy.from_hosts(settings.alert_hosts)
        self.last_detail = ""
        """The full reason of the last failed attempt (for an operator's CLI; a subscriber
        reads `egress.describe`'s one sentence)."""
        self.http: HttpSend = http or functools.partial(
            http_post, policy=self.policy, resolver=resolver,
            timeout_s=getattr(settings, "alert_timeout_s", 10.0))
        self.mail = mail or smtp_sender(settings, secrets.env)
        self.links = Links(settings.public_url, settings.grafana_url)
        self._seen: dict[str, datetime] = {}

    def _message(self, sub: Subscription, rows: list[dict[str, Any]],
                 logs: dict[str, list[IncidentEvent]], now: datetime | None = None,
                 first: datetime | None = None) -> dict[str, Any]:
        """The message of a notification (or digest). Made as of its first attempt
        (`first`), so a retry sends the same body: the same age, the same links."""
        head = _decision(rows[0])
        if head.incident_id not in logs:
            logs[head.incident_id] = self.alerts.store.incident_log(head.incident_id)
        if head.incident_id not in self._seen:
            self._seen.update(self.alerts.seen_at([head.incident_id]))
        msg = message(sub, head, logs[head.incident_id], self.links,
                      transitions=[_decision(r) for r in rows] if head.digest_key else (),
                      now=first or now, seen=self._seen.get(head.incident_id))
        if msg["incident"]["status"] == "open" and not head.digest_key:
            # from the decision's time, so a retry sends the same body; a message sent late
            # (a backlog, a replay) gets a day from the hour it goes out
            expires = int(head.time.timestamp()) + ACK_LINK_TTL_S
            if now is not None and expires < now.timestamp() + 3600:
                expires = int(now.timestamp()) // 3600 * 3600 + ACK_LINK_TTL_S
            msg["links"]["ack"] = ack_link(self.settings.public_url, self.secrets,
                                           head.incident_id, sub.id, expires)
        if head.digest_key:
            msg["id"] = "dig-" + hashlib.sha256(f"{sub.id}\x00{head.digest_key}".encode()) \
                .hexdigest()[:20]
            incidents = {r["incident_id"] for r in rows}
            msg["headline"] = (f"jobtrail digest for {sub.name}: {len(rows)} change(s) on "
                               f"{len(incidents)} incident(s)")
            msg["push"] = msg["headline"]
        return msg

    def send(self, sub: Subscription, msg: dict[str, Any], now: datetime) -> Reply:
        """One attempt over the subscription's channel."""
        channel = sub.channel
        try:
            if channel.kind == "email":
                url = (f"{self.settings.public_url}/v1/subscriptions/{sub.id}/unsubscribe"
                       f"?token={unsubscribe_token(self.secrets, sub.id)}")
                self.mail(channels.email(msg, to=channel.target,
                                         sender=self.settings.smtp_from, unsubscribe=url,
                                         at=now))
                return Reply(250, {})
            url = self.secrets.get(channel.target)
            body = channels.render(channel.kind, msg)
            headers: dict[str, str] = {}
            if channel.kind == "webhook" and channel.secret:
                headers = channels.sign(msg["id"], now, body,
                                        self.secrets.values(channel.secret))
            return self.http(url, body, headers)
        except MissingSecret as exc:
            return Reply(-1, {}, str(exc), own=True)
        except (OSError, smtplib.SMTPException) as exc:
            return Reply(0, {}, f"{type(exc).__name__}: {exc}"[:300])
        except Exception as exc:  # one channel's defect is its own failure, never the pass's
            log.exception("subscription %s: the send raised", sub.id)
            return Reply(-1, {}, f"{type(exc).__name__} while sending"[:300])

    def prepare(self, now: datetime) -> tuple[list[Job], list[Attempt]]:
        """What is due, as messages to send (store reads only)."""
        due = self.alerts.due(now)
        if not due:
            return [], []
        subs = {s.id: s for s in self.alerts.subscriptions()}
        last = self.alerts.last_attempts([r["id"] for r in due])
        units: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for row in due:
            unit = (row["subscription_id"], row["digest_key"] or row["id"])
            units.setdefault(unit, []).append(row)
        jobs: list[Job] = []
        cancelled: list[Attempt] = []
        logs: dict[str, list[IncidentEvent]] = {}
        for (sub_id, _), rows in units.items():
            sub = subs.get(sub_id)
            ids = [r["id"] for r in rows]
            prev = [last[i] for i in ids if i in last]
            if any(p["next_at"] is not None and p["next_at"] > now for p in prev):
                continue
            number = max((int(p["last"]) for p in prev), default=0) + 1
            if sub is None or not sub.enabled:
                why = "subscription deleted" if sub is None else (
                    sub.disabled_reason or "subscription disabled")
                cancelled += [Attempt(i, sub_id, number, now, "cancelled", error=why)
                              for i in ids]
                continue
            first = min((p["first_at"] for p in prev), default=now)
            jobs.append(Job(sub, ids, number, first,
                            self._message(sub, rows, logs, now, first)))
        return jobs, cancelled

    def deliver(self, jobs: Sequence[Job], now: datetime,
                out: list[tuple[Job, Reply, int]] | None = None,
                ) -> list[tuple[Job, Reply, int]]:
        """Send each message (network only: no store access, so it may run off the store's
        thread). Each result is appended to `out` as soon as it is known, so a pass that
        stops half-way still records (and never resends) what it sent."""
        out = [] if out is None else out
        gone: set[str] = set()
        for job in jobs:
            if job.sub.id in gone:
                out.append((job, Reply(410, {}, "endpoint gone (earlier in this pass)"), 0))
                continue
            started = time.monotonic()
            reply = self.send(job.sub, job.msg, now)
            out.append((job, reply, int((time.monotonic() - started) * 1000)))
            if reply.code == 410:
                gone.add(job.sub.id)
        return out

    def finish(self, sent: Sequence[tuple[Job, Reply, int]], cancelled: list[Attempt],
               now: datetime) -> list[Attempt]:
        """Record every attempt; a 410 disables its subscription."""
        attempts = list(cancelled)
        disabled: set[str] = set()
        for job, reply, ms in sent:
            status, next_at = self._outcome(job.msg["id"], job.number, reply, now, job.first)
            if status == "gone" and job.sub.id not in disabled:
                disabled.add(job.sub.id)
                why = f"endpoint answered 410 Gone at {now.isoformat()}"
                self.alerts.put_subscription(job.sub.model_copy(update={
                    "enabled": False, "disabled_reason": why}), by="jobtrail")
                log.warning("subscription %s (%s) disabled: %s", job.sub.id, job.sub.owner, why)
            error = self._error(job.sub, reply)
            attempts += [Attempt(i, job.sub.id, job.number, now, status, max(reply.code, 0), ms,
                                 error, next_at, job.sub.channel.kind, [job.msg["id"]])
                         for i in job.ids]
        self.alerts.record(attempts)
        return attempts

    def _error(self, sub: Subscription, reply: Reply) -> str:
        """What the attempt row (which the subscriber reads) says; the details of a refusal
        or a no-answer go to the server log only (`egress.describe`)."""
        self.last_detail = reply.error
        if sub.channel.kind == "email" or reply.code > 0 or not reply.error or reply.own:
            return reply.error
        log.warning("subscription %s (%s): %s", sub.id, sub.owner, reply.error)
        return egress.describe(reply)

    def run(self, now: datetime | None = None) -> list[Attempt]:
        """One delivery pass over what is due."""
        now = now or datetime.now(UTC)
        jobs, cancelled = self.prepare(now)
        sent: list[tuple[Job, Reply, int]] = []
        try:
            self.deliver(jobs, now, sent)
        except Exception:  # what was sent before it is recorded below, never sent again
            log.exception("delivery pass stopped half-way")
        return self.finish(sent, cancelled, now)

    def _outcome(self, msg_id: str, number: int, reply: Reply, now: datetime,
                 first: datetime) -> tuple[str, datetime | None]:
        if 200 <= reply.code < 300 or reply.code == 250:
            return "sent", None
        if reply.code == 410:
            return "gone", None
        if reply.code == -1 or (400 <= reply.code < 500 and reply.code not in RETRIED):
            return "gave_up", None
        if number >= self.settings.delivery_attempts or now - first >= MAX_AGE:
            return "gave_up", None
        wait = retry_after(reply.headers, now)
        delay = max(wait, backoff(msg_id, number)) if wait is not None \
            else backoff(msg_id, number)
        return "failed", now + timedelta(seconds=min(delay, CAP_S * 6))

    def test_send(self, sub: Subscription, now: datetime | None = None) -> Attempt:
        """A synthetic message over the channel, recorded like a delivery (status test)."""
        now = now or datetime.now(UTC)
        msg_id = "test-" + hashlib.sha256(f"{sub.id}{now.isoformat()}".encode()).hexdigest()[:16]
        msg = {
            "id": msg_id, "type": "incident.test", "transition": "test", "folded": [],
            "subscription": {"id": sub.id, "name": sub.name, "owner": sub.owner},
            "headline": f"jobtrail test message for {sub.name}", "time": now.isoformat(),
            "push": f"jobtrail test message for {sub.name}", "age_s": 0,
            "made_at": now.isoformat(),
            "incident": {"id": "inc-test", "title": "test", "status": "open",
                         "severity": "sev4", "severity_why": "", "class": "test",
                         "entity": "test", "owner": sub.owner, "owner_why": "",
                         "cause": {"class": "", "entity": "", "confidence": 0.0,
                                   "explanation": "A test from `jobtrail subscriptions test`."},
                         "opened_at": now.isoformat(), "acknowledged": False,
                         "impact": {"jobs": 0, "gpus": 0, "lost_gpu_hours": 0.0,
                                    "lost_steps": 0, "other_projects": 0},
                         "recovery": "", "jobs": [], "job_impacts": [], "nodes": []},
            "links": {"incident": f"{self.settings.grafana_url}/d/jobtrail-incident",
                      "api": f"{self.settings.public_url}/v1/subscriptions/{sub.id}",
                      "timeline": ""},
            "digest": [],
        }
        started = time.monotonic()
        reply = self.send(sub, msg, now)
        ok = 200 <= reply.code < 300 or reply.code == 250
        answered = ok or reply.code > 0
        attempt = Attempt(msg_id, sub.id, 1, now, "test" if ok else "test_failed",
                          max(reply.code, 0),
                          int((time.monotonic() - started) * 1000) if answered else 0,
                          self._error(sub, reply), None, sub.channel.kind, [msg_id])
        self.alerts.record([attempt])
        return attempt


def _decision(row: dict[str, Any]) -> Decision:
    import json

    return Decision(row["id"], row["subscription_id"], row["incident_id"], row["transition"],
                    row["key"], row["seq"], row["time"], row["not_before"], row["status"],
                    row["reason"], row["digest_key"], tuple(row["folded"]), row["severity"],
                    {k: tuple(v) for k, v in json.loads(row["labels"] or "{}").items()})
