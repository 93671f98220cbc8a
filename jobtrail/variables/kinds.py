"""The kinds of value a `JOBTRAIL_*` variable takes (`jobtrail.variables`): each parses the
raw text into the value or raises ValueError saying what it wants (`shape`), bounded and
finite (NaN and infinities are never a number here)."""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from jobtrail.identity.principal import check_grants

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
"""A name that may stand unquoted in ClickHouse SQL (database, cluster): letters, digits and
underscores, not starting with a digit, at most 64 characters."""

_HOST = re.compile(r"(?=.{1,253}$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62})"
                   r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62}))*\.?")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class Kind(Protocol):
    @property
    def shape(self) -> str:
        """What the kind accepts, for the docs and the refusal."""

    def parse(self, raw: str) -> Any:
        """The value, or ValueError saying what is wanted."""


def shown(raw: str) -> str:
    """A value as a refusal quotes it (shortened)."""
    return repr(raw if len(raw) <= 80 else raw[:77] + "...")


@dataclass(frozen=True)
class Number:
    low: float
    high: float
    integer: bool = False
    low_open: bool = False
    """The low bound itself is refused (a duration that must be positive)."""
    never: bool = False
    """`never` or a negative number means never (the value None)."""
    unit: str = ""

    @property
    def shape(self) -> str:
        what = "a whole number" if self.integer else "a number"
        unit = f" {self.unit}" if self.unit else ""
        high = f"{_num(self.high)}{unit}" + (f" ({self.high / 86400:g} days)"
                                             if self.unit == "s" and self.high >= 86400 else "")
        span = f"above {_num(self.low)}, at most {high}" if self.low_open else \
            f"from {_num(self.low)} to {high}"
        never = ", or `never` (a negative number too)" if self.never else ""
        return f"{what} {span}{never}"

    def parse(self, raw: str) -> float | int | None:
        text = raw.strip()
        if self.never and text.lower() == "never":
            return None
        try:
            value: float | int = int(text, 10) if self.integer else float(text)
        except ValueError:
            raise ValueError(self.shape) from None
        if not math.isfinite(value):
            raise ValueError(self.shape)
        if self.never and value < 0:
            return None
        if value < self.low or (self.low_open and value == self.low) or value > self.high:
            raise ValueError(self.shape)
        return value


