"""Where a channel may post, and the one way it posts: the SSRF guard.

A channel URL is a tenant's input that the server dereferences, so it is held to a
deny-by-default policy (docs/subscriptions.md, "Where channels may post"):

- the URL is parsed once, strictly, here (http or https, a host, a numeric port, no
  user-info, no backslash, whitespace or control character): the parser that checks the
  host is the parser whose parts are connected to, so no second parser reads another host
  out of `http://127.0.0.1:1\\@example.com/`;
- a host spelled as a number in any of the forms a resolver accepts (`2130706433`,
  `0x7f000001`, `0177.0.0.1`, `127.1`, `0x7f.0.0.1`) is that address;
- every address the name resolves to is checked; IPv6 forms that carry an IPv4 address
  (IPv4-mapped and -compatible, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`, Teredo) are checked
  as that address too; only public unicast passes, unless the address is inside an
  operator-listed network (`JOBTRAIL_ALERT_HOSTS`: CIDRs and addresses; name patterns
  there restrict which hosts may be named at all);
- the connection goes to the checked address (no second resolution: the name's Host header
  and TLS SNI are kept), and a redirect is never followed (3xx is a failure that names it).
"""

from __future__ import annotations

import fnmatch
import http.client
import ipaddress
import socket
import ssl
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

IP = ipaddress.IPv4Address | ipaddress.IPv6Address
Net = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Sequence[str]]
"""host, port -> the addresses it resolves to (injected by tests; `system_resolver`)."""

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
_TEREDO = ipaddress.ip_network("2001::/32")
_COMPAT = ipaddress.ip_network("::/96")
_HOST_CHARS = set(string.ascii_lowercase + string.digits + "-._")
_NUMERIC_CHARS = set(string.hexdigits.lower() + "x.")


class ChannelRefused(ValueError):
    """A channel URL that may not be posted to; `str()` says why (never a secret: only the
    host, not the path or query, is named)."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    """Lower-case name, or the canonical text of an address literal."""
    port: int
    path: str
    """Path and query, as sent in the request line."""
    literal: IP | None


@dataclass(frozen=True)
class Policy:
    names: tuple[str, ...] = ()
    """fnmatch patterns of host names channels may name; empty: any name."""
    nets: tuple[Net, ...] = ()
    """Non-public networks channels may reach anyway (an operator's internal relay, a test's
    loopback receiver)."""

    @classmethod
    def from_hosts(cls, entries: Iterable[str]) -> Policy:
        """`JOBTRAIL_ALERT_HOSTS`: each entry an address or CIDR (opens it) or a host name
        pattern (restricts names to the patterns listed)."""
        names, nets = [], []
        for entry in (e.strip().lower() for e in entries):
            if not entry:
                continue
            try:
                nets.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                names.append(entry.rstrip("."))
        return cls(tuple(names), tuple(nets))


def parse_ipv4_number(host: str) -> ipaddress.IPv4Address | None:
    """The address a resolver reads from a numeric host (inet_aton's forms: 1 to 4 parts,
    each decimal, octal with a leading 0 or hex with 0x, the last filling what is left);
    None when `host` is not numeric. A numeric-looking host that is no address raises."""
    if not host or not set(host) <= _NUMERIC_CHARS or not host.replace(".", "")[:1].isdigit():
        return None
    parts = host.split(".")
    if len(parts) > 4 or any(not p for p in parts):
        if all(p.isdigit() or not p for p in parts):
            raise ChannelRefused(f"host {host!r} is not a valid address")
        return None
    values = []
    for part in parts:
        try:
            if part.lower().startswith("0x"):
                values.append(int(part[2:] or "0", 16))
            elif len(part) > 1 and part.startswith("0"):
                values.append(int(part, 8))
            else:
                values.append(int(part, 10))
        except ValueError:
            if all(c in string.digits + "." for c in host):
                raise ChannelRefused(f"host {host!r} is not a valid address") from None
            return None  # a name such as 0xdeadbeef.example that only starts like a number
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (4 - len(head)):
        raise ChannelRefused(f"host {host!r} is not a valid address")
    number = 0
    for v in head:
        number = number * 256 + v
    number = number * 256 ** (4 - len(head)) + last
    return ipaddress.IPv4Address(number)


def parse(url: str) -> Target:
    """The parts of a channel URL, or ChannelRefused naming what is wrong with it."""
    if not isinstance(url, str) or not url:
        raise ChannelRefused("an http(s) URL is required")
    if len(url) > 2048:
        raise ChannelRefused("the URL is longer than 2048 characters")
    if any(c in url for c in "\\ \t\r\n") or any(ord(c) < 0x20 or ord(c) == 0x7f for c in url):
        raise ChannelRefused("the URL holds a backslash, whitespace or a control character")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ChannelRefused(f"the URL does not parse: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ChannelRefused("the URL must be http or https")
    if "@" in parts.netloc:
        raise ChannelRefused("the URL may not carry user-info (user:password@); put a "
                             "credential in the secret store, not the URL")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise ChannelRefused("the URL has no host")
    literal: IP | None
    if parts.netloc.startswith("["):
        try:
            literal = ipaddress.IPv6Address(host.split("%")[0])
        except ValueError:
            raise ChannelRefused(f"host [{host}] is not an IPv6 address") from None
        if "%" in host:
            raise ChannelRefused("an IPv6 zone (%) is not allowed in a channel URL")
    else:
        if not set(host) <= _HOST_CHARS:
            try:
                host = host.encode("idna").decode("ascii")
            except UnicodeError:
                raise ChannelRefused(f"host {host!r} is not a valid name") from None
        literal = parse_ipv4_number(host)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    default = 443 if parts.scheme == "https" else 80
    if port == 0:
        raise ChannelRefused("port 0 is not a port")
    return Target(parts.scheme, str(literal) if literal is not None else host,
                  port or default, path, literal)


def _embedded(ip: IP) -> list[IP]:
    """The IPv4 addresses an IPv6 address carries (to be checked as well)."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return []
    found: list[IP] = []
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    if ip in _NAT64 or ip in _COMPAT:
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)
    return found


