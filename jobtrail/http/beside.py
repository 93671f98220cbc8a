"""The command line beside a running `serve`: the CLI's commands go through this server.

`serve` in embedded mode holds the home (one process opens the engine), so a CLI command on
the same host could only say "in use by pid N". Instead, at start, `serve` writes
`HOME/.serve.json` (mode 0600: only who may open the home reads it) with its pid, its
loopback address and a key made for this run; the CLI (`jobtrail.cli.beside`) finds it when
the home is held, and sends its command to that address with the key and the identity it
runs as (`JOBTRAIL_IDENTITY` or the OS user). The key stands for what the CLI is on this
host, the operator of the home, so the principal is what `cli_principal` gives; it is
accepted only from a loopback peer, and the file goes when `serve` stops.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from jobtrail.http.common import SETTINGS, fail
from jobtrail.identity import Principal

KEY_HEADER = "X-Jobtrail-Home-Key"
NAME_HEADER = "X-Jobtrail-Operator"
LABEL_HEADER = "X-Jobtrail-Operator-Credential"
HOME_KEY: web.AppKey[str] = web.AppKey("home_key", str)
SERVE_FILE = ".serve.json"
LABELS = ("cli:JOBTRAIL_IDENTITY", "cli:os-user")


def loopback_url(host: str, port: int) -> str:
    """Where a CLI on this host reaches the server (a wildcard bind answers on loopback)."""
    if host in ("", "0.0.0.0", "::", "[::]"):  # noqa: S104 (a wildcard bind answers there)
        host = "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def announce(app: web.Application) -> AsyncIterator[None]:
    """Write `HOME/.serve.json` for the run (embedded mode only: in cluster mode the CLI
    needs no home) and remove it at the end."""
    settings = app[SETTINGS]
    app[HOME_KEY] = secrets.token_hex(32)
    path = Path(settings.home) / SERVE_FILE
    written = False
    if not settings.cluster_mode and settings.http_port:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump({"pid": os.getpid(), "url": loopback_url(settings.http_host,
                                                               settings.http_port),
                       "key": app[HOME_KEY]}, out)
        os.replace(path.with_suffix(".tmp"), path)
        written = True
    yield
    if written:
        with contextlib.suppress(OSError):
            if json.loads(path.read_text()).get("key") == app[HOME_KEY]:
                path.unlink()


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        found = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(found, ipaddress.IPv6Address) and found.ipv4_mapped:
        return found.ipv4_mapped
    return found


def _from_this_host(request: web.Request) -> bool:
    """A loopback peer, or one whose address is the one it reached us on (a server bound to
    a host address, called from that host)."""
    peer = _address(request.remote or "")
    if peer is None:
        return False
    if peer.is_loopback:
        return True
    sock = request.transport.get_extra_info("sockname") if request.transport else None
    local = _address(str(sock[0])) if isinstance(sock, tuple) and sock else None
    return local is not None and local == peer


def operator(request: web.Request, presented: str) -> Principal:
    """The CLI's operator, for a request carrying this run's home key (401 otherwise)."""
    expected = request.app.get(HOME_KEY) or ""
    if not expected or not hmac.compare_digest(presented.encode(), expected.encode()):
        fail(web.HTTPUnauthorized, f"{KEY_HEADER}: not this server's key")
    if not _from_this_host(request):
        fail(web.HTTPUnauthorized, f"{KEY_HEADER} is accepted from this host only")
    name = request.headers.get(NAME_HEADER, "").strip()
    label = request.headers.get(LABEL_HEADER, "")
    if not name or len(name) > 200 or any(ord(c) < 0x20 or ord(c) == 0x7f for c in name):
        fail(web.HTTPUnauthorized, f"{NAME_HEADER}: the operator's name (1 to 200 printable "
                                   "characters)")
    if label not in LABELS:
        fail(web.HTTPUnauthorized, f"{LABEL_HEADER}: one of {', '.join(LABELS)}")
    return Principal(name, operator=True, infrastructure=True, role="admin", kind="person",
                     credential=label)
