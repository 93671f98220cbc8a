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


class Secrets:
    def __init__(self, home: Path, env: Mapping[str, str] | None = None) -> None:
        self.path = home / "secrets.json"
        self.env = os.environ if env is None else env

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
