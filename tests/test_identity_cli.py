"""The CLI, run on the host by an operator, records who runs it: `JOBTRAIL_IDENTITY` when
configured, else the OS user, with the credential that says which; `--by` naming anyone else
is refused."""

from __future__ import annotations

import getpass
import json
from pathlib import Path

from jobtrail.learn import sample
from tests.trust_kit import cli


def test_the_cli_records_the_operator_not_a_claimed_name(tmp_path: Path) -> None:
    home = tmp_path / "home"
    events = tmp_path / "events.jsonl"
    events.write_text(sample.jsonl())
    cli(home, "ingest", str(events))
    inc = json.loads(cli(home, "incidents", "--all", "--json").stdout.splitlines()[0])[
        "incident_id"]

    named = cli(home, "incident", "note", inc, "as configured",
                env={"JOBTRAIL_IDENTITY": "ic-ana"})
    assert "by person:ic-ana via cli:JOBTRAIL_IDENTITY" in named.stdout
    claimed = cli(home, "incident", "note", inc, "as bob", "--by", "bob", check=False,
                  env={"JOBTRAIL_IDENTITY": "ic-ana"})
    assert claimed.returncode != 0
    assert "--by bob: the CLI records who runs it (ic-ana, cli:JOBTRAIL_IDENTITY)" in \
        claimed.stderr
    cli(home, "incident", "note", inc, "as the OS user")

    log = json.loads(cli(home, "incident", "show", inc, "--json").stdout)["log"]
    notes = [(e["data"]["text"], e["actor"], e["credential"]) for e in log
             if e["kind"] == "note_added"]
    assert notes == [("as configured", "ic-ana", "cli:JOBTRAIL_IDENTITY"),
                     ("as the OS user", getpass.getuser(), "cli:os-user")]
