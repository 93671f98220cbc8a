"""One process per home: the embedded engine (chDB), the embedded log and the processor
snapshot under `JOBTRAIL_HOME` belong to whoever holds `home/.lock`.

chDB refuses a second process on the same path with an error that names neither the path nor
the holder; taking the lock first lets every command say what is going on ("in use by pid
4242, jobtrail serve, since 08:31") and what to do instead.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any


class HomeInUse(RuntimeError):
    """Another live process holds the home."""

    def __init__(self, home: Path, holder: dict[str, Any]) -> None:
        pid = holder.get("pid", "?")
        what = holder.get("command") or "another jobtrail process"
        since = holder.get("since", "")
        super().__init__(
            f"{home} is in use by pid {pid} ({what}{', since ' + since if since else ''}); "
            "stop it, use its HTTP API, or pass another --home")
        self.home = home
        self.holder = holder


_HELD: dict[Path, IO[str]] = {}
"""Homes this process holds: flock conflicts between two descriptors of one process too, and
a process may open its own home twice (the HTTP app and a CLI command in one test)."""


class HomeLock:
    """An advisory `flock` on `home/.lock`; the file says who holds it. Held until the process
    exits (the kernel drops it then, even on SIGKILL) or `release`."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.path = home / ".lock"
        self._fh: IO[str] | None = None

    def holder(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def acquire(self, command: str = "") -> HomeLock:
        if self._fh is not None:
            return self
        self.home.mkdir(parents=True, exist_ok=True)
        key = self.path.resolve()
        if key in _HELD:
            self._fh = _HELD[key]
            return self
        fh = self.path.open("a+")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise HomeInUse(self.home, self.holder()) from None
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps({"pid": os.getpid(),
                             "command": command or " ".join(Path(a).name for a in sys.argv[:2]),
                             "since": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")}))
        fh.flush()
        self._fh = fh
        _HELD[key] = fh
        return self

    def release(self) -> None:
        if self._fh is None:
            return
        _HELD.pop(self.path.resolve(), None)
        fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
        self._fh.close()
        self._fh = None

    def __enter__(self) -> HomeLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
