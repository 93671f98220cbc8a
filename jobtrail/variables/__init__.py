"""Every `JOBTRAIL_*` environment variable, in one table: its kind, range, default and meaning.

`read(env)` parses them all (unset or empty: the default) and raises `SettingError` naming
the first variable whose value its kind refuses, so a process stops at start with one line
(`JOBTRAIL_HTTP_PORT: a whole number from 1 to 65535, got 'abc'`), never a traceback or a
value the engine cannot hold. Numbers are finite (NaN and infinities are refused) and bounded;
identifiers that reach SQL text follow ClickHouse's unquoted identifier rules; secrets are
never echoed. `jobtrail.config.Settings.from_env` builds the settings from what `read` gives;
the few variables a component reads itself when it needs them (credentials read at send
time, the dev tools' directories) are in the table too, marked `used="when used"`, and are
parsed with the same kinds at start. `markdown()` renders the table of docs/operations.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jobtrail.identity.principal import ROLES
from jobtrail.variables.kinds import (
    IDENTIFIER,
    Choice,
    Days,
    Entries,
    Flag,
    Host,
    HostPorts,
    Kind,
    Networks,
    Number,
    Text,
    Tokens,
    Url,
    shown,
)

__all__ = ["IDENTIFIER", "VARIABLES", "SettingError", "Variable", "markdown", "read"]

DAY_S = 86400.0
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_PREFIX = re.compile(r"[A-Za-z0-9._-]{1,200}")
_HEADER = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}")
_CLAIM = re.compile(r"[^\s\x00-\x1f\x7f]{1,256}")
_SCOPES = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+( [\x21\x23-\x5b\x5d-\x7e]+)*")
_EMAIL = re.compile(r"[^@\s<>]{1,64}@[A-Za-z0-9.-]{1,253}")
_ALERT_HOST = re.compile(r"[A-Za-z0-9.:\[\]/*?_-]+")
_ENV_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]{3,63}")
PATH = Text(4096, what="a path")
SECRET = Text(4096, what="a secret", secret=True)
SECONDS = "s"


class SettingError(ValueError):
    """A variable's value refused at start: the message names the variable."""

    def __init__(self, variable: str, reason: str) -> None:
        super().__init__(f"{variable}: {reason}")
        self.variable = variable


@dataclass(frozen=True)
class Variable:
    name: str
    kind: Kind
    default: Any
    doc: str
    used: str = "at start"
    """`at start` (parsed into `Settings`) or `when used` (read by the component that
    needs it, e.g. a credential at send time; still checked at start)."""


def _v(name: str, kind: Kind, default: Any, doc: str, used: str = "at start") -> Variable:
    return Variable(f"JOBTRAIL_{name}", kind, default, doc, used)


_RETENTION_DOC = ("days {what} is kept (0 or `forever`: kept forever); see Retention below")