def refusal(ip: IP, policy: Policy) -> str:
    """'' when `ip` may be connected to, else why not."""
    if any(ip.version == net.version and ip in net for net in policy.nets):
        return ""
    if isinstance(ip, ipaddress.IPv6Address) and (ip in _TEREDO or ip in _NAT64_LOCAL):
        return f"address {ip} is a tunnel or translation address"
    for inner in _embedded(ip):
        why = refusal(inner, policy)
        if why:
            return f"address {ip} carries {inner}: {why}"
    if ip in _COMPAT:  # IPv4-compatible (deprecated) and ::, ::1
        return f"address {ip} is not public"
    if (ip.is_loopback or ip.is_private or ip.is_link_local or ip.is_multicast
            or ip.is_unspecified or ip.is_reserved or not ip.is_global
            or (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local)):
        return f"address {ip} is not public"
    return ""


def check_name(target: Target, policy: Policy) -> str:
    """'' when the URL's host may be named (before any resolution), else why not."""
    if target.literal is not None:
        why = refusal(target.literal, policy)
        if why:
            return f"{why} (allow it with JOBTRAIL_ALERT_HOSTS)"
        listed = any(target.literal.version == n.version and target.literal in n
                     for n in policy.nets)
        if policy.names and not listed:  # names only: an address is none of them
            return f"host {target.host} is not in JOBTRAIL_ALERT_HOSTS"
        return ""
    if policy.names and not any(fnmatch.fnmatchcase(target.host, p) for p in policy.names):
        return f"host {target.host} is not in JOBTRAIL_ALERT_HOSTS"
    return ""


def check_url(url: str, policy: Policy) -> Target:
    """What a channel's creation checks (no resolution: a name may resolve later)."""
    target = parse(url)
    why = check_name(target, policy)
    if why:
        raise ChannelRefused(why)
    return target


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]


