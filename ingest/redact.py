"""Redaction of credentials before anything is stored, produced, logged or exported.

Applied at ingest to every string of an event (envelope fields, attribute keys and values,
recursively), to incident commands, and to dead-letter payloads, always *before* anything is
truncated (a cut token would no longer match). Two sources of patterns:

- the token formats of Yelp's `detect-secrets` scanner (every regex-based plugin it ships:
  AWS, GitHub, GitLab, Slack, Stripe, Twilio, SendGrid, npm, PyPI, Azure, Discord, ...), so
  new formats arrive with its upgrades;
- our own, for what a log line says around a secret: `scheme://user:pass@host` (also
  JSON-escaped `:\\/\\/`), `Authorization: Bearer ...`, `key=value` / `"key": "value"` with a
  sensitive key name (also inside escaped JSON), private-key blocks, whole JWTs, and bare
  40-character AWS secret keys, plus formats detect-secrets lacks (Hugging Face, Google API
  keys, GitHub fine-grained PATs).

The patterns favour false positives: a redacted non-secret costs a little context, a leaked
secret costs a rotation and an incident. Short plain strings (`node-041`, `rank-3`) skip the
scan: no pattern can match them; and the token formats run only on text that holds a
random-looking run or a known token prefix, which keeps the hot path at a few microseconds.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import pkgutil
import re
from typing import Any

MASK = "[REDACTED]"

_SENSITIVE_PARTS = {
    "password", "passwd", "pwd", "pass", "pw", "passcode", "passphrase", "secret", "secrets",
    "token", "apikey", "apitoken", "credential", "credentials", "authorization", "auth",
    "cookie", "cookies", "jwt", "bearer", "sas", "privatekey", "signature",
}
# a sensitive word followed by one of these names something about the secret, not the secret
_NOT_THE_SECRET = {"count", "counts", "rate", "size", "len", "length", "limit", "budget", "num",
                   "total", "per", "s", "type", "kind", "file", "path", "name", "ref", "env",
                   "method", "mode", "required", "enabled", "provider", "url", "expiry",
                   "expires", "ttl"}
_SENSITIVE_PAIRS = {("api", "key"), ("access", "key"), ("private", "key"), ("session", "id"),
                    ("secret", "key"), ("client", "secret"), ("access", "token"),
                    ("refresh", "token"), ("connection", "string"), ("account", "key")}
_KEY_SPLIT = re.compile(r"[_\-.\s]+|(?<=[a-z])(?=[A-Z])")

_KEYWORD = (r"passw(?:or)?d|passwd|pwd|passphrase|passcode|secret|token|api[_-]?key|apikey|"
            r"access[_-]?key|private[_-]?key|credentials?|client[_-]?secret|account[_-]?key|"
            r"(?<![a-z])pass|auth")
# what a line says around a secret; run when one of _CONTEXT_WORDS appears
_CONTEXT: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----.*?"
                r"(?:-----END [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----|\Z)", re.S), MASK),
    # scheme://user:password@host (and JSON-escaped scheme:\/\/...) -> keep the user
    (re.compile(r"(?i)(?<![a-z0-9+.\-])([a-z][a-z0-9+.\-]*+:(?:\\?/){2}[^\s/:@\"']*):[^\s/@\"']+@"),
     rf"\1:{MASK}@"),
    (re.compile(r"(?i)\b(bearer|basic|token|digest|negotiate)(\s+|%20)"
                r"[A-Za-z0-9\-._~+/]{8,}=*"), rf"\1\2{MASK}"),
    # key=value, key: value, "key": "value", key\":\"value\" (escaped JSON): the keyword must
    # end the key (`author:` and `tokens:` are left alone)
    (re.compile(rf"(?i)((?:{_KEYWORD})(?:\\*[\"'])?\s*[=:]\s*)"
                r"(\\*\"(?:[^\"\\]|\\[^\"])*\\*\"|'[^']*'|[^\s,;&\"'})\]]+)"),
     rf"\1{MASK}"),
]
_DIGITS, _UPPER, _LOWER = set("0123456789"), set("ABCDEFGHIJKLMNOPQRSTUVWXYZ"), \
    set("abcdefghijklmnopqrstuvwxyz")
_CONTEXT_WORDS = ("pass", "pwd", "secret", "token", "key", "cred", "auth", "cookie", "bearer",
                  "basic", "digest", "negotiate", "-----begin", "://", ":\\/\\/")
# token formats; run when the text holds a random-looking run (see _random_run)
# no \b before the prefixes: a token glued to other text (`xghp_...`) is still a token
_TOKENS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"), MASK),
    (re.compile(r"github_pat_[A-Za-z0-9_]{22,}"), MASK),
    (re.compile(r"gh[pousr]_[A-Za-z0-9]{30,}"), MASK),
    (re.compile(r"glpat-[A-Za-z0-9_\-]{20,}"), MASK),
    (re.compile(r"xox[abposr]-[A-Za-z0-9\-]{10,}"), MASK),
    (re.compile(r"sk-(?:proj-|live-|test-|ant-)?[A-Za-z0-9_\-]{20,}"), MASK),
    (re.compile(r"hf_[A-Za-z0-9]{30,}"), MASK),
    (re.compile(r"AIza[0-9A-Za-z_\-]{35}"), MASK),
    (re.compile(r"(?:AKIA|ASIA|AGPA|AIDA|AROA|ABIA|ACCA)[0-9A-Z]{16}(?![0-9A-Z])"), MASK),
]
# a bare secret key (AWS secret access keys, Azure account keys): a 40+ character base64 run
# (also with JSON-escaped `\/`) holding a 40-character window of upper, lower and digits
# with no lower-case word in it; paths, identifiers and git hashes have words or one case
_B64_RUN = re.compile(r"(?:[A-Za-z0-9+=]|\\?/){40,}")
_WORD = re.compile(r"[a-z]{5,}")
_CLUSTER = re.compile(r"[b-df-hj-np-tv-z]{4}")


def _class(c: str) -> int:
    return 0 if c.islower() else 1 if c.isupper() else 2 if c.isdigit() else 3


def _word_chars(window: str) -> int:
    """How many characters of `window` are in lower-case runs that read like a word: a
    vowel, and never four consonants in a row (`scratch`, `checkpoint` yes; `dwafyqnid`,
    `xvtli` no)."""
    return sum(len(m.group()) for m in _WORD.finditer(window)
               if any(c in "aeiou" for c in m.group()) and not _CLUSTER.search(m.group()))


def _looks_random(run: str, strict: bool = False) -> bool:
    """A random key switches character class at ~65 % of positions and its word-like
    lower-case runs are few and short; a path or an identifier is mostly words and switches
    at ~35 %. About 1 random key in 7 has a 5-letter run that reads like a word, and 1 in
    1,000 has no digit: both are still keys when they switch often and words are a small
    part of them (not when it has path separators: those switch class too). `strict` (map
    keys) takes any window of upper, lower and digits."""
    for i in range(0, len(run) - 39, 4):
        window = run[i:i + 40]
        chars = set(window)
        if chars.isdisjoint(_UPPER) or chars.isdisjoint(_LOWER):
            continue
        digits = not chars.isdisjoint(_DIGITS)
        if strict and digits:
            return True
        classes = [_class(c) for c in window]
        switches = sum(a != b for a, b in itertools.pairwise(classes))
        words = _word_chars(window)
        if digits and (words == 0 or switches >= 19):
            return True
        if window.count("/") > 2:  # a path: its separators switch class, not its letters
            continue
        if digits and ((switches >= 14 and words <= 12) or (switches >= 17 and words <= 16)):
            return True
        if not digits and ((words == 0 and switches >= 16) or (switches >= 19 and words <= 5)):
            return True
    return False


def _mask_bare_keys(text: str, strict: bool = False) -> str:
    return _B64_RUN.sub(lambda m: MASK if _looks_random(m.group().replace("\\/", "/"), strict)
                        else m.group(), text)


_OWN = _CONTEXT + _TOKENS
_RUN = re.compile(r"[A-Za-z0-9_\-+/=.:]{16,}")
_HEX_RUN = re.compile(r"[0-9a-fA-F]{32,}")
# literal prefixes of token formats, for tokens that happen to look tame (no digits)
_TOKEN_HINTS = ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "glptt-",
                "xox", "sk-", "sk_", "rk_", "hf_", "aiza", "akia", "asia", "sg.", "npm_",
                "pypi-", "eyj", "accountkey=", "akc", "dop_v1_", "shpat_", "lin_api_")


def _random_run(text: str) -> bool:
    """Whether `text` holds a run that could be a generated token: mixed-case letters and
    digits, upper-case letters and digits (AWS key ids), or 32+ hex digits. Paths, host
    names and UUIDs are not, so the token formats are not even tried on them."""
    for match in _RUN.finditer(text):
        run = match.group()
        chars = set(run)
        if chars.isdisjoint(_DIGITS):
            continue
        if not chars.isdisjoint(_UPPER) and (not chars.isdisjoint(_LOWER) or len(run) >= 20):
            return True
        if len(run) >= 32 and _HEX_RUN.search(run):
            return True
    return False


def _detect_secrets_patterns() -> list[re.Pattern[str]]:
    """Every regex-based plugin of detect-secrets, but the public-IP one (not a secret)."""
    from detect_secrets import plugins
    from detect_secrets.plugins.base import RegexBasedDetector

    found: list[re.Pattern[str]] = []
    for info in pkgutil.iter_modules(plugins.__path__):
        module = importlib.import_module(f"detect_secrets.plugins.{info.name}")
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, RegexBasedDetector)
                    and value is not RegexBasedDetector and value.__name__ != "IPPublicDetector"
                    and value.__module__ == module.__name__):
                patterns: Any = getattr(value, "denylist", ())
                found.extend(_run_start(p) for p in patterns if isinstance(p, re.Pattern))
    return found


def _run_start(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """A pattern whose literal prefix opens a greedy run that can fail (OpenAI's legacy
    `sk-[A-Za-z0-9-_]*...T3BlbkFJ...`) rereads the run at every `sk-` of `sk-sk-sk-...`:
    start it only where the run starts (`_TOKENS` still masks a key glued to other text)."""
    if pattern.pattern.startswith("sk-[A-Za-z0-9-_]*"):
        return re.compile(r"(?<![A-Za-z0-9_-])" + pattern.pattern, pattern.flags)
    return pattern


_KNOWN = _detect_secrets_patterns()


def redact_text(text: str, *, strict: bool = False) -> str:
    """Mask every credential-looking substring of `text` (`strict`: for map keys, where a
    random-looking 40-character run is never a path)."""
    if len(text) < 15 and not ("=" in text or ":" in text or "@" in text or " " in text):
        return text  # too short for a token format, no key=value, URL or header around one
    lowered = text.lower()
    if any(word in lowered for word in _CONTEXT_WORDS):
        for pattern, replacement in _CONTEXT:
            text = pattern.sub(replacement, text)
    if any(hint in lowered for hint in _TOKEN_HINTS) or _random_run(
            text.replace("\\/", "/") if "\\/" in text else text):
        for pattern, replacement in _TOKENS:
            text = pattern.sub(replacement, text)
        text = _mask_bare_keys(text, strict)
        for known in _KNOWN:
            text = known.sub(_mask_match, text)
    return text


def _mask_match(match: re.Match[str]) -> str:
    whole = match.group(0)
    # keep what a pattern matched around the token (a quote, a separator) readable
    if match.re.groups and match.lastindex:
        start, end = match.span(match.lastindex)
        if start >= 0 and end - start >= 8:
            offset = match.start()
            return whole[:start - offset] + MASK + whole[end - offset:]
    return MASK if MASK not in whole else whole


@functools.lru_cache(maxsize=4096)
def is_sensitive_key(key: str) -> bool:
    """`db_password`, `DB_PASS`, `apiKey`, `AWS_SECRET_ACCESS_KEY` yes; `tokens_per_s`,
    `token_count`, `password_file` no."""
    parts = [p.lower() for p in _KEY_SPLIT.split(key) if p]
    if not parts or parts[-1] in _NOT_THE_SECRET:
        return False
    if any(p in _SENSITIVE_PARTS for p in parts):
        return True
    return any(pair in _SENSITIVE_PAIRS for pair in itertools.pairwise(parts))


def redact_value(value: Any, *, key: str = "") -> Any:
    """Redact a JSON value: strings by pattern, whole values under sensitive keys, and keys
    that are themselves secrets."""
    if key and is_sensitive_key(key) and value not in (None, "", [], {}) and \
            not isinstance(value, bool):
        return MASK
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {redact_key(str(k)): redact_value(v, key=str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_value(v) for v in value]
    return value


def redact_key(key: str) -> str:
    """A key that is a secret itself (a token used as a map key) is masked, keeping it
    distinct from the other keys by a short digest."""
    cleaned = redact_text(key, strict=True)
    if cleaned == key:
        return key
    import hashlib

    return f"{cleaned}#{hashlib.sha256(key.encode()).hexdigest()[:8]}"


_CLIP_MARGIN = 4096
_TOKEN_SPAN = 1024


def clip(text: str, limit: int) -> str:
    """Redact, then cut to `limit` characters (never the other way round). Only the first
    `limit` + 4096 characters are redacted, so a 10 MB line costs what its kept part does;
    the last 1024 redacted characters of that head are not kept, so a token the first cut
    split (and no pattern then recognises) is never shown."""
    if len(text) <= limit + _CLIP_MARGIN:
        return redact_text(text)[:limit]
    head = redact_text(text[:limit + _CLIP_MARGIN])
    return head[:min(limit, max(0, len(head) - _TOKEN_SPAN))]


def error_text(exc: BaseException, limit: int = 500) -> str:
    """What went wrong, never the input: a pydantic error lists where and why without the
    value it echoes (it shows a cut head and tail of the input, and a token's tail matches
    no pattern); anything else is redacted."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            items = errors(include_url=False, include_input=False)
        except TypeError:
            items = None
        if isinstance(items, list) and items:
            return clip("; ".join(
                f"{'.'.join(str(p) for p in e.get('loc', ())) or 'value'}: {e.get('msg', '')}"
                for e in items[:5]), limit)
    return clip(str(exc), limit)
