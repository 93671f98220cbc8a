"""Every `JOBTRAIL_*` variable against junk, negative, zero, huge and non-finite values: refused
at start naming the variable (one line, exit 2 from any command, never a traceback) unless
its kind documents the value; no variable is read outside the table; identifiers that reach
SQL text are plain; the API does not listen beyond loopback without a credential."""

from __future__ import annotations

import math
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from jobtrail import variables
from jobtrail.cli.main import main
from jobtrail.config import Settings, loopback
from jobtrail.reports import retention
from jobtrail.store import Store
from jobtrail.variables import VARIABLES, SettingError
from jobtrail.variables.kinds import Choice, Days, Flag, Number, Text
from tests.trust_kit import JOBTRAIL, ROOT, _env, free_port

PROBES = {
    "junk": "abc;DROP`'\"",
    "negative": "-1",
    "zero": "0",
    "huge": "1e12",
    "huger": "9" * 40,
    "overflow": "1e400",
    "nan": "nan",
    "inf": "inf",
    "-inf": "-inf",
    "control": "ok\x07",
}

FREE_TEXT = {
    # a path or a secret is any one line of text: every probe but the control one is one
    "JOBTRAIL_HOME", "JOBTRAIL_TOPOLOGY", "JOBTRAIL_RULES", "JOBTRAIL_ALERT_MAPPING",
    "JOBTRAIL_CLOUDEVENTS_MAPPING", "JOBTRAIL_KAFKA_CACHE", "JOBTRAIL_DEV_TMP",
    "JOBTRAIL_WIRE_KEY", "JOBTRAIL_SESSION_KEY", "JOBTRAIL_OIDC_CLIENT_SECRET",
    "JOBTRAIL_SMTP_USER", "JOBTRAIL_SMTP_PASSWORD", "JOBTRAIL_UNSUBSCRIBE_KEY",
    "JOBTRAIL_TOKEN", "JOBTRAIL_GRANT_PASSWORD", "JOBTRAIL_DEV_CLICKHOUSE_PASSWORD",
    "JOBTRAIL_IDENTITY",
}
"""Documented acceptance: these take any text (without control characters); the test
fails when a new variable is free text without being listed here."""
ANY_WORD = {"JOBTRAIL_OIDC_CLIENT_ID", "JOBTRAIL_OIDC_USER_CLAIM", "JOBTRAIL_OIDC_TEAMS_CLAIM",
            "JOBTRAIL_OIDC_PROJECTS_CLAIM", "JOBTRAIL_OIDC_ROLE_CLAIM"}
"""Documented acceptance: an issuer's client id or claim name is any text without spaces
(it is compared, never interpreted)."""


def _refuses(kind: Any, raw: str) -> bool | None:
    """Whether the table's kind must refuse `raw` (None: its documented shape decides)."""
    text = raw.strip()
    if isinstance(kind, Number):
        if kind.never and text == "never":
            return False
        try:
            value = float(text) if not kind.integer else int(text)
        except ValueError:
            return True
        if not math.isfinite(value):
            return True
        if kind.never and value < 0:
            return False
        return value < kind.low or value > kind.high or (kind.low_open and value == kind.low)
    if isinstance(kind, Days):
        return not (text.isdigit() and int(text) <= kind.high)
    if isinstance(kind, Choice):
        return text not in kind.values
    if isinstance(kind, Flag):
        return text not in ("0", "1")
    if "\x07" in raw:
        return True
    return None


def _case(variable: variables.Variable, probe: str) -> Any:
    return pytest.param(variable, probe, id=f"{variable.name}-{probe}")


CASES = [_case(v, p) for v in VARIABLES for p in PROBES]


@pytest.mark.parametrize(("variable", "probe"), CASES)
def test_every_variable_refuses_what_its_kind_does_not_take(variable: variables.Variable,
                                                            probe: str) -> None:
    raw = PROBES[probe]
    try:
        Settings.from_env({variable.name: raw})
    except SettingError as exc:
        assert exc.variable == variable.name
        assert str(exc).startswith(f"{variable.name}: "), str(exc)
        if getattr(variable.kind, "secret", False) and len(raw) > 2:
            assert raw not in str(exc)  # a secret's value is never echoed
        refused = True
    else:
        refused = False
    expected = _refuses(variable.kind, raw)
    if expected is not None:
        assert refused is expected, (variable.kind.shape, raw)
    elif variable.name in FREE_TEXT | ANY_WORD:
        assert not refused, (variable.kind.shape, raw)
    elif probe == "junk":  # a structured kind (URL, host:port, networks, tokens, a pattern)
        assert refused, (variable.name, variable.kind.shape)


