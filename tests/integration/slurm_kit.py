"""A real Slurm 22.05 for the tests: `scripts/slurm-up.sh` (munge, MariaDB, slurmdbd,
slurmctld, 4 slurmd with 8 fake GPUs each on 127.0.0.1) started once per session and stopped
by pid at the end; helpers to submit jobs and wait, always with a deadline.

Skipped only when Slurm cannot be installed here (not root, no apt); under CI=true a missing
Slurm fails the run instead, like the Kafka broker.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

from jobtrail.collect.sinks import RuntimeSink
from jobtrail.collect.slurm import SlurmCollector
from jobtrail.runtime.embedded import EmbeddedLog, EmbeddedRunner
from jobtrail.runtime.sink import Sink
from jobtrail.store import Store
from processors.pipeline import Pipeline
from processors.topology import Topology

ROOT = Path(__file__).resolve().parent.parent.parent
SLURMCTLD_LOG = Path("/var/log/slurm/slurmctld.log")
T = TypeVar("T")


def _unavailable(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"Slurm must run in CI: {why}")
    pytest.skip(f"no Slurm: {why}")


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A running Slurm; yields a shared directory jobs can write to."""
    if shutil.which("slurmctld") is None and os.geteuid() != 0:
        _unavailable("slurmctld is not installed and installing needs root")
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        _unavailable("slurmctld is not installed and there is no apt-get")
    env = dict(os.environ)  # JT_LIVE (default /tmp/jt-live): a crashed run's daemons are stopped
    subprocess.run(["bash", str(ROOT / "scripts/slurm-down.sh")], env=env,
                   capture_output=True, timeout=60, check=False)
    up = subprocess.run(["bash", str(ROOT / "scripts/slurm-up.sh")], env=env,
                        capture_output=True, text=True, timeout=600, check=False)
    if up.returncode != 0:  # stop what it did start (munged, MariaDB...) before giving up
        subprocess.run(["bash", str(ROOT / "scripts/slurm-down.sh")], env=env,
                       capture_output=True, timeout=120, check=False)
        _unavailable(f"scripts/slurm-up.sh exited {up.returncode}: {up.stderr[-2000:]}")
    # not under pytest's basetemp: other sessions on the machine rotate it away under a job
    work = Path(env.get("JT_LIVE") or "/tmp/jt-live") / f"jobs-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    work.chmod(0o777)
    try:
        yield work
    finally:
        subprocess.run(["bash", str(ROOT / "scripts/slurm-down.sh")], env=env,
                       capture_output=True, timeout=120, check=False)
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def idle_cluster(slurm: Path) -> Iterator[Path]:
    """Each test starts on an idle cluster and leaves one, whether it passed or not: a failed
    test's jobs (a `sleep 300` on n3, say) would otherwise hold the GPUs the next test asks
    for, and fail it too. Bounded: 60 s for the controller to forget nothing running."""
    _settle()
    yield slurm
    _settle()


def _settle() -> None:
    subprocess.run(["scancel", "--user", "root"], capture_output=True, timeout=60, check=False)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        states = subprocess.run(["squeue", "-h", "-o", "%T"], capture_output=True, text=True,
                                timeout=60, check=False).stdout.split()
        if not states:
            break
        time.sleep(0.5)
    nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True,
                           text=True, timeout=60, check=False).stdout.split("\n")
    for line in nodes:
        name, _, state = line.partition(" ")
        if name and state.strip() not in ("idle", "mix", "alloc"):
            subprocess.run(["scontrol", "update", f"nodename={name}", "state=resume"],
                           capture_output=True, timeout=60, check=False)


def sh(*argv: str) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr}")
    return done.stdout


def sbatch(work: Path, body: str, *options: str) -> str:
    script = work / f"job-{time.monotonic_ns()}.sh"
    script.write_text("#!/bin/bash\n" + body + "\n")
    out = sh("sbatch", "--parsable", f"--output={work}/slurm-%j.out", "--gres=gpu:2",
             *options, str(script))
    return out.strip().split(";")[0]


def job(job_id: str) -> dict[str, Any]:
    """The controller's record of a job (squeue --json returns every job it holds)."""
    for record in json.loads(sh("squeue", "--json"))["jobs"]:
        if str(record["job_id"]) == job_id:
            return record  # type: ignore[no-any-return]
    return {}


def attempts_in_sacct(job_id: str) -> list[dict[str, Any]]:
    """Every attempt sacct recorded (22.05 --json lists requeued ones too), oldest first."""
    jobs = json.loads(sh("sacct", "--json", "-j", job_id))["jobs"]
    return sorted(jobs, key=lambda j: (j["time"]["submission"], j["time"]["start"]))


def wait_until(what: str, check: Callable[[], T | None], timeout_s: float,
               every: Callable[[], object] = lambda: None, poll_s: float = 0.5,
               explain: Callable[[], object] = lambda: "") -> T:
    """Poll `check` (after `every`) until it returns something truthy or the deadline;
    `explain` says what was still missing."""
    deadline = time.monotonic() + timeout_s
    while True:
        every()
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what} "
                                 f"{explain()}")
        time.sleep(poll_s)


def collector(store: Store, tmp: Path, **options: Any) -> SlurmCollector:
    """An in-process collector writing into the test's store through the embedded runner."""
    sink = Sink(store, Pipeline(timedelta(seconds=30), Topology()))
    sink.restore()
    runner = EmbeddedRunner(sink, EmbeddedLog(tmp / "log"), batch_size=500)
    return SlurmCollector(RuntimeSink(runner), tmp / "cursor.json", log_path=SLURMCTLD_LOG,
                          **options)
