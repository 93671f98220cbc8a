"""The README's commands and the CLI, run for real (README commands cannot drift)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOBTRAIL = [sys.executable, "-m", "jobtrail.cli"]


def _run(*args: str, home: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*JOBTRAIL, "--home", str(home), *args], capture_output=True,
                          text=True, input=stdin, timeout=300, check=True, cwd=ROOT)


def test_readme_names_the_two_commands_and_ci_runs_the_test_one() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    assert blocks[:2] == ["bash scripts/run.sh\n", "bash scripts/test.sh\n"]
    assert "exec bash scripts/test.sh" in (ROOT / ".ci/run").read_text()
    run = (ROOT / "scripts/run.sh").read_text()
    assert "scripts/setup.sh" in run and "jobtrail\" demo" in run
    test = (ROOT / "scripts/test.sh").read_text()
    for step in ("scripts/setup.sh", "dev kafka fetch", "ruff\" check", "mypy", "pytest"):
        assert step in test, step


def test_demo_shows_all_five_sources_and_is_idempotent(tmp_path: Path) -> None:
    first = _run("demo", "--no-colour", home=tmp_path)
    assert "stored 166, duplicates 0, dead-lettered 1" in first.stdout
    assert "sources: job, network, node, scheduler, storage" in first.stdout
    assert "attempt 1: failed" in first.stdout and "attempt 2: completed" in first.stdout
    assert "rank-0 .. rank-504 (x64)" in first.stdout
    assert "abc123secretvalue7" not in first.stdout
    # GPU time counted once (issue 27): 512 x (rework 5m10s + held 4m + restore 2m) = 95.29
    assert "95.29 GPU-hours and 250 steps lost" in first.stdout
    assert "not counted: setback 11.5 min, queue 0.0 min" in first.stdout
    second = _run("demo", "--no-colour", home=tmp_path)
    assert "stored 0, duplicates 166" in second.stdout
    stats = json.loads(_run("stats", home=tmp_path).stdout)
    assert stats["raw"] == stats["final"]
    assert stats["final"]["events"] == 166 and stats["duplicate_event_ids"] == 0


def test_ingest_stdin_and_timeline_filters(tmp_path: Path) -> None:
    sample = _run("sample-events", home=tmp_path).stdout
    out = _run("ingest", "-", home=tmp_path, stdin=sample)
    assert "field 'attributes.step'" in out.stderr
    rows = [json.loads(line) for line in _run(
        "timeline", "job-7b-001", "--project", "llm-pretrain", "--attempt", "2", "--json",
        "--since", "2026-11-30T09:01:30Z", "--until", "2026-11-30T09:05:00Z",
        home=tmp_path).stdout.splitlines()]
    assert rows and {r["attempt"] for r in rows} == {2}
    assert rows[0]["type"] == "job.started"
    other = _run("timeline", "job-7b-001", "--project", "someone-else", "--no-colour",
                 home=tmp_path)
    assert "no timeline rows" in other.stdout


def test_schema_export_covers_every_type(tmp_path: Path) -> None:
    from schemas.registry import REGISTRY

    _run("schema", "export", "--out", str(tmp_path / "s"), home=tmp_path)
    envelope = json.loads((tmp_path / "s/jobtrail-event.schema.json").read_text())
    assert sorted(envelope["properties"]["type"]["enum"]) == sorted(REGISTRY)
    assert len(envelope["allOf"]) == len(REGISTRY)
    assert "cluster" in envelope["required"] and "id" not in envelope["required"]
    step = json.loads((tmp_path / "s/attributes/job.step.schema.json").read_text())
    assert step["required"] == ["step"]
    assert step["properties"]["step"]["minimum"] == 0


def test_the_sample_events_file_is_the_demo_sample() -> None:
    """examples/sample-events.jsonl (the README's cluster-mode input) is what `jobtrail demo`
    loads; regenerate it with `python -c "from jobtrail.learn import sample; print(sample.jsonl(),
    end='')" > examples/sample-events.jsonl`."""
    from pathlib import Path

    from jobtrail.learn import sample

    path = Path(__file__).resolve().parent.parent / "examples" / "sample-events.jsonl"
    assert path.read_text() == sample.jsonl().rstrip("\n") + "\n"