VARIABLES: tuple[Variable, ...] = (
    # --- where state lives --------------------------------------------------------------
    _v("HOME", PATH, "var", "embedded state: `chdb/` (ClickHouse engine), `log/` (embedded "
       "log)"),
    _v("CLICKHOUSE", Url(("http", "https", "chdb"), secret=True), "",
       "`http(s)://user:pass@host:8123` for a server; empty: chDB under the home"),
    _v("DATABASE", Text(64, IDENTIFIER, "a ClickHouse identifier (letters, digits, _)"),
       "jobtrail", "database (created if missing)"),
    _v("CLICKHOUSE_CLUSTER", Text(64, IDENTIFIER, "a ClickHouse identifier (letters, digits, "
                                                 "_)"), "",
       "a ClickHouse cluster name: migrations in their `ON CLUSTER` form (replicated local "
       "tables behind Distributed ones, docs/scaling.md)"),
    _v("CLICKHOUSE_TIMEOUT_S", Number(0, 3600, low_open=True, unit=SECONDS), 60.0,
       "bound on every request to a ClickHouse server, so a hung store is seen as down"),
    _v("STORE_RETRY_S", Number(0, 7 * DAY_S, unit=SECONDS), 300.0,
       "how long a worker retries an unavailable store (capped backoff, nothing committed) "
       "before it exits 70"),
    # --- Kafka and the worker ------------------------------------------------------------
    _v("KAFKA", HostPorts(many=True), "", "bootstrap servers; selects cluster mode (empty: "
       "embedded)"),
    _v("TOPIC_PREFIX", Text(200, _PREFIX, "letters, digits, `.`, `_`, `-`"), "jobtrail.",
       "topic prefix"),
    _v("PARTITIONS", Number(1, 10_000, integer=True), 1, "partitions for created topics"),
    _v("APP_ID", Text(200, _NAME, "letters, digits, `.`, `_`, `-`"), "jobtrail-worker",
       "Faust app id = consumer group"),
    _v("SESSION_TIMEOUT_S", Number(1, 3600, unit=SECONDS), 30.0,
       "Kafka consumer-group session timeout: how soon a dead worker's partitions move"),
    _v("WORKER_PORT", Number(0, 65535, integer=True), 0,
       "the worker's `/livez`, `/healthz`, `/readyz`, `/metrics` listener (on "
       "`JOBTRAIL_HTTP_HOST`; no tenant data); 0: off"),
    _v("BATCH_SIZE", Number(1, 1_000_000, integer=True), 5000, "events per processing batch"),
    _v("BATCH_SECONDS", Number(0, 3600, low_open=True, unit=SECONDS), 0.5,
       "max wait to fill a batch"),
    _v("WIRE_BATCH", Number(1, 100_000, integer=True), 500,
       "events per Kafka message produced by ingest"),
    _v("WIRE_KEY", SECRET, "", "shared secret: ingest signs what it produces to "
       "`jobtrail.events`, workers store signed lines without re-validating them; unsigned "
       "or forged lines are validated and redacted (docs/scaling.md)"),
    # --- processing ----------------------------------------------------------------------
    _v("ATTRIBUTION_SLACK_S", Number(0, DAY_S, unit=SECONDS), 30.0,
       "membership slack around an attempt's start/end"),
    _v("LATENESS_S", Number(0, 366 * DAY_S, unit=SECONDS), 600.0,
       "the lateness horizon (`jobtrail ingest FILE`: 604800 unless set): how far behind "
       "the watermark an event may arrive and still reach an attempt that starts later, and "
       "still be decided as if it had arrived in time order (a late event re-evaluates the "
       "window and revises the incidents, docs/incidents.md). A file import takes a week "
       "unless it is set, so files imported in any order give the incidents of the events' "
       "times; the journal's cap (250,000 events) and the replay budget bound its cost"),
    _v("EVICT_AFTER_S", Number(0, 3650 * DAY_S, never=True, unit=SECONDS), 3600.0,
       "a settled (resolved, closed, withdrawn) incident leaves the worker's memory after "
       "this long without a new decision (event time); it is read back from `incident_log` "
       "when a command, a postmortem or late evidence needs it (docs/scaling.md)"),
    _v("EVICT_QUIET_S", Number(0, 3650 * DAY_S, never=True, unit=SECONDS), 86400.0,
       "the same for an incident still active with no new decision this long"),
    _v("TOPOLOGY", PATH, None, "topology file (docs/topology.md)"),
    _v("RULES", PATH, None, "incident detection, routing and severity rules "
       "(docs/incidents.md; validated at start); default: built in"),
    _v("ALERT_MAPPING", PATH, "", "YAML adding to/overriding the alertname mapping of "
       "`alertmanager` and `grafana` (docs/adapters.md)"),
    _v("CLOUDEVENTS_MAPPING", PATH, "", "YAML mapping foreign CloudEvent types to ours "
       "(docs/adapters.md)"),
    _v("LOG_FSYNC", Choice(("always", "never")), "always",
       "embedded log durability: `always` fsyncs every append before ingest answers; "
       "`never` leaves it to the OS (benchmarks only)"),
    _v("SNAPSHOT_INTERVAL_S", Number(0, DAY_S, low_open=True, unit=SECONDS), 10.0,
       "how often the processors' state is saved with its input position; a restart "
       "replays at most this much"),
    _v("GC_YOUNG", Number(0, 10_000_000, integer=True), 50_000,
       "allocations between the garbage collector's young passes in a runtime (`0`: "
       "Python's default, 700); the default spares the drain most full passes over the "
       "processors' state"),
    # --- the API ------------------------------------------------------------------------
    _v("HTTP_HOST", Host(), "127.0.0.1", "API listener address; an address other than "
       "loopback needs a credential (tokens, OIDC or an auth proxy) or "
       "`JOBTRAIL_ALLOW_UNAUTHENTICATED`"),
    _v("HTTP_PORT", Number(1, 65535, integer=True), 8080, "API listener port"),
    _v("ALLOW_UNAUTHENTICATED", Flag(), False,
       "let `serve` listen on an address other than loopback with no credential configured "
       "(anyone who reaches it reads and writes everything): an explicit opt-in"),
    _v("PARSE_BUDGET_S", Number(0, 3600, low_open=True, unit=SECONDS), 30.0,
       "how long one `POST /v1/ingest/NAME` payload may parse (counted from when its parse "
       "starts); past it: `413` naming the budget, nothing accepted (docs/adapters.md)"),
    _v("API_TOKENS", Tokens(), {}, "`tok1=proj-a,user:alice,role:commander,team:ml;"
       "ops=*;am=@infra,service:alertmanager,role:responder`: each token names its "
       "principal and grants (see [Identity and roles](#identity-and-roles)); when any "
       "credential is configured every request needs one, and reads *and writes* are "
       "limited to the principal's projects. Empty: the API is open (loopback only, unless "
       "`JOBTRAIL_ALLOW_UNAUTHENTICATED`)"),
    _v("IDENTITY", Text(128, what="a name"), "", "who the CLI records as acting (the "
       "operator on the host); default: the OS user"),
    _v("SESSION_KEY", SECRET, "", "signs browser sessions; set it so sessions survive a "
       "restart and several API processes share them; default: random per process"),
    _v("SESSION_MAX_AGE_S", Number(60, 30 * DAY_S, unit=SECONDS), 28800.0,
       "how long a sign-in lasts"),
    _v("OIDC_ISSUER", Url(), "", "OpenID Connect sign-in for the web pages (authorization "
       "code + PKCE); none: off"),
    _v("OIDC_CLIENT_ID", Text(256, _CLAIM, "text without spaces"), "",
       "the client id (required with the issuer)"),
    _v("OIDC_CLIENT_SECRET", SECRET, "", "the client secret"),
    _v("OIDC_REDIRECT", Url(), "", "the redirect URI; default "
       "`$JOBTRAIL_PUBLIC_URL/auth/callback`"),
    _v("OIDC_SCOPES", Text(512, _SCOPES, "space-separated scopes"), "openid profile email",
       "the scopes asked for"),
    _v("OIDC_USER_CLAIM", Text(256, _CLAIM, "a claim name"), "preferred_username",
       "the ID token claim naming the principal"),
    _v("OIDC_TEAMS_CLAIM", Text(256, _CLAIM, "a claim name"), "groups", "its teams"),
    _v("OIDC_PROJECTS_CLAIM", Text(256, _CLAIM, "a claim name"), "projects",
       "its projects (`*`: every project)"),
    _v("OIDC_ROLE_CLAIM", Text(256, _CLAIM, "a claim name"), "jobtrail_role",
       "its role (the highest known role in the claim)"),
    _v("OIDC_DEFAULT_ROLE", Choice(ROLES), "viewer",
       "the role when the claim names none"),
    _v("AUTH_PROXY_HEADER", Text(128, _HEADER, "an HTTP header name"), "",
       "a trusted auth proxy's user header (e.g. `X-WEBAUTH-USER`), refused (401) from any "
       "peer but `JOBTRAIL_AUTH_PROXY_ADDRESSES`"),
    _v("AUTH_PROXY_ADDRESSES", Networks(), (), "the proxy's addresses or networks "
       "(required with the header; the TCP peer, never `X-Forwarded-For`)"),
    _v("AUTH_PROXY_TEAMS_HEADER", Text(128, _HEADER, "an HTTP header name"), "",
       "the proxy's comma-separated teams header"),
    _v("AUTH_PROXY_PROJECTS_HEADER", Text(128, _HEADER, "an HTTP header name"), "",
       "the proxy's comma-separated projects header"),
    _v("AUTH_PROXY_ROLE_HEADER", Text(128, _HEADER, "an HTTP header name"), "",
       "the proxy's role header"),
    _v("AUTH_PROXY_DEFAULT_ROLE", Choice(ROLES),
       "viewer", "the role when the proxy sends none"),
    _v("PUBLIC_URL", Url(), "http://localhost:8080", "where people reach the API: the "
       "links in notifications (docs/subscriptions.md)"),
    _v("GRAFANA_URL", Url(), "http://localhost:3000", "where people reach Grafana "
       "(incident and job timeline links in notifications)"),
    # --- notifications ------------------------------------------------------------------
    _v("ALERTS_INTERVAL_S", Number(0, 3600, unit=SECONDS), 5.0,
       "how often `serve` (embedded mode) decides and delivers notifications; 0: it does "
       "not (run `jobtrail notify`)"),
    _v("ALERT_HOSTS", Entries(_ALERT_HOST, "addresses, networks or host name patterns"), (),
       "the channel policy's exceptions (docs/subscriptions.md): addresses/CIDRs channels "
       "may reach although not public (`127.0.0.1`, `10.20.0.0/16`); host name patterns "
       "(fnmatch), if any, are the only names channels may use. Every resolved address "
       "must be public or listed; empty: public addresses only"),
    _v("ALERT_TIMEOUT_S", Number(0, 300, low_open=True, unit=SECONDS), 10.0,
       "connect and read timeout of one channel send; a failed "
       "`/v1/subscriptions/{id}/test` answers after this long, whatever the cause"),
    _v("CHANNEL_ENV_PREFIX", Text(64, _ENV_PREFIX, "a variable name prefix"),
       "JOBTRAIL_CHANNEL_", "the only environment variables a channel's "
       "`url_env`/`secret_env` may name (never `JOBTRAIL_` alone, never the server's own "
       "secrets)"),
    _v("DELIVERY_ATTEMPTS", Number(1, 100, integer=True), 8,
       "attempts before a delivery is given up (also after 24 h)"),
    _v("SMTP", HostPorts(), "", "the email channel's relay (`host:port`); none: no email"),
    _v("SMTP_FROM", Text(320, _EMAIL, "an email address"), "jobtrail@localhost",
       "the sender of notification emails"),
    _v("SMTP_STARTTLS", Flag(), False, "upgrade the relay connection with STARTTLS"),
    _v("SMTP_USER", SECRET, "", "the relay's user (read at send time, never stored)",
       "when used"),
    _v("SMTP_PASSWORD", SECRET, "", "the relay's password (read at send time, never "
       "stored)", "when used"),
    _v("UNSUBSCRIBE_KEY", SECRET, "", "HMAC key of email unsubscribe links (set it when the "
       "API and the deliverer are separate processes); default: made once in "
       "`HOME/secrets.json`", "when used"),
    # --- retention (jobtrail.reports.retention) -------------------------------------------
    *(_v(f"RETENTION_{name}_DAYS", Days(36500), default, _RETENTION_DOC.format(what=what))
      for name, default, what in (
          ("RAW_EVENTS", 0, "every event (`events`, `event_ids`)"),
          ("TIMELINES", 0, "the job timelines and attempts"),
          ("DEAD_LETTERS", 0, "each dead letter"),
          ("INCIDENTS", 0, "a closed incident and its log, evidence, jobs and actions"),
          ("POSTMORTEMS", 0, "a closed incident with a published postmortem (not shorter "
                             "than incidents)"),
          ("DELIVERIES", 90, "notifications and delivery attempts"))),
    # --- read by tools when they run ---------------------------------------------------------
    _v("TOKEN", SECRET, "", "the API token `jobtrail collect --to URL` sends", "when used"),
    _v("GRANT_PASSWORD", SECRET, "", "the password `jobtrail access grant` gives the "
       "Grafana user (the default of `--password-env`)", "when used"),
    _v("KAFKA_CACHE", PATH, "", "where `jobtrail dev kafka` keeps the Maven-resolved jars; "
       "default `~/.cache/jobtrail`", "when used"),
    _v("DEV_TMP", PATH, "", "where the development ClickHouse server stages inserts; "
       "default the system's temporary directory", "when used"),
    _v("DEV_CLICKHOUSE_PASSWORD", SECRET, "", "internal: how `jobtrail dev clickhouse` "
       "hands its server process the password (never on a command line)", "when used"),
)

