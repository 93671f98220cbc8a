"""Channel secrets (chat webhook URLs, `whsec_` signing secrets) outside the store.

A subscription names them by reference: `env:VAR` (a deployment's secret as an environment
variable) or `secret:NAME`, kept in `HOME/secrets.json` (mode 0600, written atomically).
Nothing here is ever logged, exported or put in an event; listings show only a hint.
"""

from __future__ import annotations

import json
import os
import secrets as random
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit


class MissingSecret(LookupError):
    """A reference that does not resolve (the message names the reference, not a value)."""


ENV_PREFIX = "JOBTRAIL_CHANNEL_"
_SERVER_SECRETS = frozenset({"JOBTRAIL_WIRE_KEY", "JOBTRAIL_UNSUBSCRIBE_KEY",
                             "JOBTRAIL_SMTP_PASSWORD", "JOBTRAIL_SMTP_USER",
                             "JOBTRAIL_API_TOKENS", "JOBTRAIL_CLICKHOUSE"})


def env_refusal(name: str, prefix: str = ENV_PREFIX) -> str:
    """'' when a channel may name environment variable `name`, else why not: only the
    operator's channel variables (`JOBTRAIL_CHANNEL_ENV_PREFIX`), never the server's own
    secrets."""
    if not name or not all(c.isalnum() or c == "_" for c in name):
        return f"{name!r} is not an environment variable name"
    if not name.startswith(prefix) or name == prefix or name in _SERVER_SECRETS:
        return (f"only variables named {prefix}* may hold a channel's URL or secret "
                "(JOBTRAIL_CHANNEL_ENV_PREFIX)")
    return ""


class Secrets:
    def __init__(self, home: Path, env: Mapping[str, str] | None = None,
                 env_prefix: str = ENV_PREFIX) -> None:
        self.path = home / "secrets.json"
        self.env = os.environ if env is None else env
        self.env_prefix = env_prefix

    def _load(self) -> dict[str, str]:
        if not self.path.exists():
            return {}
        data = json.loads(self.path.read_text())
        return {str(k): str(v) for k, v in data.items()}

    def put(self, name: str, value: str) -> str:
        """Store `value` as `name`; returns the reference (`secret:NAME`)."""
        data = self._load()
        data[name] = value
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(data, out, sort_keys=True)
        os.replace(tmp, self.path)
        return f"secret:{name}"

    def get(self, ref: str) -> str:
        kind, _, name = ref.partition(":")
        if kind == "env":
            refused = env_refusal(name, self.env_prefix)
            if refused:  # also for a reference stored before the prefix rule
                raise MissingSecret(f"{ref}: {refused}")
            value = self.env.get(name)
        elif kind == "secret":
            value = self._load().get(name)
        else:
            raise MissingSecret(f"{ref!r} is not a secret reference (env:VAR or secret:NAME)")
        if not value:
            raise MissingSecret(f"{ref} is not set")
        return value

    def values(self, ref: str) -> list[str]:
        """Several secrets in one reference, space-separated (a rotation: old and new)."""
        return self.get(ref).split()


def new_signing_secret() -> str:
    """A Standard Webhooks secret: `whsec_` + base64 of 24 random bytes."""
    import base64

    return "whsec_" + base64.b64encode(random.token_bytes(24)).decode()


def hint(url: str) -> str:
    """What people may see of a URL that is a credential: its scheme and host."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}/…" if parts.hostname else "…"