def _num(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


@dataclass(frozen=True)
class Days:
    """Days of retention: 1 to `high`, or 0 / `forever` (kept forever)."""

    high: int

    @property
    def shape(self) -> str:
        return f"a whole number of days from 1 to {self.high} (100 years), or 0 or forever"

    def parse(self, raw: str) -> int:
        text = raw.strip().lower()
        if text == "forever":
            return 0
        try:
            value = int(text, 10)
        except ValueError:
            raise ValueError(self.shape) from None
        if not 0 <= value <= self.high:
            raise ValueError(self.shape)
        return value


@dataclass(frozen=True)
class Choice:
    values: tuple[str, ...]

    @property
    def shape(self) -> str:
        return "one of " + ", ".join(self.values)

    def parse(self, raw: str) -> str:
        if raw.strip() not in self.values:
            raise ValueError(self.shape)
        return raw.strip()


@dataclass(frozen=True)
class Flag:
    shape: str = "1, true, yes, on or 0, false, no, off"

    def parse(self, raw: str) -> bool:
        text = raw.strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ValueError(self.shape)


@dataclass(frozen=True)
class Text:
    """Free text (or text matching `pattern`), one line, at most `max_len` characters."""

    max_len: int = 256
    pattern: re.Pattern[str] | None = None
    what: str = "text"
    secret: bool = False
    """Never echoed in a refusal."""

    @property
    def shape(self) -> str:
        return f"{self.what}, at most {self.max_len} characters"

    def parse(self, raw: str) -> str:
        text = raw if self.secret else raw.strip()
        if len(text) > self.max_len or _CONTROL.search(text) or (
                self.pattern is not None and not self.pattern.fullmatch(text)):
            raise ValueError(self.shape)
        return text


@dataclass(frozen=True)
class Url:
    schemes: tuple[str, ...] = ("http", "https")
    secret: bool = False

    @property
    def shape(self) -> str:
        return "an " + ", ".join(f"{s}://" for s in self.schemes) + " URL"

    def parse(self, raw: str) -> str:
        text = raw.strip()
        try:
            url = urlsplit(text)
            port_ok = url.port is None or url.port > 0
        except ValueError:
            raise ValueError(self.shape) from None
        if url.scheme not in self.schemes or not port_ok or len(text) > 2048 or \
                _CONTROL.search(text) or " " in text or (
                    url.scheme != "chdb" and not (url.hostname and _host_ok(url.hostname))):
            raise ValueError(self.shape)
        return text


def _host_ok(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
        return True
    except ValueError:
        return bool(_HOST.fullmatch(host))


@dataclass(frozen=True)
class Host:
    shape: str = "an IP address or a host name"

    def parse(self, raw: str) -> str:
        text = raw.strip()
        if not _host_ok(text):
            raise ValueError(self.shape)
        return text.strip("[]")


@dataclass(frozen=True)
class HostPorts:
    """`host:port`, or several comma-separated (`many`)."""

    many: bool = False

    @property
    def shape(self) -> str:
        return "host:port" + ("[,host:port...]" if self.many else "") + " (port 1 to 65535)"

    def parse(self, raw: str) -> str:
        entries = [e.strip() for e in raw.split(",")] if self.many else [raw.strip()]
        if len(entries) > 100:
            raise ValueError(self.shape)
        for entry in entries:
            host, colon, port = entry.rpartition(":")
            if not colon or not _host_ok(host) or not port.isdigit() or len(port) > 5 or \
                    not 1 <= int(port) <= 65535:
                raise ValueError(self.shape)
        return ",".join(entries)


@dataclass(frozen=True)
class Networks:
    shape: str = "comma-separated IP addresses or networks (10.0.0.0/8)"

    def parse(self, raw: str) -> tuple[str, ...]:
        entries = tuple(a.strip() for a in raw.split(",") if a.strip())
        for entry in entries:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"{self.shape}; {shown(entry)} is neither") from None
        return entries


@dataclass(frozen=True)
class Entries:
    """Comma-separated entries each matching `pattern` (at most `max_entries`)."""

    pattern: re.Pattern[str]
    what: str
    max_entries: int = 256

    @property
    def shape(self) -> str:
        return f"comma-separated {self.what}"

    def parse(self, raw: str) -> tuple[str, ...]:
        entries = tuple(e.strip() for e in raw.split(",") if e.strip())
        if len(entries) > self.max_entries:
            raise ValueError(f"{self.shape}, at most {self.max_entries}")
        for entry in entries:
            if len(entry) > 255 or not self.pattern.fullmatch(entry):
                raise ValueError(f"{self.shape}; {shown(entry)} is not one")
        return entries


@dataclass(frozen=True)
class Tokens:
    """`tok1=grant,grant;tok2=grant`: each token and its grants (jobtrail.identity)."""

    shape: str = "token=grant[,grant...][;token=grant...]"
    secret: bool = True

    def parse(self, raw: str) -> dict[str, tuple[str, ...]]:
        tokens: dict[str, tuple[str, ...]] = {}
        for number, entry in enumerate(filter(None, (e.strip() for e in raw.split(";"))), 1):
            token, _, grants = entry.partition("=")
            token = token.strip()
            parsed = tuple(g.strip() for g in grants.split(",") if g.strip())
            if not token or not parsed:
                raise ValueError(f"entry {number}: {self.shape}")
            if len(token) > 512 or _CONTROL.search(token) or " " in token:
                raise ValueError(f"entry {number}: a token is at most 512 characters, "
                                 "without spaces")
            if token in tokens:
                raise ValueError(f"entry {number}: the same token twice")
            check_grants(parsed)
            tokens[token] = parsed
        return tokens
