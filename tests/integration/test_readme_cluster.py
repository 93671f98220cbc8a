"""The README's "Cluster mode" block, run as written on a fresh clone: broker, ClickHouse
server, topology, worker, serve, the sample through Kafka, and the incident the demo shows.

The only changes to the block: the API port (8080 may be taken on a shared machine) and a
trap that stops what the block started if it fails half-way. The clone's `.venv` is this
interpreter's (a link), so `scripts/setup.sh` is not re-run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trust_kit import free_port

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def readme_block() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Cluster mode"):]
    found = re.search(r"```bash\n(?P<body>.*?)```", section, re.S)
    assert found, "the Cluster mode section has no bash block"
    return found.group("body")


def test_the_readme_cluster_recipe_runs_on_a_fresh_clone(tmp_path: Path) -> None:
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse"], capture_output=True,
                      check=False).returncode != 0:
        pytest.skip("not a git checkout")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    (clone / ".venv").symlink_to(sys.prefix)
    port = free_port()
    block = readme_block().replace("localhost:8080", f"localhost:{port}")
    script = ("set -e\n"
              "trap 'kill $(jobs -p) 2>/dev/null; .venv/bin/jobtrail dev clickhouse stop; "
              ".venv/bin/jobtrail dev kafka stop' ERR\n" + block)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBTRAIL_")}
    env.update(PYTHONPATH=str(clone), JOBTRAIL_HTTP_PORT=str(port))
    try:
        done = subprocess.run(["bash", "-c", script], cwd=clone, env=env, capture_output=True,
                              text=True, timeout=900, check=False)
    finally:
        for service in ("clickhouse", "kafka"):  # a no-op when the block stopped them
            subprocess.run([sys.executable, "-m", "jobtrail.cli", "dev", service, "stop"],
                           cwd=clone, env=env, capture_output=True, timeout=120, check=False)
    logs = "".join(f"\n--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                   for p in (clone / "var").glob("*.log"))
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}{logs}"
    # `jobtrail incidents` and the API both show the demo's incident
    assert done.stdout.count("leaf-05/p9") >= 2, done.stdout[-4000:]
    assert '"incidents"' in done.stdout and "network" in done.stdout