def test_free_text_variables_are_the_documented_ones() -> None:
    free = {v.name for v in VARIABLES if isinstance(v.kind, Text) and v.kind.pattern is None}
    assert free == FREE_TEXT


@pytest.mark.parametrize("variable", VARIABLES, ids=lambda v: v.name)
def test_a_refused_variable_stops_any_command_with_one_line_and_status_2(
        variable: variables.Variable) -> None:
    raw = "nan" if _refuses(variable.kind, "nan") else PROBES["control"]
    result = CliRunner().invoke(main, ["schema", "types"], env={variable.name: raw})
    assert result.exit_code == 2, (result.output, result.exception)
    assert isinstance(result.exception, SystemExit)
    assert f"Error: {variable.name}: " in result.output
    assert "Traceback" not in result.output


ENTRY_POINTS = [
    ["serve"], ["worker"], ["ingest", "-"], ["report", "retention"],
    ["report", "changes", "--project", "p"], ["demo"], ["notify", "--once"],
    ["timeline", "j", "--project", "p"], ["migrate"], ["incidents"],
]


def _jobtrail(home: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*JOBTRAIL, "--home", str(home), *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env=_env(env), check=False,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("args", ENTRY_POINTS, ids=lambda a: " ".join(a))
def test_the_issues_retention_value_stops_every_entry_point_cleanly(args: list[str],
                                                                   tmp_path: Path) -> None:
    run = _jobtrail(tmp_path / "home", *args,
                    env={"JOBTRAIL_RETENTION_RAW_EVENTS_DAYS": "abc",
                         "JOBTRAIL_KAFKA": "127.0.0.1:9" if args == ["worker"] else ""})
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith("Error: JOBTRAIL_RETENTION_RAW_EVENTS_DAYS: "), run.stderr
    assert "Traceback" not in run.stderr and run.stderr.count("\n") == 1
    assert not (tmp_path / "home").exists()  # refused before anything was opened


def test_a_file_a_setting_names_is_read_at_start_and_refused_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: [\n")
    cases = [  # (variable, value, command)
        ("JOBTRAIL_RULES", str(tmp_path / "missing.yaml"), ["ingest", "-"]),
        ("JOBTRAIL_RULES", str(bad), ["serve"]),
        ("JOBTRAIL_TOPOLOGY", str(bad), ["serve"]),
        ("JOBTRAIL_TOPOLOGY", str(bad), ["report", "capacity", "--project", "p"]),
        ("JOBTRAIL_ALERT_MAPPING", str(tmp_path / "missing.yaml"), ["serve"]),
        ("JOBTRAIL_CLOUDEVENTS_MAPPING", str(bad), ["worker"]),
    ]
    for name, value, args in cases:
        run = _jobtrail(tmp_path / "home", *args,
                        env={name: value, "JOBTRAIL_KAFKA": "127.0.0.1:9"
                             if args == ["worker"] else ""})
        assert run.returncode == 2, (name, args, run.stderr[-2000:])
        assert run.stderr.startswith(f"Error: {name}: "), (args, run.stderr[-2000:])
        assert value in run.stderr and "Traceback" not in run.stderr, run.stderr


_LITERAL = re.compile(r"""(?<=["'])(JOBTRAIL_[A-Z0-9_]*)(.?)""")
FAMILIES = {"JOBTRAIL_", "JOBTRAIL_CHANNEL_"}
"""Prefixes named as such: the server's own namespace, and the family channel secrets are
read from (`JOBTRAIL_CHANNEL_ENV_PREFIX`)."""


def test_no_variable_is_read_outside_the_table() -> None:
    names = {v.name for v in VARIABLES}
    found: dict[str, str] = {}
    for tree in ("jobtrail", "ingest", "processors", "schemas", "dashboards", "bench"):
        for path in sorted((ROOT / tree).rglob("*.py")):
            for name, after in _LITERAL.findall(path.read_text()):
                if after == "{":  # f"JOBTRAIL_RETENTION_{...}_DAYS": a prefix of the table's
                    assert any(n.startswith(name) for n in names), (path, name)
                    continue
                found.setdefault(name, str(path.relative_to(ROOT)))
    outside = {n: p for n, p in found.items() if n not in names and n not in FAMILIES}
    assert outside == {}, "add these variables to jobtrail/variables (kind, range, doc)"
    assert len(found) > 40  # the scan sees the code


def test_the_operations_guide_shows_the_table() -> None:
    guide = (ROOT / "docs/operations.md").read_text()
    assert variables.markdown() in guide, "regenerate docs/operations.md's settings table " \
        "from jobtrail.variables.markdown()"


def test_values_the_table_takes_reach_the_settings() -> None:
    s = Settings.from_env({
        "JOBTRAIL_HTTP_PORT": " 9090 ", "JOBTRAIL_EVICT_AFTER_S": "never",
        "JOBTRAIL_EVICT_QUIET_S": "-1", "JOBTRAIL_ALERTS_INTERVAL_S": "0",
        "JOBTRAIL_SMTP_STARTTLS": "yes", "JOBTRAIL_KAFKA": "k1:9092, k2:9093",
        "JOBTRAIL_RETENTION_RAW_EVENTS_DAYS": "29000",
        "JOBTRAIL_RETENTION_TIMELINES_DAYS": "forever",
        "JOBTRAIL_DATABASE": "jobtrail_2", "JOBTRAIL_LATENESS_S": "0"})
    assert (s.http_port, s.evict_after_s, s.evict_quiet_s, s.alerts_interval_s) == \
        (9090, None, None, 0.0)
    assert (s.smtp_starttls, s.kafka, s.database, s.lateness_s, s.lateness_given) == \
        (True, "k1:9092,k2:9093", "jobtrail_2", 0.0, True)
    assert (s.retention.raw_events, s.retention.timelines) == (29000, 0)
    with pytest.raises(SettingError, match="JOBTRAIL_WIRE_BATCH"):
        Settings.from_env({"JOBTRAIL_WIRE_BATCH": "0"})  # was taken as 1, silently
    with pytest.raises(SettingError, match="JOBTRAIL_SMTP_STARTTLS"):
        Settings.from_env({"JOBTRAIL_SMTP_STARTTLS": "maybe"})  # was taken as off
    with pytest.raises(SettingError, match="JOBTRAIL_API_TOKENS: entry 2: the same token"):
        Settings.from_env({"JOBTRAIL_API_TOKENS": "tok=a;tok=b"})


# --- identifiers that reach SQL text --------------------------------------------------------

BAD_NAMES = ["jobtrail;", "job`trail", "job'trail", 'job"trail', "1jobtrail", "job trail",
             "job-trail", "a" * 65, "jöbtrail", "jobtrail.events", "x; DROP DATABASE y"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_an_identifier_that_is_not_plain_is_refused_at_settings_and_at_the_store(
        name: str, tmp_path: Path) -> None:
    for variable in ("JOBTRAIL_DATABASE", "JOBTRAIL_CLICKHOUSE_CLUSTER"):
        with pytest.raises(SettingError, match=f"^{variable}: a ClickHouse identifier"):
            Settings.from_env({variable: name})
    dsn = f"chdb://{tmp_path / 'chdb'}"
    with pytest.raises(ValueError, match="database name"):
        Store.connect(dsn, name)
    with pytest.raises(ValueError, match="cluster name"):
        Store.connect(dsn, "jobtrail", cluster=name)
    with pytest.raises(ValueError, match="database name"):
        Store(None, name)
    with pytest.raises(ValueError, match="not a plain identifier"):
        retention.retention_statements(retention.RetentionPolicy(), database=name)


def test_a_name_with_a_trailing_newline_is_not_plain_for_the_store(tmp_path: Path) -> None:
    # `^...$` with re.match let "jobtrail\n" through: `$` matches before a final newline
    with pytest.raises(ValueError, match="database name"):
        Store.connect(f"chdb://{tmp_path / 'chdb'}", "jobtrail\n")
    assert Settings.from_env({"JOBTRAIL_DATABASE": "jobtrail\n"}).database == "jobtrail"


# --- the API beyond loopback ----------------------------------------------------------------

@pytest.mark.parametrize(("host", "is_loopback"), [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("[::1]", True),
    ("::ffff:127.0.0.1", True), ("localhost", True), ("0.0.0.0", False), ("::", False),
    ("10.1.2.3", False), ("0", False), ("no-such-host.invalid", False)])
def test_loopback_means_every_address_is_loopback(host: str, is_loopback: bool) -> None:
    assert loopback(host) is is_loopback


def test_the_api_is_refused_beyond_loopback_without_a_credential() -> None:
    open_wide = Settings.from_env({"JOBTRAIL_HTTP_HOST": "0.0.0.0"})
    with pytest.raises(SettingError) as refused:
        open_wide.check_listener()
    for name in ("JOBTRAIL_HTTP_HOST", "JOBTRAIL_API_TOKENS", "JOBTRAIL_OIDC_ISSUER",
                 "JOBTRAIL_AUTH_PROXY_HEADER", "JOBTRAIL_ALLOW_UNAUTHENTICATED"):
        assert name in str(refused.value)
    for credential in ({"JOBTRAIL_API_TOKENS": "tok-ops=*"},
                       {"JOBTRAIL_OIDC_ISSUER": "https://idp.example",
                        "JOBTRAIL_OIDC_CLIENT_ID": "jobtrail"},
                       {"JOBTRAIL_AUTH_PROXY_HEADER": "X-WEBAUTH-USER",
                        "JOBTRAIL_AUTH_PROXY_ADDRESSES": "10.0.0.5"},
                       {"JOBTRAIL_ALLOW_UNAUTHENTICATED": "1"}):
        Settings.from_env({"JOBTRAIL_HTTP_HOST": "0.0.0.0", **credential}).check_listener()
    Settings.from_env({}).check_listener()  # loopback, open: local use
    with pytest.raises(SettingError):
        Settings.from_env({"JOBTRAIL_HTTP_HOST": "0.0.0.0",
                           "JOBTRAIL_ALLOW_UNAUTHENTICATED": "0"}).check_listener()


def test_serve_refuses_all_interfaces_without_a_credential(tmp_path: Path) -> None:
    port = free_port()
    for args, env in ((["--host", "0.0.0.0"], {}),  # as deploy/k8s/jobtrail.yaml runs it
                      ([], {"JOBTRAIL_HTTP_HOST": "::"})):
        refused = _jobtrail(tmp_path / "home", "serve", *args, "--port", str(port), env=env)
        assert refused.returncode == 2, refused.stderr[-2000:]
        assert refused.stderr.startswith("Error: JOBTRAIL_HTTP_HOST: "), refused.stderr
        assert "is not a loopback address" in refused.stderr
        assert "JOBTRAIL_ALLOW_UNAUTHENTICATED=1" in refused.stderr
        assert not (tmp_path / "home").exists()  # refused before the store was opened
    bad_host = _jobtrail(tmp_path / "home", "serve", "--host", "x;y", env={})
    assert bad_host.returncode == 2 and "Invalid value for '--host'" in bad_host.stderr


# --- numbers given to the CLI -------------------------------------------------------------

NUMERIC_OPTIONS = [  # (command line before the value, the option named in the refusal)
    (["report", "changes", "--project", "p", "--window-days"], "--window-days"),
    (["timeline", "j", "--project", "p", "--attempt"], "--attempt"),
    (["dead-letters", "--limit"], "--limit"),
    (["serve", "--port"], "--port"),
    (["sample-events", "--synthetic"], "--synthetic"),
    (["ingest", "-", "--year"], "--year"),
    (["notify", "--interval"], "--interval"),
    (["notify", "--passes"], "--passes"),
    (["collect", "slurm", "--interval"], "--interval"),
    (["drill", "run", "--kind", "node-down", "--timeout"], "--timeout"),
    (["drill", "run", "--kind", "node-down", "--steps"], "--steps"),
]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e12", "-1", "99999999999999"])
@pytest.mark.parametrize(("args", "option"), NUMERIC_OPTIONS, ids=lambda a: str(a))
def test_a_numeric_option_is_finite_and_in_range_before_anything_runs(
        args: list[str], option: str, value: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["--home", str(tmp_path), *args, value])
    assert result.exit_code == 2, (result.output, result.exception)
    assert f"Invalid value for '{option}'" in result.output
    assert not (tmp_path / "chdb").exists()  # refused before the store was opened


def test_the_changes_report_refuses_a_window_before_any_query() -> None:
    from datetime import UTC, datetime, timedelta

    from jobtrail.reports import changes

    lo, hi = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 2, 1, tzinfo=UTC)
    for window in (timedelta(0), timedelta(days=-1), timedelta(days=366)):
        with pytest.raises(ValueError, match=r"^window: more than 0 and at most 365 days"):
            changes.load(None, ["p"], lo, hi, window=window)  # no store: no query was built
