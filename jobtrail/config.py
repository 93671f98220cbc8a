"""Settings, injected: `Settings.from_env(environ)` reads `JOBTRAIL_*`; tests pass dicts.

Embedded mode is the default: no broker, chDB under `JOBTRAIL_HOME` (default `./var`).
Setting `JOBTRAIL_KAFKA` (bootstrap `host:port`) selects cluster mode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from jobtrail import variables
from jobtrail.identity.config import OidcConfig
from jobtrail.reports.retention import RetentionPolicy
from jobtrail.variables import SettingError

if TYPE_CHECKING:
    from ingest.adapters import AdapterConfig
    from processors.incidents.rules import Rules
    from schemas.topology import TopologyFile

T = TypeVar("T")


@dataclass(frozen=True)
class Settings:
    home: Path = Path("var")
    clickhouse_dsn: str = ""
    """Empty means the embedded engine under `home/chdb`."""
    database: str = "jobtrail"
    clickhouse_cluster: str = ""
    """The ClickHouse cluster (its name in the servers' `remote_servers`) whose nodes hold
    the tables as Replicated + Distributed (`jobtrail.store.cluster_ddl`); empty: one server."""
    clickhouse_timeout_s: float = 60.0
    """How long one request to a ClickHouse server may take before the client gives up and
    retries it (inserts carry deduplication tokens, so a retried insert that had landed is a
    no-op). A worker wants it short: a store that hangs is then seen as down and backed off."""
    kafka: str = ""
    """Bootstrap servers; empty means embedded mode."""
    topic_prefix: str = "jobtrail."
    partitions: int = 1
    app_id: str = "jobtrail-worker"
    store_retry_s: float = 300.0
    """How long the worker retries a ClickHouse that does not answer before it exits (without
    committing) for its supervisor to restart it."""
    session_timeout_s: float = 30.0
    """How long the consumer group waits for a silent worker before its partitions move to
    the others (Kafka's session timeout; heartbeats go every tenth of it)."""
    worker_port: int = 0
    """Where `jobtrail worker` serves /livez, /healthz and /metrics (on `http_host`); 0: not."""
    batch_size: int = 5000
    batch_seconds: float = 0.5
    wire_batch: int = 500
    """Events per Kafka message on jobtrail.events (1 = one event per message)."""
    wire_key: bytes = field(default=b"", repr=False)
    """A secret shared by ingest and the workers (`JOBTRAIL_WIRE_KEY`): ingest signs what it
    produces to jobtrail.events (HMAC-SHA256, header `jobtrail-sig`), and a worker takes a
    signed message as already validated and redacted (the fast path). Without it, or for a
    message without a valid signature, the worker validates and redacts every record again."""
    attribution_slack_s: float = 30.0
    lateness_s: float = 600.0
    """How far behind the newest event time an event may arrive and still be attributed to
    an attempt that starts later."""
    lateness_given: bool = False
    """Whether the operator set `lateness_s` (`JOBTRAIL_LATENESS_S`): an entry point with a
    default of its own (a file import's week, `jobtrail ingest`) keeps the operator's."""
    evict_after_s: float | None = 3600.0
    """A settled (resolved, closed, withdrawn) incident leaves the worker's memory after this
    long without a new decision (event time); it is folded back from `incident_log` when
    needed. Negative: never (the detector keeps every incident it decided)."""
    evict_quiet_s: float | None = 86400.0
    """The same for an incident still active but without a new decision this long."""
    topology_file: Path | None = None
    http_host: str = "127.0.0.1"
    http_port: int = 8080
    allow_unauthenticated: bool = False
    """Whether `serve` may listen beyond loopback with no credential configured
    (`JOBTRAIL_ALLOW_UNAUTHENTICATED`): an explicit opt-in, never a default."""
    parse_budget_s: float = 30.0
    """How long one `POST /v1/ingest/{adapter}` payload may take to parse; past it the
    request is answered 413 and nothing of it is accepted."""
    api_tokens: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False)
    """token -> its grants (projects, `*`, `@infra`, `user:`, `service:`, `role:`, `team:`,
    `label:`; `jobtrail.identity.principal`). With no token, OIDC or auth proxy configured
    the API is open (local dev only)."""
    identity: str = ""
    """Who the CLI records as acting (`JOBTRAIL_IDENTITY`; default: the OS user)."""
    session_key: bytes = field(default=b"", repr=False)
    """Signs browser sessions (`JOBTRAIL_SESSION_KEY`); empty: a random key per process."""
    session_max_age_s: float = 8 * 3600
    oidc: OidcConfig | None = None
    """OpenID Connect login for the web pages (`JOBTRAIL_OIDC_ISSUER`, ...)."""
    auth_proxy_header: str = ""
    """A trusted auth proxy's user header (`JOBTRAIL_AUTH_PROXY_HEADER`, e.g. X-WEBAUTH-USER),
    accepted only from `auth_proxy_addresses`."""
    auth_proxy_addresses: tuple[str, ...] = ()
    auth_proxy_teams_header: str = ""
    auth_proxy_projects_header: str = ""
    auth_proxy_role_header: str = ""
    auth_proxy_default_role: str = "viewer"
    alert_mapping: str = ""
    """YAML file adding to/overriding the Alertmanager/Grafana alertname mapping."""
    cloudevents_mapping: str = ""
    """YAML file mapping foreign CloudEvent types to ours."""
    rules_file: Path | None = None
    """Detection/routing/severity rules (default: processors/incidents/rules.yaml)."""
    log_fsync: Literal["always", "never"] = "always"
    """Embedded log durability: `always` fsyncs every append before ingest answers
    (accepted means on disk); `never` leaves it to the OS (benchmarks only)."""
    snapshot_interval_s: float = 10.0
    """How often the processors' state is saved; a restart replays at most this much."""
    gc_young: int = 50_000
    """Allocations between the collector's young-generation passes in a runtime (0: the
    interpreter's 700). At 700, full passes over the processors' large, long-lived state cost
    a sixth of the embedded drain (docs/scaling.md)."""
    public_url: str = "http://localhost:8080"
    """Where people reach this API (links in notifications)."""
    grafana_url: str = "http://localhost:3000"
    """Where people reach Grafana (incident and job timeline links in notifications)."""
    smtp: str = ""
    """host:port of the SMTP relay for the email channel (credentials: JOBTRAIL_SMTP_USER /
    JOBTRAIL_SMTP_PASSWORD, read at send time, never stored)."""
    smtp_from: str = "jobtrail@localhost"
    smtp_starttls: bool = False
    delivery_attempts: int = 8
    """A delivery is given up after this many attempts (or 24 h)."""
    alert_hosts: tuple[str, ...] = ()
    """The channel policy's operator entries (`jobtrail.alerts.egress`): addresses and CIDRs
    channels may reach although not public (`127.0.0.1` for a local receiver, an internal
    relay's network); host name patterns (fnmatch), if any, are the only names channels may
    use. Whatever is listed, every address a name resolves to must be public or listed."""
    alert_timeout_s: float = 10.0
    """How long one channel send may wait to connect and for each read. A failed
    `/v1/subscriptions/{id}/test` answers after this long whatever the cause (no timing
    oracle)."""
    channel_env_prefix: str = "JOBTRAIL_CHANNEL_"
    """The only environment variables a channel's `url_env`/`secret_env` may name."""
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    """Days each class of rows is kept (`JOBTRAIL_RETENTION_*_DAYS`; jobtrail.reports.retention)."""
    alerts_interval_s: float = 5.0
    """How often `jobtrail serve` (embedded mode) decides and delivers notifications (0: it
    does not; run `jobtrail notify`, as cluster mode does)."""

    @property
    def authenticated(self) -> bool:
        """Whether any credential is configured (else the API is open: local use only)."""
        return bool(self.api_tokens or self.oidc or self.auth_proxy_header)

    def check_listener(self) -> None:
        """Refuse (SettingError) to serve the API beyond loopback with no credential: it
        would serve reads and writes of every project to anyone who reaches the address."""
        if self.authenticated or self.allow_unauthenticated or loopback(self.http_host):
            return
        raise SettingError("JOBTRAIL_HTTP_HOST", f"{self.http_host!r} (or serve --host) is "
                           "not a loopback address and no credential is configured "
                           "(JOBTRAIL_API_TOKENS, "
                           "JOBTRAIL_OIDC_ISSUER or JOBTRAIL_AUTH_PROXY_HEADER): anyone who "
                           "reaches it could read and write every project. Configure one, "
                           "listen on 127.0.0.1, or set JOBTRAIL_ALLOW_UNAUTHENTICATED=1 to "
                           "serve it open on purpose")

    def adapter_config(self) -> AdapterConfig:
        """The adapters' mapping files, loaded and validated (SettingError naming the
        variable and the file)."""
        from ingest.adapters import AdapterConfig

        alerts = _file("JOBTRAIL_ALERT_MAPPING", self.alert_mapping,
                       lambda path: AdapterConfig.load(alert_mapping=path))
        events = _file("JOBTRAIL_CLOUDEVENTS_MAPPING", self.cloudevents_mapping,
                       lambda path: AdapterConfig.load(cloudevents_mapping=path))
        return AdapterConfig(alerts.alert_mapping if alerts else None,
                             events.cloudevents_mapping if events else None)

    def topology_spec(self) -> TopologyFile | None:
        """The topology file (`JOBTRAIL_TOPOLOGY`), validated; None when unset."""
        from schemas import topology

        return _file("JOBTRAIL_TOPOLOGY", self.topology_file, lambda p: topology.load(Path(p)))

    def rules(self) -> Rules:
        """The incident rules (`JOBTRAIL_RULES`, else the built-in ones), validated."""
        from processors.incidents.rules import load_rules

        if self.rules_file is None:
            return load_rules(None)
        loaded = _file("JOBTRAIL_RULES", self.rules_file, lambda p: load_rules(Path(p)))
        assert loaded is not None
        return loaded

    def check_files(self) -> None:
        """Read and validate every file a setting names (mapping files, rules, topology),
        so a long-running process refuses a bad one at start, naming the variable."""
        self.adapter_config()
        self.rules()
        self.topology_spec()

    @property
    def cluster_mode(self) -> bool:
        return bool(self.kafka)

    @property
    def dsn(self) -> str:
        return self.clickhouse_dsn or f"chdb://{(self.home / 'chdb').resolve()}"

    def topic(self, name: str) -> str:
        return f"{self.topic_prefix}{name}"

    def with_(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """Every `JOBTRAIL_*` variable parsed by its kind (`jobtrail.variables`), then the
        rules between them; `SettingError` names the variable refused."""
        v = variables.read(env)
        public_url = v["JOBTRAIL_PUBLIC_URL"].rstrip("/")
        return cls(
            home=Path(v["JOBTRAIL_HOME"]),
            clickhouse_dsn=v["JOBTRAIL_CLICKHOUSE"],
            database=v["JOBTRAIL_DATABASE"],
            clickhouse_cluster=v["JOBTRAIL_CLICKHOUSE_CLUSTER"],
            clickhouse_timeout_s=v["JOBTRAIL_CLICKHOUSE_TIMEOUT_S"],
            kafka=v["JOBTRAIL_KAFKA"],
            topic_prefix=v["JOBTRAIL_TOPIC_PREFIX"],
            partitions=v["JOBTRAIL_PARTITIONS"],
            app_id=v["JOBTRAIL_APP_ID"],
            session_timeout_s=v["JOBTRAIL_SESSION_TIMEOUT_S"],
            store_retry_s=v["JOBTRAIL_STORE_RETRY_S"],
            worker_port=v["JOBTRAIL_WORKER_PORT"],
            batch_size=v["JOBTRAIL_BATCH_SIZE"],
            batch_seconds=v["JOBTRAIL_BATCH_SECONDS"],
            wire_batch=v["JOBTRAIL_WIRE_BATCH"],
            wire_key=v["JOBTRAIL_WIRE_KEY"].encode(),
            attribution_slack_s=v["JOBTRAIL_ATTRIBUTION_SLACK_S"],
            lateness_s=v["JOBTRAIL_LATENESS_S"],
            lateness_given=variables.given(env, "JOBTRAIL_LATENESS_S"),
            evict_after_s=v["JOBTRAIL_EVICT_AFTER_S"],
            evict_quiet_s=v["JOBTRAIL_EVICT_QUIET_S"],
            topology_file=_path(v["JOBTRAIL_TOPOLOGY"]),
            http_host=v["JOBTRAIL_HTTP_HOST"],
            http_port=v["JOBTRAIL_HTTP_PORT"],
            allow_unauthenticated=v["JOBTRAIL_ALLOW_UNAUTHENTICATED"],
            parse_budget_s=v["JOBTRAIL_PARSE_BUDGET_S"],
            alert_mapping=v["JOBTRAIL_ALERT_MAPPING"],
            cloudevents_mapping=v["JOBTRAIL_CLOUDEVENTS_MAPPING"],
            rules_file=_path(v["JOBTRAIL_RULES"]),
            api_tokens=v["JOBTRAIL_API_TOKENS"],
            log_fsync=v["JOBTRAIL_LOG_FSYNC"],
            snapshot_interval_s=v["JOBTRAIL_SNAPSHOT_INTERVAL_S"],
            gc_young=v["JOBTRAIL_GC_YOUNG"],
            public_url=public_url,
            identity=v["JOBTRAIL_IDENTITY"],
            session_key=v["JOBTRAIL_SESSION_KEY"].encode(),
            session_max_age_s=v["JOBTRAIL_SESSION_MAX_AGE_S"],
            oidc=_oidc(v, public_url),
            **_proxy(v),
            grafana_url=v["JOBTRAIL_GRAFANA_URL"].rstrip("/"),
            smtp=v["JOBTRAIL_SMTP"],
            smtp_from=v["JOBTRAIL_SMTP_FROM"],
            smtp_starttls=v["JOBTRAIL_SMTP_STARTTLS"],
            delivery_attempts=v["JOBTRAIL_DELIVERY_ATTEMPTS"],
            alerts_interval_s=v["JOBTRAIL_ALERTS_INTERVAL_S"],
            alert_hosts=v["JOBTRAIL_ALERT_HOSTS"],
            alert_timeout_s=v["JOBTRAIL_ALERT_TIMEOUT_S"],
            channel_env_prefix=_env_prefix(v["JOBTRAIL_CHANNEL_ENV_PREFIX"]),
            retention=RetentionPolicy.from_values(v),
        )


def loopback(host: str) -> bool:
    """Whether every address `host` names is a loopback one (an address literal, or a name
    resolved here: `localhost`); the unspecified address (all interfaces) is not."""
    import ipaddress
    import socket

    def one(text: str) -> bool:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
            address = address.ipv4_mapped
        return address.is_loopback

    try:
        return one(host.strip("[]"))
    except ValueError:
        pass
    try:
        found = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        return False
    return bool(found) and all(one(str(a)) for a in found)


def _file(variable: str, path: str | Path | None, load: Callable[[str], T]) -> T | None:
    """What `load` reads from the file a variable names (None when unset); a file that
    cannot be read or is refused is a SettingError naming the variable and the file."""
    import yaml

    if not path:
        return None
    try:
        return load(str(path))
    except (OSError, ValueError, yaml.YAMLError) as exc:
        reason = str(exc) if str(path) in str(exc) else f"{path}: {exc}"
        raise SettingError(variable, reason.replace("\n", " ")) from None


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


def _oidc(v: Mapping[str, Any], public_url: str) -> OidcConfig | None:
    issuer = v["JOBTRAIL_OIDC_ISSUER"]
    if not issuer:
        return None
    if not v["JOBTRAIL_OIDC_CLIENT_ID"]:
        raise SettingError("JOBTRAIL_OIDC_CLIENT_ID", "required with JOBTRAIL_OIDC_ISSUER")
    return OidcConfig(
        issuer=issuer, client_id=v["JOBTRAIL_OIDC_CLIENT_ID"],
        client_secret=v["JOBTRAIL_OIDC_CLIENT_SECRET"],
        redirect_uri=v["JOBTRAIL_OIDC_REDIRECT"] or f"{public_url}/auth/callback",
        scopes=v["JOBTRAIL_OIDC_SCOPES"], user_claim=v["JOBTRAIL_OIDC_USER_CLAIM"],
        teams_claim=v["JOBTRAIL_OIDC_TEAMS_CLAIM"],
        projects_claim=v["JOBTRAIL_OIDC_PROJECTS_CLAIM"],
        role_claim=v["JOBTRAIL_OIDC_ROLE_CLAIM"], default_role=v["JOBTRAIL_OIDC_DEFAULT_ROLE"])


def _proxy(v: Mapping[str, Any]) -> dict[str, Any]:
    header, addresses = v["JOBTRAIL_AUTH_PROXY_HEADER"], v["JOBTRAIL_AUTH_PROXY_ADDRESSES"]
    if header and not addresses:
        raise SettingError("JOBTRAIL_AUTH_PROXY_HEADER", "needs JOBTRAIL_AUTH_PROXY_ADDRESSES "
                           "(the proxy's addresses: the header is trusted from them only)")
    return {"auth_proxy_header": header, "auth_proxy_addresses": addresses,
            "auth_proxy_teams_header": v["JOBTRAIL_AUTH_PROXY_TEAMS_HEADER"],
            "auth_proxy_projects_header": v["JOBTRAIL_AUTH_PROXY_PROJECTS_HEADER"],
            "auth_proxy_role_header": v["JOBTRAIL_AUTH_PROXY_ROLE_HEADER"],
            "auth_proxy_default_role": v["JOBTRAIL_AUTH_PROXY_DEFAULT_ROLE"]}


def _env_prefix(prefix: str) -> str:
    """A prefix long enough to name a family of variables (never all of JOBTRAIL_)."""
    if prefix.upper() in ("JOBTRAIL_", "JOBTRAIL"):
        raise SettingError("JOBTRAIL_CHANNEL_ENV_PREFIX", "must name a family of variables of "
                           f"their own (e.g. JOBTRAIL_CHANNEL_), got {prefix!r}")
    return prefix
