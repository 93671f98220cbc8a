"""Redaction of credentials before anything is stored, produced or logged.

Applied to `message`, to every string inside `attributes` (recursively) and to the raw
payload kept in dead letters. Values under sensitive keys (`password`, `token`, ...) are
replaced whole. The patterns favour false positives: a redacted non-secret costs a little
context, a leaked secret costs a rotation and an incident.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

MASK = "[REDACTED]"

_SENSITIVE_PARTS = {
    "password", "passwd", "pwd", "secret", "token", "apikey", "credential", "credentials",
    "authorization", "auth", "cookie", "passphrase",
}
_SENSITIVE_PAIRS = {("api", "key"), ("access", "key"), ("private", "key"), ("session", "id")}
_KEY_SPLIT = re.compile(r"[_\-.\s]+|(?<=[a-z])(?=[A-Z])")

# (pattern, replacement); order matters: private keys and URLs before key=value.
_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
            re.S,
        ),
        MASK,
    ),
    # scheme://user:password@host -> keep the user, drop the password
    (re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s/:@]*):[^\s/@]+@"), rf"\1:{MASK}@"),
    (re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9\-._~+/]{8,}=*"), rf"\1 {MASK}"),
    # key=value / key: value / "key": "value" with a sensitive key name
    (
        re.compile(
            r"(?i)\b([\w.\-]*?(?:passw(?:or)?d|passwd|pwd|secret|token|api[_-]?key|apikey|"
            r"access[_-]?key|private[_-]?key|credentials?|passphrase))"
            r"(\"?\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s,;&\"']+)"
        ),
        rf"\1\2{MASK}",
    ),
    (re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b"), MASK),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"), MASK),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}\b"), MASK),
    (re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}\b"), MASK),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}\b"), MASK),
    (re.compile(r"\bsk-(?:proj-|live-|test-)?[A-Za-z0-9_\-]{20,}\b"), MASK),
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), MASK),
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"), MASK),
    (re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\b"), MASK),
]


def redact_text(text: str) -> str:
    """Mask every credential-looking substring of `text`."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def is_sensitive_key(key: str) -> bool:
    """`db_password`, `apiKey`, `AWS_SECRET_ACCESS_KEY` yes; `tokens_per_s` no."""
    parts = [p.lower() for p in _KEY_SPLIT.split(key) if p]
    if any(p in _SENSITIVE_PARTS for p in parts):
        return True
    return any(pair in _SENSITIVE_PAIRS for pair in itertools.pairwise(parts))


def redact_value(value: Any, *, key: str = "") -> Any:
    """Redact a JSON value: strings by pattern, whole values under sensitive keys."""
    if key and is_sensitive_key(key) and value not in (None, "", [], {}):
        return MASK
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: redact_value(v, key=str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_value(v) for v in value]
    return value
