"""Real receivers on loopback for the alert channels: an HTTP receiver that verifies Standard
Webhooks signatures (with the `standardwebhooks` library, as a consumer would), records every
request and deduplicates on `webhook-id`; and a real SMTP server (aiosmtpd)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.trust_kit import free_port


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    verified: bool | None  # None: no secret configured for the path

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    url: str
    requests: list[Received] = field(default_factory=list)
    secrets: dict[str, list[str]] = field(default_factory=dict)
    """path -> the signing secrets a consumer of it knows."""
    script: dict[str, list[tuple[int, dict[str, str], float]]] = field(default_factory=dict)
    """path -> answers to give, in order (status, headers, delay s); then 200."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    started: list[str] = field(default_factory=list)
    """The webhook-id of every request as it arrives (before any scripted delay)."""

    def on(self, path: str, *answers: tuple[int, dict[str, str], float]) -> None:
        self.script.setdefault(path, []).extend(answers)

    def at(self, path: str) -> list[Received]:
        with self.lock:
            return [r for r in self.requests if r.path == path]

    def unique(self, path: str) -> dict[str, Received]:
        """What a deduplicating consumer keeps: the first request per webhook-id."""
        out: dict[str, Received] = {}
        for r in self.at(path):
            out.setdefault(r.headers.get("webhook-id", ""), r)
        return out


def _verify(secrets: list[str], headers: dict[str, str], body: bytes) -> bool:
    from standardwebhooks import Webhook

    for secret in secrets:
        try:
            Webhook(secret).verify(body, headers)
            return True
        except Exception:
            continue
    return False


@contextmanager
def receiver() -> Iterator[Receiver]:
    port = free_port()
    box = Receiver(f"http://127.0.0.1:{port}")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            path = self.path.split("?")[0]
            secrets = box.secrets.get(path)
            verified = _verify(secrets, headers, body) if secrets is not None else None
            with box.lock:
                box.started.append(headers.get("webhook-id", ""))
                answers = box.script.get(path) or []
                status, extra, delay = answers.pop(0) if answers else (200, {}, 0.0)
            if delay:
                time.sleep(delay)
            with box.lock:
                box.requests.append(Received(path, headers, body, verified))
            self.send_response(status)
            for k, v in extra.items():
                self.send_header(k, v)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield box
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Mailbox:
    host: str
    port: int
    messages: list[EmailMessage] = field(default_factory=list)
    envelopes: list[tuple[str, list[str]]] = field(default_factory=list)


@contextmanager
def smtp_server() -> Iterator[Mailbox]:
    from aiosmtpd.controller import Controller

    port = free_port()
    box = Mailbox("127.0.0.1", port)

    class Handler:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            box.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
            box.messages.append(message_from_bytes(  # type: ignore[arg-type]
                envelope.original_content or envelope.content, policy=policy.default))
            return "250 OK"

    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield box
    finally:
        controller.stop()
