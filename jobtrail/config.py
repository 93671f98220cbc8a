"""Settings, injected: `Settings.from_env(environ)` reads `JOBTRAIL_*`; tests pass dicts.

Embedded mode is the default: no broker, chDB under `JOBTRAIL_HOME` (default `./var`).
Setting `JOBTRAIL_KAFKA` (bootstrap `host:port`) selects cluster mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from jobtrail.identity.config import OidcConfig
from jobtrail.identity.principal import ROLES, check_grants
from jobtrail.reports.retention import RetentionPolicy

if TYPE_CHECKING:
    from ingest.adapters import AdapterConfig


def _int(env: Mapping[str, str], key: str, default: int) -> int:
    raw = env.get(key)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{key} must be an integer, got {raw!r}") from None


def _float(env: Mapping[str, str], key: str, default: float) -> float:
    raw = env.get(key)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{key} must be a number, got {raw!r}") from None


def _never(seconds: float) -> float | None:
    return None if seconds < 0 else seconds


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
    worker_port: int = 0
    """Where `jobtrail worker` serves /livez, /healthz and /metrics (on `http_host`); 0: not."""
    """How long the consumer group waits for a silent worker before its partitions move to
    the others (Kafka's session timeout; heartbeats go every tenth of it)."""
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
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    """Days each class of rows is kept (`JOBTRAIL_RETENTION_*_DAYS`; jobtrail.reports.retention)."""
    """The only environment variables a channel's `url_env`/`secret_env` may name."""
    alerts_interval_s: float = 5.0
    """How often `jobtrail serve` (embedded mode) decides and delivers notifications (0: it
    does not; run `jobtrail notify`, as cluster mode does)."""

    @property
    def authenticated(self) -> bool:
        """Whether any credential is configured (else the API is open: local use only)."""
        return bool(self.api_tokens or self.oidc or self.auth_proxy_header)

    def adapter_config(self) -> AdapterConfig:
        """The adapters' mapping files, loaded and validated (raises ValueError naming them)."""
        from ingest.adapters import AdapterConfig

        return AdapterConfig.load(self.alert_mapping, self.cloudevents_mapping)

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
        tokens: dict[str, tuple[str, ...]] = {}
        # JOBTRAIL_API_TOKENS="tok1=proj-a,proj-b;tok2=proj-c"
        for entry in filter(None, (env.get("JOBTRAIL_API_TOKENS") or "").split(";")):
            token, _, projects = entry.partition("=")
            if not token or not projects:
                raise ValueError("JOBTRAIL_API_TOKENS entries look like token=proj-a,proj-b")
            tokens[token.strip()] = tuple(p.strip() for p in projects.split(",") if p.strip())
            check_grants(tokens[token.strip()])
        public_url = (env.get("JOBTRAIL_PUBLIC_URL") or "http://localhost:8080").rstrip("/")
        return cls(
            home=Path(env.get("JOBTRAIL_HOME") or "var"),
            clickhouse_dsn=env.get("JOBTRAIL_CLICKHOUSE", ""),
            database=env.get("JOBTRAIL_DATABASE") or "jobtrail",
            clickhouse_cluster=env.get("JOBTRAIL_CLICKHOUSE_CLUSTER", ""),
            clickhouse_timeout_s=_float(env, "JOBTRAIL_CLICKHOUSE_TIMEOUT_S", 60.0),
            kafka=env.get("JOBTRAIL_KAFKA", ""),
            topic_prefix=env.get("JOBTRAIL_TOPIC_PREFIX", "jobtrail."),
            partitions=_int(env, "JOBTRAIL_PARTITIONS", 1),
            app_id=env.get("JOBTRAIL_APP_ID") or "jobtrail-worker",
            session_timeout_s=_float(env, "JOBTRAIL_SESSION_TIMEOUT_S", 30.0),
            store_retry_s=_float(env, "JOBTRAIL_STORE_RETRY_S", 300.0),
            worker_port=_int(env, "JOBTRAIL_WORKER_PORT", 0),
            batch_size=_int(env, "JOBTRAIL_BATCH_SIZE", 5000),
            batch_seconds=_float(env, "JOBTRAIL_BATCH_SECONDS", 0.5),
            wire_batch=max(1, _int(env, "JOBTRAIL_WIRE_BATCH", 500)),
            wire_key=(env.get("JOBTRAIL_WIRE_KEY") or "").encode(),
            attribution_slack_s=_float(env, "JOBTRAIL_ATTRIBUTION_SLACK_S", 30.0),
            lateness_s=_float(env, "JOBTRAIL_LATENESS_S", 600.0),
            lateness_given=(env.get("JOBTRAIL_LATENESS_S") or "") != "",
            evict_after_s=_never(_float(env, "JOBTRAIL_EVICT_AFTER_S", 3600.0)),
            evict_quiet_s=_never(_float(env, "JOBTRAIL_EVICT_QUIET_S", 86400.0)),
            topology_file=Path(env["JOBTRAIL_TOPOLOGY"]) if env.get("JOBTRAIL_TOPOLOGY") else None,
            http_host=env.get("JOBTRAIL_HTTP_HOST") or "127.0.0.1",
            http_port=_int(env, "JOBTRAIL_HTTP_PORT", 8080),
            parse_budget_s=_float(env, "JOBTRAIL_PARSE_BUDGET_S", 30.0),
            alert_mapping=env.get("JOBTRAIL_ALERT_MAPPING", ""),
            cloudevents_mapping=env.get("JOBTRAIL_CLOUDEVENTS_MAPPING", ""),
            rules_file=Path(env["JOBTRAIL_RULES"]) if env.get("JOBTRAIL_RULES") else None,
            api_tokens=tokens,
            log_fsync=_fsync(env.get("JOBTRAIL_LOG_FSYNC") or "always"),
            snapshot_interval_s=_float(env, "JOBTRAIL_SNAPSHOT_INTERVAL_S", 10.0),
            gc_young=max(0, _int(env, "JOBTRAIL_GC_YOUNG", 50_000)),
            public_url=public_url,
            identity=(env.get("JOBTRAIL_IDENTITY") or "").strip(),
            session_key=(env.get("JOBTRAIL_SESSION_KEY") or "").encode(),
            session_max_age_s=_float(env, "JOBTRAIL_SESSION_MAX_AGE_S", 8 * 3600),
            oidc=_oidc(env, public_url),
            **_proxy(env),
            grafana_url=(env.get("JOBTRAIL_GRAFANA_URL") or "http://localhost:3000").rstrip("/"),
            smtp=env.get("JOBTRAIL_SMTP", ""),
            smtp_from=env.get("JOBTRAIL_SMTP_FROM") or "jobtrail@localhost",
            smtp_starttls=(env.get("JOBTRAIL_SMTP_STARTTLS") or "") in ("1", "true", "yes"),
            delivery_attempts=max(1, _int(env, "JOBTRAIL_DELIVERY_ATTEMPTS", 8)),
            alerts_interval_s=_float(env, "JOBTRAIL_ALERTS_INTERVAL_S", 5.0),
            alert_hosts=tuple(h.strip() for h in (env.get("JOBTRAIL_ALERT_HOSTS") or "")
                              .split(",") if h.strip()),
            alert_timeout_s=_float(env, "JOBTRAIL_ALERT_TIMEOUT_S", 10.0),
            channel_env_prefix=_env_prefix(env.get("JOBTRAIL_CHANNEL_ENV_PREFIX")),
            retention=RetentionPolicy.from_env(env),
        )


def _role(env: Mapping[str, str], key: str) -> str:
    role = env.get(key) or "viewer"
    if role not in ROLES:
        raise ValueError(f"{key} must be one of {', '.join(ROLES)}, got {role!r}")
    return role


def _oidc(env: Mapping[str, str], public_url: str) -> OidcConfig | None:
    issuer = env.get("JOBTRAIL_OIDC_ISSUER") or ""
    if not issuer:
        return None
    client = env.get("JOBTRAIL_OIDC_CLIENT_ID") or ""
    if not client:
        raise ValueError("JOBTRAIL_OIDC_CLIENT_ID is required with JOBTRAIL_OIDC_ISSUER")
    return OidcConfig(
        issuer=issuer, client_id=client,
        client_secret=env.get("JOBTRAIL_OIDC_CLIENT_SECRET") or "",
        redirect_uri=env.get("JOBTRAIL_OIDC_REDIRECT") or f"{public_url}/auth/callback",
        scopes=env.get("JOBTRAIL_OIDC_SCOPES") or "openid profile email",
        user_claim=env.get("JOBTRAIL_OIDC_USER_CLAIM") or "preferred_username",
        teams_claim=env.get("JOBTRAIL_OIDC_TEAMS_CLAIM") or "groups",
        projects_claim=env.get("JOBTRAIL_OIDC_PROJECTS_CLAIM") or "projects",
        role_claim=env.get("JOBTRAIL_OIDC_ROLE_CLAIM") or "jobtrail_role",
        default_role=_role(env, "JOBTRAIL_OIDC_DEFAULT_ROLE"))


def _proxy(env: Mapping[str, str]) -> dict[str, Any]:
    import ipaddress

    header = (env.get("JOBTRAIL_AUTH_PROXY_HEADER") or "").strip()
    addresses = tuple(a.strip() for a in (env.get("JOBTRAIL_AUTH_PROXY_ADDRESSES") or "")
                      .split(",") if a.strip())
    for address in addresses:
        try:
            ipaddress.ip_network(address, strict=False)
        except ValueError:
            raise ValueError(f"JOBTRAIL_AUTH_PROXY_ADDRESSES: {address!r} is not an address "
                             "or network") from None
    if header and not addresses:
        raise ValueError("JOBTRAIL_AUTH_PROXY_HEADER needs JOBTRAIL_AUTH_PROXY_ADDRESSES (the "
                         "proxy's addresses: the header is trusted from them only)")
    return {"auth_proxy_header": header, "auth_proxy_addresses": addresses,
            "auth_proxy_teams_header": env.get("JOBTRAIL_AUTH_PROXY_TEAMS_HEADER") or "",
            "auth_proxy_projects_header": env.get("JOBTRAIL_AUTH_PROXY_PROJECTS_HEADER") or "",
            "auth_proxy_role_header": env.get("JOBTRAIL_AUTH_PROXY_ROLE_HEADER") or "",
            "auth_proxy_default_role": _role(env, "JOBTRAIL_AUTH_PROXY_DEFAULT_ROLE")}


def _fsync(value: str) -> Literal["always", "never"]:
    if value == "always":
        return "always"
    if value == "never":
        return "never"
    raise ValueError(f"JOBTRAIL_LOG_FSYNC must be always or never, got {value!r}")


def _env_prefix(value: str | None) -> str:
    """A prefix long enough to name a family of variables (never all of JOBTRAIL_)."""
    prefix = "JOBTRAIL_CHANNEL_" if value is None or value == "" else value
    if len(prefix) < 4 or prefix.upper() in ("JOBTRAIL_", "JOBTRAIL"):
        raise ValueError("JOBTRAIL_CHANNEL_ENV_PREFIX must name a family of variables of "
                         f"their own (e.g. JOBTRAIL_CHANNEL_), got {prefix!r}")
    return prefix
