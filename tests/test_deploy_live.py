"""The shipped live-source configurations pass their daemons' own checkers, in every variant
render.sh can produce (imkmsg on and off, the journald example enabled)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RSYSLOG = ROOT / "deploy" / "rsyslog"


@pytest.mark.parametrize("kmsg", ["1", "0"])
def test_rsyslog_config_validates(tmp_path: Path, kmsg: str) -> None:
    if shutil.which("rsyslogd") is None:
        if os.environ.get("CI"):
            pytest.fail("rsyslogd must be installed in CI (scripts/test.sh)")
        pytest.skip("rsyslogd not installed")
    env = {**os.environ, "JOBTRAIL_KAFKA": "127.0.0.1:9", "JOBTRAIL_KMSG": kmsg,
           "JOBTRAIL_SPOOL": str(tmp_path / "spool")}
    out = tmp_path / "conf"
    done = subprocess.run(["bash", str(RSYSLOG / "render.sh"), str(out)], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    shutil.copy(RSYSLOG / "inputs.d" / "journald.conf.example",
                out / "inputs.d" / "journald.conf")
    check = subprocess.run(["rsyslogd", "-N1", "-f", str(out / "jobtrail.conf")],
                           capture_output=True, text=True, timeout=60, check=False)
    assert check.returncode == 0 and "error" not in check.stderr.lower(), check.stderr
