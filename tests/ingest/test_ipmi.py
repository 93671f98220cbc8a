"""A node's power from its BMC (`ingest/ipmi.py`): the public SEL and Redfish samples, read
field by field, and the classifier that tells a node losing power from one supply losing
its input."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ingest.adapters import Context, registry, run
from ingest.ipmi import classify
from tests.ingest.public_corpus import PUBLIC

READ_AT = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def _read(name: str, node: str = "gpu-node-7", tz: str = "UTC") -> list[object]:
    ctx = Context(producer="bmc", observed_at=READ_AT, cluster="c", node=node, tz=tz)
    return run(registry()["ipmi"], (PUBLIC / "bmc" / name).read_text(), ctx)


def test_ipmitool_sel_elist_power_off_then_back() -> None:
    events = [d for d in _read("ipmitool_sel_elist_power_off_down.txt", tz="Europe/Berlin")]
    assert [(e.type, e.entity, e.node, e.time, e.attributes["state"],  # type: ignore[attr-defined]
             e.attributes["cause"], e.attributes["record"], e.attributes["sensor"])
            for e in events] == [
        ("node.power", "gpu-node-7", "gpu-node-7", datetime(2019, 11, 15, 17, 50, 40, tzinfo=UTC),
         "off", "power_down", "30", "Power Unit Pwr Unit Status"),
        ("node.power", "gpu-node-7", "gpu-node-7", datetime(2019, 11, 15, 17, 50, 44, tzinfo=UTC),
         "on", "restored", "31", "Power Unit Pwr Unit Status")]
    assert events[0].severity.value == "critical"  # type: ignore[attr-defined]


def test_freeipmi_supply_failures_degrade_the_node_and_undated_records_say_so() -> None:
    events = _read("freeipmi_ipmi_sel_psu_failure.txt")
    assert [(e.attributes["state"], e.attributes["cause"], e.attributes["record"],  # type: ignore[attr-defined]
             e.attributes["time_source"], e.time) for e in events] == [  # type: ignore[attr-defined]
        ("degraded", "psu_failure", "2", "observed", READ_AT),
        ("degraded", "psu_failure", "3", "observed", READ_AT),
        ("degraded", "psu_failure", "4", "line", datetime(2017, 7, 20, 10, 29, 49, tzinfo=UTC)),
        ("degraded", "psu_failure", "5", "line", datetime(2017, 7, 20, 10, 30, 2, tzinfo=UTC))]


def test_redfish_log_entry_restored_supply() -> None:
    (event,) = _read("redfish_idrac_sel_psu_input_restored.json")
    assert (event.type, event.time, event.attributes["state"],  # type: ignore[attr-defined]
            event.attributes["record"], event.message) == (  # type: ignore[attr-defined]
        "node.power", datetime(2018, 12, 19, 10, 28, 32, tzinfo=UTC), "on", "27",
        "The input power for power supply 1 has been restored.")


def test_a_bmc_log_without_the_node_is_a_dead_letter_naming_it() -> None:
    out = _read("ipmitool_sel_elist_power_off_down.txt", node="")
    assert [(d.field, d.stage) for d in out] == [("node", "adapter.ipmi")] * 2  # type: ignore[attr-defined]


@pytest.mark.parametrize(("sensor", "text", "asserted", "expected"), [
    ("Power Unit Pwr Unit Status", "Power off/down", True, ("off", "power_down")),
    ("Power Unit Pwr Unit Status", "Power off/down", False, ("on", "restored")),
    ("Power Unit #0x01", "AC lost", True, ("off", "ac_lost")),
    ("Power Supply PS1 Status", "Power Supply AC lost", True, ("degraded", "ac_lost")),
    ("Power Supply / Converter", "Power supply redundancy is lost.", None,
     ("degraded", "redundancy_lost")),
    ("", "The system is powered off", None, ("off", "power_down")),
    ("Fan Processor 1 Fan", "Lower Non-critical going low", True, None),
    ("Management Subsys Health AutoCfg Status", "State Asserted", True, None),
])
def test_what_a_bmc_record_says_about_the_nodes_power(
        sensor: str, text: str, asserted: bool | None, expected: tuple[str, str] | None) -> None:
    assert classify(sensor, text, asserted) == expected