def resolve(target: Target, policy: Policy, resolver: Resolver) -> list[IP]:
    """The addresses to connect to, every one of them checked; ChannelRefused if any fails
    (a name with one internal address among public ones is refused: the resolver, not we,
    would pick which one is used on a retry)."""
    why = check_name(target, policy)
    if why:
        raise ChannelRefused(why)
    if target.literal is not None:
        return [target.literal]
    try:
        found = [ipaddress.ip_address(a.split("%")[0]) for a in resolver(target.host,
                                                                            target.port)]
    except (OSError, UnicodeError) as exc:
        raise OSError(f"cannot resolve {target.host}: {exc}") from None
    if not found:
        raise OSError(f"{target.host} resolves to no address")
    for ip in found:
        why = refusal(ip, policy)
        if why:
            raise ChannelRefused(f"host {target.host} resolves to {ip}: {why} (allow it "
                                 "with JOBTRAIL_ALERT_HOSTS)")
    return list(dict.fromkeys(found))


class _Pinned(http.client.HTTPConnection):
    """An HTTP connection to a checked address that says the name in its Host header."""

    def __init__(self, target: Target, ip: IP, timeout: float,
                 tls: ssl.SSLContext | None = None) -> None:
        super().__init__(target.host, target.port, timeout=timeout)
        self._ip = str(ip)

    def connect(self) -> None:
        self.sock = socket.create_connection((self._ip, self.port), self.timeout)


class _PinnedTLS(http.client.HTTPSConnection):
    """The same over TLS: the certificate is checked against the name (SNI too)."""

    def __init__(self, target: Target, ip: IP, timeout: float,
                 tls: ssl.SSLContext | None = None) -> None:
        self._tls = tls or ssl.create_default_context()
        super().__init__(target.host, target.port, timeout=timeout, context=self._tls)
        self._ip = str(ip)

    def connect(self) -> None:
        raw = socket.create_connection((self._ip, self.port), self.timeout)
        self.sock = self._tls.wrap_socket(raw, server_hostname=self.host)


@dataclass(frozen=True)
class Answer:
    code: int
    """The HTTP status; -1: refused by policy or not a valid URL; 0: no answer."""
    headers: Mapping[str, str]
    error: str = ""


def post(url: str, body: bytes, headers: Mapping[str, str], *, policy: Policy,
         resolver: Resolver = system_resolver, timeout_s: float = 10.0,
         tls: ssl.SSLContext | None = None) -> Answer:
    """POST `body` to `url` under `policy`; never raises (every failure is an Answer).
    `tls`: the trust store (default: the system's)."""
    try:
        target = parse(url)
        addresses = resolve(target, policy, resolver)
    except ChannelRefused as exc:
        return Answer(-1, {}, str(exc))
    except OSError as exc:
        return Answer(0, {}, str(exc)[:300])
    last = ""
    for ip in addresses:
        kind = _PinnedTLS if target.scheme == "https" else _Pinned
        conn = kind(target, ip, timeout_s, tls)
        try:
            conn.request("POST", target.path, body=body, headers={
                "Content-Type": "application/json", "User-Agent": "jobtrail-alerts",
                **headers})
            resp = conn.getresponse()
            resp.read(65536)
            answer = dict(resp.getheaders())
            if 300 <= resp.status < 400:
                return Answer(-1, answer, f"HTTP {resp.status}: redirects are not followed "
                                          "(give the channel its final URL)")
            return Answer(resp.status, answer, "" if resp.status < 400 else
                          f"HTTP {resp.status}")
        except (OSError, http.client.HTTPException, ValueError) as exc:
            last = f"{type(exc).__name__}: {exc}"[:300]
        finally:
            conn.close()
    return Answer(0, {}, last)


def describe(answer: Any) -> str:
    """What a tenant may read of a failed attempt: an endpoint's HTTP answer as is; a
    refusal and every kind of no-answer (refused, timed out, unresolvable, TLS) as one
    sentence, so a delivery or a test is no port scanner."""
    if answer.code > 0 and answer.code != 250:
        return str(answer.error) or f"HTTP {answer.code}"
    return NOT_DELIVERED


NOT_DELIVERED = ("not delivered: the channel's host is not allowed or did not answer "
                 "(the server log says which)")
