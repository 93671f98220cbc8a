"""`jobtrail rules show` prints the rules in force: the bundled file, or the one
`JOBTRAIL_RULES` names, with what opens an incident, its owner and why, and severity."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from jobtrail.cli.rules import rules
from jobtrail.config import Settings


def _show(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    settings = Settings.from_env({"JOBTRAIL_HOME": str(tmp_path), **(env or {})})
    result = CliRunner().invoke(rules, ["show", *args], obj=settings)
    return result.exit_code, result.output


def test_rules_show_prints_the_bundled_rules_in_words(tmp_path: Path) -> None:
    code, out = _show(tmp_path)
    assert code == 0, out
    assert out.startswith("rules in force: ") and "(bundled)" in out
    assert "  ib-port-flap: network.port_down when 2 within 300 s -> network  (switch or NIC " \
           "port went down)" in out
    assert "  network: switch-scoped, failed, owned by network (switch ports, links and NICs " \
           "belong to the network team)" in out
    assert "severity (the first level whose thresholds the impact reaches):" in out
    code, only = _show(tmp_path, "--class", "network")
    assert code == 0 and "ib-port-flap" in only and "gpu-xid-fatal" not in only
    code, parsed = _show(tmp_path, "--json")
    assert code == 0 and "ib-port-flap" in {s["name"] for s in json.loads(parsed)["signals"]}
    code, refused = _show(tmp_path, "--class", "nonsense")
    assert code != 0 and "no class 'nonsense' (known: " in refused


def test_rules_show_reads_the_file_in_force_and_names_its_errors(tmp_path: Path) -> None:
    bundled = (Path(__file__).parents[1] / "processors" / "incidents" / "rules.yaml").read_text()
    mine = tmp_path / "rules.yaml"
    mine.write_text(bundled.replace("count: 2, window_s: 300", "count: 1, window_s: 300"))
    code, out = _show(tmp_path, env={"JOBTRAIL_RULES": str(mine)})
    assert code == 0 and out.startswith(f"rules in force: {mine} ")
    assert "  ib-port-flap: network.port_down -> network" in out
    mine.write_text("signals: [{name: x}]\n")
    code, out = _show(tmp_path, env={"JOBTRAIL_RULES": str(mine)})
    assert code != 0 and "signals" in out
