"""What every API process on one store agrees on about browser sign-ins (the tables of
migration 0030): an OpenID Connect login state is used once, and a session that logged out
stays out, across a restart and across every `serve` on the same store. A process keeps
nothing of this in memory that another process would need; the calls block, so the HTTP
layer runs them on the runtime's thread (`RuntimeBackend.call`) like every store read.

Used once without transactions: ClickHouse has no compare-and-set, so a callback claims its
state by inserting a claim row under a deduplication token per state (the engine drops a
second claim of the same state: one claim row is ever stored) and reading the claims back;
it wins when the only claim stored is its own. Were deduplication to forget the first claim
(past its window), two callbacks that each wrote before reading would see each other's claim,
or the second the first's: never both only their own, so at most one still wins.

On a replicated cluster the claim is deduplicated through Keeper, so it is still stored once
whichever replica takes it; a replica that lags may refuse a good sign-in (the person starts
again), never let a second one through while the first claim is within the window.

Only SHA-256 digests of login states and session ids are stored: the state's nonce and PKCE
verifier stay in the browser's signed cookie, and a digest read from the store signs no one in.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime
from typing import Any

from jobtrail.store.retry import RetryPolicy

WRITES = RetryPolicy(attempts=3, first_delay_s=0.2, max_delay_s=1.0)
"""A sign-in or sign-out waits for the store a little, not the ingest path's minutes."""

UNKNOWN = ("this sign-in is not known here: it was not started on this site, or it is older "
           "than its 10 minutes")
USED = "this sign-in was already completed: a login is used once"


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _time(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


class SignIns:
    """The sign-in tables of one store (`jobtrail.store.Store`)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.client = store.client
        self.db = store.database

    def _insert(self, table: str, row: list[Any], columns: list[str],
                token: str | None = None) -> None:
        settings = {"insert_deduplication_token": token} if token else None
        WRITES.run(lambda: self.client.insert(f"{self.db}.{table}", [row], column_names=columns,
                                              settings=settings))

    def start_login(self, state: str, now: float, expires_at: float) -> None:
        """Record a login state as started (until `expires_at`)."""
        self._insert("login_states", [_digest(state), "", _time(now), _time(expires_at)],
                     ["state_hash", "claim", "at", "expires_at"])

    def _claims(self, state_hash: str, now: float) -> list[str]:
        result = self.client.query(
            "SELECT claim FROM login_states FINAL WHERE state_hash = {h:String} "
            "AND expires_at > {now:DateTime64(3, 'UTC')} ORDER BY claim",
            parameters={"h": state_hash, "now": _time(now)})
        return [str(row[0]) for row in result.result_rows]

    def claim_login(self, state: str, now: float) -> str:
        """Use a started, unexpired login state: '' when this call used it, else why not
        (`UNKNOWN`, `USED`), for the person signing in."""
        state_hash = _digest(state)
        seen = self._claims(state_hash, now)
        if "" not in seen:
            return UNKNOWN
        if len(seen) > 1:
            return USED
        mine = secrets.token_hex(16)
        self._insert("login_states", [state_hash, mine, _time(now), _time(now + 3600)],
                     ["state_hash", "claim", "at", "expires_at"],
                     token=f"login-claim/{state_hash}")
        claims = [c for c in self._claims(state_hash, now) if c]
        return "" if claims == [mine] else USED

    def revoke(self, sid: str, now: float, expires_at: float) -> None:
        """Record a session as logged out until it would have expired."""
        self._insert("session_revocations", [_digest(sid), _time(now), _time(expires_at)],
                     ["sid_hash", "revoked_at", "expires_at"])

    def revoked(self, sid: str) -> bool:
        """Whether any process on this store logged the session out."""
        result = self.client.query(
            "SELECT count() FROM session_revocations WHERE sid_hash = {h:String}",
            parameters={"h": _digest(sid)})
        return bool(result.result_rows[0][0])