BY_NAME = {v.name: v for v in VARIABLES}


def parse(variable: Variable, raw: str | None) -> Any:
    """One variable's value (its default when unset or empty)."""
    if raw is None or raw.strip() == "":
        return variable.default
    try:
        return variable.kind.parse(raw)
    except ValueError as exc:
        secret = getattr(variable.kind, "secret", False)
        got = f"a value of {len(raw)} characters" if secret else shown(raw)
        raise SettingError(variable.name, f"{exc}, got {got}") from None


def read(env: Mapping[str, str]) -> dict[str, Any]:
    """Every variable of the table, parsed (SettingError names the first refused)."""
    return {v.name: parse(v, env.get(v.name)) for v in VARIABLES}


def given(env: Mapping[str, str], name: str) -> bool:
    """Whether the operator set the variable (not empty)."""
    return (env.get(name) or "").strip() != ""


def markdown() -> str:
    """The settings table of docs/operations.md."""
    rows = ["| variable | accepts | default | meaning |", "|---|---|---|---|"]
    for v in VARIABLES:
        default = _default_text(v.default)
        when = " (read when used)" if v.used == "when used" else ""
        rows.append(f"| `{v.name}` | {v.kind.shape} | {default} | {v.doc}{when} |")
    return "\n".join(rows) + "\n"


def _default_text(value: Any) -> str:
    if value in (None, "", (), {}):
        return "none"
    if value is True or value is False:
        return "on" if value else "off"
    if isinstance(value, int | float):
        return str(int(value)) if value == int(value) else str(value)
    return f"`{value}`"
