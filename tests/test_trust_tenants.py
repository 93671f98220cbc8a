"""Issue 40, finding 3: every read surface, as project A's viewer and commander see it, over a
store that holds two tenants' jobs on one leaf switch (tests/tenants_kit.py).

Each HTTP GET route, each `jobtrail report` and each CLI read command is one row of a table;
every answer (status, JSON, Markdown or HTML, whole) is searched for B's identifiers, and the
impact figures in it are compared with A's own. A guard test fails when the app grows a GET
route, a report or a CLI command that the tables do not hold, so a new read surface cannot
skip the check.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from click.testing import CliRunner

from jobtrail.config import Settings
from jobtrail.http import RuntimeBackend, create_app
from jobtrail.identity import Principal
from jobtrail.runtime.embedded import EmbeddedRuntime
from jobtrail.store import Store
from processors.topology import Topology
from schemas.topology import TopologyFile
from tests import tenants_kit as kit

# --- the world: two tenants, one leaf, their incidents, notes, actions and subscriptions ----

@dataclass
class World:
    store: Store
    home: Path
    settings: Settings
    dsn: str
    ids: dict[str, str] = field(default_factory=dict)
    """shared, a_only, b_only (incidents); a_sub, b_sub (subscriptions)."""
    a_figures: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per incident A sees: A's own impacted jobs, GPUs, lost GPU-hours, lost steps."""
    b_figures: set[str] = field(default_factory=set)
    """B's own and the shared incident's whole impact figures, as they would print."""


def _settings(home: Path) -> Settings:
    import yaml

    topology = home / "topology.yaml"
    topology.write_text(yaml.safe_dump(kit.topology()))
    return Settings(home=home, api_tokens=dict(kit.TOKENS), topology_file=topology,
                    alerts_interval_s=0, public_url="http://127.0.0.1:1")


def _backend(settings: Settings, store: Store) -> RuntimeBackend:
    wiring = Topology.from_file(TopologyFile.model_validate(kit.topology()))
    return RuntimeBackend(EmbeddedRuntime(settings, topology=wiring, store=store))


def _as(token: str) -> Principal:
    return Principal.from_grants(token, kit.TOKENS[token])


def _command(runtime: Any, token: str, incident_id: str, command: str,
             data: dict[str, Any]) -> None:
    """A command as the API sends it: the caller's role and projects decide, and its data is
    tagged with the caller's projects (`http.incidents._authorise`)."""
    from jobtrail.http.incidents import _authorise
    from processors.incidents.model import Command

    who = _as(token)
    full = runtime.store.incident(incident_id, None)
    tagged = _authorise(who, command, full, data)
    runtime.command(Command(command_id=who.command_id(f"{command}-{uuid.uuid4().hex[:8]}"),
                            incident_id=incident_id, command=command, actor=who.actor(),
                            time=datetime.now(UTC), data=tagged))


def _subscribe(settings: Settings, store: Store, token: str, name: str) -> str:
    from jobtrail.alerts.secrets import Secrets
    from jobtrail.alerts.store import AlertStore
    from jobtrail.http.alerts import _build

    sub, _ = _build({"name": name, "owner": f"team:{name}",
                     "channel": {"kind": "webhook", "url": "https://hooks.example.com/x"}},
                    _as(token), Secrets(settings.home), settings)
    return str(AlertStore(store).put_subscription(sub, _as(token).name).id)


def _silence(store: Store, token: str, reason: str) -> None:
    from datetime import timedelta

    from jobtrail.alerts.store import AlertStore
    from processors.notify.model import Matcher, Silence

    who, now = _as(token), datetime.now(UTC)
    AlertStore(store).put_silence(Silence(
        id=f"sil-{reason}", matchers=(Matcher.parse("team=bea"),), starts=now,
        ends=now + timedelta(hours=1),
        reason=reason, by=who.name, projects=tuple(sorted(who.projects))), who.name)


def _deliveries(store: Store) -> None:
    """One recorded delivery per notification decided (as a send would record it)."""
    from jobtrail.alerts.store import AlertStore
    from jobtrail.alerts.worker import decide_pass

    alerts = AlertStore(store)
    decide_pass(alerts, datetime.now(UTC))
    rows = alerts.notifications(limit=1000)

    class Sent:
        def __init__(self, row: dict[str, Any]) -> None:
            self.notification_id, self.subscription_id = row["id"], row["subscription_id"]
            self.attempt, self.at, self.status, self.code = 1, datetime.now(UTC), "sent", 200
            self.latency_ms, self.error, self.next_at = 12, "", None
            self.channel, self.message_ids = "webhook", [f"msg-{row['id']}"]

    alerts.record([Sent(r) for r in rows])


@pytest.fixture(scope="module")
def world(chdb_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    from ingest.canonical import decode
    from schemas.events import Event

    database = f"t_{uuid.uuid4().hex[:12]}"
    store = Store.connect(f"chdb://{chdb_path}", database)
    store.migrate()
    home = tmp_path_factory.mktemp("tenants")
    settings = _settings(home)
    backend = _backend(settings, store)
    runtime = backend.runtime
    items = list(decode(kit.jsonl().decode(), producer="tenants-kit",
                        observed_at=datetime.now(UTC)))
    assert all(isinstance(i, Event) for i in items), [i for i in items
                                                      if not isinstance(i, Event)]
    runtime.submit(items)
    runtime.drain()
    w = World(store, home, settings, f"chdb://{chdb_path}")
    for row in store.incidents(None):
        projects = tuple(row["projects"])
        name = {(kit.A, kit.B): "shared", (kit.B, kit.A): "shared", (kit.A,): "a_only",
                (kit.B,): "b_only"}.get(tuple(sorted(projects, key=lambda p: p != kit.A)))
        assert name and name not in w.ids, (row, w.ids)
        w.ids[name] = row["incident_id"]
    assert set(w.ids) == {"shared", "a_only", "b_only"}, w.ids
    shared = w.ids["shared"]
    _command(runtime, "tok-b-commander", shared, "note",
             {"text": f"b-private-note: {kit.B_JOB} loss spiked at step 450"})
    _command(runtime, "tok-b-commander", shared, "add_action",
             {"title": f"b-private-action: rerun {kit.B_JOB} eval", "owner": "bea"})
    _command(runtime, "tok-a-commander", shared, "note", {"text": "vision: eval rerun booked"})
    _command(runtime, "tok-ops", shared, "note",
             {"text": f"restarted {kit.B}/{kit.B_JOB} and {kit.A}/{kit.A_JOB} after the leaf"})
    for incident in (shared, w.ids["a_only"], w.ids["b_only"]):
        _command(runtime, "tok-ops", incident, "draft_postmortem", {"owner": "opal"})
    w.ids["a_sub"] = _subscribe(settings, store, "tok-a-commander", "a-hook")
    w.ids["b_sub"] = _subscribe(settings, store, "tok-b-commander", "b-private-hook")
    _silence(store, "tok-b-commander", "b-private-silence")
    _deliveries(store)
    for name in ("shared", "a_only", "b_only"):
        full = store.incident(w.ids[name], None)
        assert full is not None
        a_jobs = [j for j in full["jobs"] if j["project"] == kit.A]
        b_jobs = [j for j in full["jobs"] if j["project"] == kit.B]
        if a_jobs:
            w.a_figures[w.ids[name]] = {
                "impacted_jobs": len({j["job_id"] for j in a_jobs}),
                "impacted_gpus": sum(j["gpus"] for j in a_jobs if j["role"] == "failed"),
                "lost_gpu_hours": round(sum(j["lost_gpu_hours"] for j in a_jobs), 6),
                "lost_steps": sum(j["lost_steps"] for j in a_jobs)}
        if b_jobs:  # B's figures, and the whole incident's, must never show to A
            for figure in (sum(j["lost_gpu_hours"] for j in b_jobs), full["lost_gpu_hours"]):
                if figure:
                    w.b_figures |= {f"{figure:.2f}", f"{figure:.3f}", str(round(figure, 6))}
    # the fixture is what the tests claim: the shared incident names B's job in its text
    full = store.incident(shared, None)
    assert kit.B_JOB in full["explanation"] and full["impacted_gpus"] == kit.A_GPUS + kit.B_GPUS
    runtime.close()
    yield w
    store.client.command(f"DROP DATABASE IF EXISTS {database}")


# --- what a leak is -----------------------------------------------------------------------

IMPACT = ("impacted_jobs", "impacted_gpus", "lost_gpu_hours", "lost_steps")


def _figures(value: Any, path: str = "") -> Iterator[tuple[str, str, Any]]:
    """(path, key, value) of every incident-level impact figure in a JSON answer."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k in IMPACT and "incident_id" in value:
                yield path, k, v
            yield from _figures(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _figures(v, f"{path}[{i}]")


def leaks(w: World, body: Any) -> list[str]:
    """Everything of B's in one answer: its identifiers anywhere in the serialised body, its
    figures (and the whole shared incident's) in text, and impact figures that are not A's."""
    text = body if isinstance(body, str) else json.dumps(body, default=str)
    found = [f"names {m!r}" for m in kit.foreign_marks(text)]
    found += [f"names B's {name} {w.ids[name]}" for name in ("b_only", "b_sub")
              if w.ids[name] in text]
    found += [f"shows B's or the whole incident's GPU-hours {f}" for f in sorted(w.b_figures)
              if re.search(rf"(?<![\d.]){re.escape(f)}(?![\d])", text)]
    found += [f"{f} GPUs (the whole incident's)" for f in (f"{kit.A_GPUS + kit.B_GPUS} GPUs",)
              if f in text]
    if not isinstance(body, str):
        for path, key, value in _figures(body):
            owner = _owner(body, path)
            mine = w.a_figures.get(owner, {})
            if key in mine and value != mine[key]:
                found.append(f"{path}.{key} = {value}, A's own is {mine[key]}")
    return found


def twin(w: World, request: str) -> str | None:
    """The same request about names that do not exist, when `request` names B's (its job,
    project, incident or subscription), else None: asked under A's projects, B's names must
    answer exactly as unknown ones do (the answer may echo the name asked for, nothing
    more)."""
    names = _unknowns(w)
    if not any(mine in request for mine in names):
        return None
    for mine, unknown in names.items():
        request = request.replace(mine, unknown)
    return request


def _unknowns(w: World) -> dict[str, str]:
    return {kit.B_JOB: "zz-no-such-job", kit.B: "zz-no-such-project",
            w.ids["b_only"]: "inc-0000000000000000", w.ids["b_sub"]: "sub-000000000000"}


def as_asked(w: World, answer: Any) -> Any:
    """An answer about the unknown names, with B's names put back where they were asked."""
    text = answer if isinstance(answer, str) else json.dumps(answer, default=str)
    for mine, unknown in _unknowns(w).items():
        text = text.replace(unknown, mine)
    return text if isinstance(answer, str) else json.loads(text)


def _owner(body: Any, path: str) -> str:
    """The incident id of the object at `path` (a JSON path `_figures` made)."""
    node = body
    for part in re.findall(r"\.([^.\[]+)|\[(\d+)\]", path):
        node = node[part[0]] if part[0] else node[int(part[1])]
    return str(node.get("incident_id", "")) if isinstance(node, dict) else ""


# --- HTTP: every GET route --------------------------------------------------------------

class Server:
    """The API on a loopback port in a thread of its own (its event loop), over the world's
    store; the tests are plain HTTP clients."""

    def __init__(self, w: World) -> None:
        self.backend = _backend(w.settings, w.store)
        self.app = create_app(w.settings, self.backend)
        self.loop = asyncio.new_event_loop()
        self.url = ""
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.runner = web.AppRunner(self.app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        self._ready.set()
        self.loop.run_forever()

    def start(self) -> Server:
        self._thread.start()
        assert self._ready.wait(120), "the API did not start within 2 min"
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(120)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(60)

    def get(self, path: str, token: str) -> tuple[int, Any]:
        request = urllib.request.Request(self.url + path, method="GET",
                                         headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=120) as resp:
                status, raw, kind = resp.status, resp.read(), resp.headers.get_content_type()
        except urllib.error.HTTPError as exc:
            status, raw, kind = exc.code, exc.read(), exc.headers.get_content_type()
        text = raw.decode("utf-8", "replace")
        return status, json.loads(text) if kind == "application/json" else text


@dataclass(frozen=True)
class Read:
    route: str
    """The route as the app declares it (its canonical path)."""
    urls: Callable[[World, Server], list[tuple[str, tuple[int, ...]]]]
    """The requests A makes on it, each with the statuses it may answer."""


def _ack(w: World, s: Server) -> list[tuple[str, tuple[int, ...]]]:
    from jobtrail.alerts.links import ack_link, unsubscribe_token
    from jobtrail.alerts.secrets import Secrets

    expires = int(time.time()) + 3600
    out = []
    for name in ("shared", "a_only"):
        link = ack_link("", Secrets(w.home), w.ids[name], w.ids["a_sub"], expires)
        out.append((link, (200, 403)))
    del unsubscribe_token
    return out


def _unsubscribe(w: World, s: Server) -> list[tuple[str, tuple[int, ...]]]:
    from jobtrail.alerts.links import unsubscribe_token
    from jobtrail.alerts.secrets import Secrets

    sub = w.ids["a_sub"]
    return [(f"/v1/subscriptions/{sub}/unsubscribe?token="
             f"{unsubscribe_token(Secrets(w.home), sub)}", (200,))]


AT = kit.when(3)
OK, HIDDEN = (200,), (200, 403, 404)
READS = [
    Read("/v1/jobs/{job_id}/timeline", lambda w, s: [
        (f"/v1/jobs/{kit.A_JOB}/timeline?project={kit.A}", OK),
        (f"/v1/jobs/{kit.A_EVAL}/timeline?project={kit.A}", OK),
        (f"/v1/jobs/{kit.B_JOB}/timeline?project={kit.A}", OK),
        (f"/v1/jobs/{kit.B_JOB}/timeline?project={kit.B}", (404,))]),
    Read("/v1/where", lambda w, s: [
        (f"/v1/where?switch=leaf-01&at={AT}&project={kit.A}", OK),
        (f"/v1/where?node=node-003&at={AT}&project={kit.A}", OK),
        (f"/v1/where?filesystem=lustre-scratch&at={AT}&project={kit.A}", OK),
        (f"/v1/where?switch=leaf-01&at={AT}&project={kit.A}&project={kit.B}", OK)]),
    Read("/v1/jobs/{job_id}/attempts/{attempt}", lambda w, s: [
        (f"/v1/jobs/{kit.A_JOB}/attempts/1?project={kit.A}", OK),
        (f"/v1/jobs/{kit.A_JOB}/attempts/2?project={kit.A}", OK),
        (f"/v1/jobs/{kit.B_JOB}/attempts/1?project={kit.A}", (404,)),
        (f"/v1/jobs/{kit.B_JOB}/attempts/1?project={kit.B}", (404,))]),
    Read("/v1/entities/{name}/timeline", lambda w, s: [
        (f"/v1/entities/{e}/timeline?project={kit.A}", OK)
        for e in ("leaf-01", "node-003", "node-005", "lustre-scratch", "node-001")]),
    Read("/v1/incidents", lambda w, s: [
        ("/v1/incidents", OK), (f"/v1/incidents?project={kit.A}", OK),
        (f"/v1/incidents?project={kit.B}", OK), ("/v1/incidents?status=open", OK),
        ("/v1/incidents?include=infrastructure", OK)]),
    Read("/v1/incidents/{incident_id}", lambda w, s: [
        (f"/v1/incidents/{w.ids['shared']}", OK), (f"/v1/incidents/{w.ids['a_only']}", OK),
        (f"/v1/incidents/{w.ids['b_only']}", (404,)),
        (f"/v1/incidents/{w.ids['shared']}?project={kit.B}", (404,))]),
    Read("/v1/incidents/{incident_id}/postmortem", lambda w, s: [
        (f"/v1/incidents/{w.ids[i]}/postmortem?format={f}", (200, 403) if i != "b_only"
         else (404,))
        for i in ("shared", "a_only", "b_only") for f in ("json", "md", "html")]),
    Read("/incidents/{incident_id}/postmortem", lambda w, s: [
        (f"/incidents/{w.ids[i]}/postmortem", (200, 403) if i != "b_only" else (404,))
        for i in ("shared", "a_only", "b_only")]),
    Read("/v1/followups", lambda w, s: [
        ("/v1/followups", OK), ("/v1/followups?overdue=true", OK),
        (f"/v1/followups?project={kit.B}", OK), ("/v1/followups?team=bea", OK)]),
    Read("/v1/subscriptions", lambda w, s: [("/v1/subscriptions", OK)]),
    Read("/v1/subscriptions/{sub_id}", lambda w, s: [
        (f"/v1/subscriptions/{w.ids['a_sub']}", OK),
        (f"/v1/subscriptions/{w.ids['b_sub']}", (404,))]),
    Read("/v1/silences", lambda w, s: [("/v1/silences", OK)]),
    Read("/v1/deliveries", lambda w, s: [
        ("/v1/deliveries", OK), (f"/v1/deliveries?subscription={w.ids['b_sub']}", OK)]),
    Read("/v1/subscriptions/{sub_id}/unsubscribe", _unsubscribe),
    Read("/v1/incidents/{incident_id}/ack", _ack),
    Read("/v1/whoami", lambda w, s: [("/v1/whoami", OK)]),
    Read("/auth/login", lambda w, s: [("/auth/login", (200, 302, 303, 404))]),
    Read("/auth/callback", lambda w, s: [("/auth/callback", (302, 303, 400, 403, 404))]),
    Read("/ui/{name}", lambda w, s: [("/ui/postmortem.js", OK)]),
    Read("/livez", lambda w, s: [("/livez", OK)]),
    Read("/readyz", lambda w, s: [("/readyz", (200, 503))]),
    Read("/healthz", lambda w, s: [("/healthz", (200, 503))]),
    Read("/metrics", lambda w, s: [("/metrics", OK)]),
    Read("/openapi.json", lambda w, s: [("/openapi.json", OK)]),
]


@pytest.fixture(scope="class")
def server(world: World) -> Iterator[Server]:
    s = Server(world).start()
    yield s
    s.stop()


class TestRoutes:
    """The HTTP table (a class, so its server is stopped before the CLI's reads)."""

    @pytest.mark.parametrize("read", READS, ids=[r.route for r in READS])
    def test_a_reads_nothing_of_b_on(self, read: Read, world: World, server: Server) -> None:
        found = []
        for path, statuses in read.urls(world, server):
            for token in kit.A_TOKENS:
                status, body = server.get(path, token)
                if status not in statuses:
                    found.append(f"{token} GET {path}: {status} (expected {statuses}): "
                                 f"{str(body)[:300]}")
                unknown = twin(world, path)
                if unknown is None:
                    found += [f"{token} GET {path}: {leak}" for leak in leaks(world, body)]
                    continue
                other_status, other = server.get(unknown, token)
                if (status, body) != (other_status, as_asked(world, other)):
                    found.append(f"{token} GET {path}: {status} {str(body)[:300]} where "
                                 f"an unknown name answers {other_status} {str(other)[:300]}")
        assert not found, "\n".join(found)

    def test_a_sees_its_own_share_of_the_shared_incident(self, world: World,
                                                          server: Server) -> None:
        """Not an empty answer: A's job, A's figures, the infrastructure's cause, and other
        projects as a count."""
        status, shown = server.get(f"/v1/incidents/{world.ids['shared']}", "tok-a-viewer")
        assert status == 200
        assert [(j["project"], j["job_id"]) for j in shown["jobs"]] == [(kit.A, kit.A_JOB)]
        assert (shown["impacted_jobs"], shown["impacted_gpus"], shown["other_projects"]) == (
            1, kit.A_GPUS, 1)
        assert shown["recovery"] == "verified" and shown["cause_entity"] == "leaf-01"
        assert "leaf-01" in shown["explanation"]
        notes = [e["data"]["text"] for e in shown["log"] if e["kind"] == "note_added"]
        assert "vision: eval rerun booked" in notes and len(notes) == 2, notes
        _, listed = server.get("/v1/incidents", "tok-a-viewer")
        assert {i["incident_id"] for i in listed["incidents"]} == {
            world.ids["shared"], world.ids["a_only"]}


def test_every_get_route_is_in_the_two_tenant_table(world: World) -> None:
    """A new read route fails here until it is a row of READS."""
    app = create_app(world.settings, object())
    declared = {r.resource.canonical for r in app.router.routes()
                if r.method == "GET" and r.resource is not None}
    declared = {"/ui/{name}" if p.startswith("/ui/{name") else p for p in declared}
    assert declared == {r.route for r in READS}, (
        f"not in the table: {sorted(declared - {r.route for r in READS})}; "
        f"gone: {sorted({r.route for r in READS} - declared)}")


# --- the command line: every read command and every report, bound to A ----------------------

def _cli(w: World, *args: str) -> tuple[int, str]:
    from jobtrail.cli.main import main

    env = {"JOBTRAIL_CLICKHOUSE": w.dsn, "JOBTRAIL_DATABASE": w.store.database,
           "JOBTRAIL_TOPOLOGY": str(w.settings.topology_file), "JOBTRAIL_HOME": str(w.home / "cli")}
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return result.exit_code, result.output


@dataclass(frozen=True)
class Command:
    name: str
    """The command's name as `jobtrail` lists it (`report goodput`, `incident show`)."""
    runs: Callable[[World], list[list[str]]]
    ok: tuple[int, ...] = (0,)


A = ["--project", kit.A]
COMMANDS = [
    Command("timeline", lambda w: [["timeline", j, *A, *fmt] for j in (kit.A_JOB, kit.B_JOB)
                                   for fmt in ([], ["--json"])]),
    Command("where", lambda w: [["where", by, x, "--at", AT, *A] for by, x in (
        ("--switch", "leaf-01"), ("--node", "node-003"), ("--filesystem", "lustre-scratch"))]),
    Command("attempt", lambda w: [["attempt", kit.A_JOB, "1", *A], ["attempt", kit.B_JOB, "1", *A]],
            ok=(0, 1)),
    Command("entity", lambda w: [["entity", e, *A] for e in ("leaf-01", "node-003", "node-005")]),
    Command("incidents", lambda w: [["incidents", *A], ["incidents", *A, "--json"]]),
    Command("incident show", lambda w: [["incident", "show", w.ids[i], *A, *fmt]
                                        for i in ("shared", "a_only", "b_only")
                                        for fmt in ([], ["--json"])], ok=(0, 1)),
    Command("followups", lambda w: [["followups", *A], ["followups", *A, "--json"]]),
    Command("postmortem show", lambda w: [["postmortem", "show", w.ids[i], *A, *fmt]
                                          for i in ("shared", "a_only", "b_only")
                                          for fmt in ([], ["--json"])], ok=(0, 1)),
    Command("postmortem export", lambda w: [["postmortem", "export", w.ids[i], *A,
                                             "--format", f]
                                            for i in ("shared", "a_only", "b_only")
                                            for f in ("md", "html", "json")], ok=(0, 1)),
    Command("report goodput", lambda w: [["report", "goodput", j, *A]
                                         for j in (kit.A_JOB, kit.A_EVAL, kit.B_JOB)],
            ok=(0, 1)),
    Command("report capacity", lambda w: [["report", "capacity", *A, "--since", kit.when(-60),
                                           "--until", kit.when(180)]]),
    Command("report changes", lambda w: [["report", "changes", *A, "--since", kit.when(-60),
                                          "--until", kit.when(180)]]),
    Command("subscriptions", lambda w: [["subscriptions", *A], ["subscriptions", *A, "--json"]]),
    Command("silences", lambda w: [["silences", *A]]),
    Command("notifications", lambda w: [["notifications", *A], ["notifications", *A, "--json"]]),
    Command("deliveries", lambda w: [["deliveries", *A], ["deliveries", *A, "--json"],
                                     ["deliveries", *A, "--subscription", w.ids["b_sub"]]]),
]


@pytest.mark.parametrize("command", COMMANDS, ids=[c.name for c in COMMANDS])
def test_a_project_bound_command_shows_nothing_of_b(command: Command, world: World) -> None:
    found = []
    for args in command.runs(world):
        code, out = _cli(world, *args)
        asked = f"jobtrail {' '.join(args)}"
        if code not in command.ok:
            found.append(f"{asked}: exit {code}: {out[-500:]}")
        unknown = twin(world, " ".join(args))
        if unknown is not None:
            other_code, other = _cli(world, *unknown.split(" "))
            if (code, out) != (other_code, as_asked(world, other)):
                found.append(f"{asked}: exit {code} {out[-300:]!r} where an unknown name "
                             f"answers exit {other_code} {other[-300:]!r}")
            continue
        found += [f"{asked}: {leak}" for leak in leaks(world, out)]
        if "--json" in args and code == 0:
            for line in filter(None, out.splitlines() if out.startswith("{\"") else [out]):
                try:
                    body = json.loads(line)
                except ValueError:
                    continue
                found += [f"jobtrail {' '.join(args)}: {leak}" for leak in leaks(world, body)]
    assert not found, "\n".join(found)


READ_COMMANDS = {c.name for c in COMMANDS}
NOT_PROJECT_READS = {
    "dev": "local brokers and servers for development",
    "ingest": "writes events", "drain": "processes the log", "replay": "rebuilds projections",
    "serve": "the API (its routes are READS)", "worker": "the stream worker",
    "migrate": "applies the DDL", "schema": "the event model and DDL, no data",
    "demo": "loads the bundled sample into its own home", "sample-events": "prints the sample",
    "stats": "row counts per table (an operator's health check, no row's content)",
    "dead-letters": "rejected inputs: an operator's, before any project is trusted",
    "dashboards": "builds and publishes dashboards (bound by Grafana's row policies)",
    "access": "Grafana teams and row policies (writes)", "topology": "the fabric, no job",
    "rules": "the rules file", "collect": "follows schedulers (writes events)",
    "drill": "runs a recovery drill", "report": "a group: its reads are rows of COMMANDS",
    "report retention": "the retention policy of the tables, no project's rows",
    "incident": "a group: `show` is a row of COMMANDS, the rest are commands",
    "postmortem": "a group: `show` and `export` are rows of COMMANDS, the rest write",
    "scenario": "checks scenario files", "subscribe": "writes a subscription",
    "silence": "writes a silence", "notify": "decides and delivers",
    "redeliver": "queues a delivery again",
    "mcp": "the MCP server: its tools are read surfaces, each compared for two tenants with "
           "the HTTP API's answers in tests/mcp/test_tenants.py",
}
"""The commands that are not project reads, each with why: a new read command fails the
guard until it is a row of COMMANDS (or named here)."""


def test_every_read_command_is_in_the_two_tenant_table() -> None:
    """Every `jobtrail` command and `jobtrail report` subcommand is in COMMANDS or named as
    not a project read; `incident` and `postmortem` subcommands that read are in COMMANDS."""
    import click

    from jobtrail.cli.main import main

    names = set()
    for name, cmd in main.commands.items():
        names.add(name)
        if isinstance(cmd, click.Group) and name in ("report", "incident", "postmortem"):
            for sub in cmd.commands:
                names.add(f"{name} {sub}")
    acting = {n for n in names if n.split(" ")[0] in ("incident", "postmortem")
              and n not in READ_COMMANDS and n.split(" ", 1)[-1] not in ("show", "export")}
    unlisted = names - READ_COMMANDS - set(NOT_PROJECT_READS) - acting
    assert not unlisted, f"add these to COMMANDS (or NOT_PROJECT_READS, saying why): {unlisted}"


def test_the_reports_count_a_s_own_and_the_cluster_s_only(world: World) -> None:
    """Values, from the events: A waited 16 GPUs x 10 min before its first job (Resources,
    nothing down: `other`) and 8 GPUs x 15 min for its evaluation, 10 min of it while node-005
    was down and B's filler held the other four nodes (`nodes_down`); the down node's
    incidents are B's (not cited to A). After the bios change on node-005, A's evaluation
    failed there: 1 attempt, 1 failure, 1 incident (B's incident there is not A's). A's
    `nightly` ran one attempt on 8 GPUs (B's `nightly` is 16)."""
    _, capacity = _cli(world, "report", "capacity", *A, "--since", kit.when(-60),
                       "--until", kit.when(180))
    assert "| gpu | vision | 0.0 | 0.0 | 0.0 | 0.0 | 0.0 | 1.3 | 0.0 | 3.3 |" in capacity
    assert "Jobs waited 4.7 GPU-hours" in capacity and "llm" not in capacity
    assert "Nodes down behind the waits" not in capacity, capacity
    _, changes = _cli(world, "report", "changes", *A, "--since", kit.when(-60),
                      "--until", kit.when(180))
    (bios,) = [line for line in changes.splitlines() if "| bios | node-005 |" in line]
    assert "| 0% -> 100% | 0 -> 1 |" in bios, changes
    _, nightly = _cli(world, "report", "goodput", kit.NIGHTLY, *A)
    assert [line.split(" | ")[:3] for line in nightly.splitlines()
            if line.startswith("| 1 |")] == [["| 1", "8", "completed"]], nightly


def test_the_narrowing_replaces_every_form_of_another_project_s_job() -> None:
    """The forms processors and people write: the key with or without its attempt (a later
    attempt than the incident holds), the bare id, the project, `project:` and the node only
    B's job was seen on; A's own names and the incident's entity stay."""
    from jobtrail.views.incident import HIDDEN, PLACE, PROJECT, Narrowing

    jobs = [{"project": kit.A, "job_id": kit.A_JOB}, {"project": kit.B, "job_id": kit.B_JOB}]
    evidence = [{"project": kit.B, "entity": "node-003"}, {"project": kit.A, "entity": "node-001"},
                {"project": "", "entity": "leaf-01"}]
    view = Narrowing(jobs, [kit.A], evidence=evidence, shown=["leaf-01"])
    text = (f"{kit.B}/{kit.B_JOB}/2 not restarted; {kit.B}/{kit.B_JOB}. {kit.B_JOB} on "
            f"node-003 (path leaf-01 → node-003), owner project:{kit.B}, {kit.B}'s team; "
            f"{kit.A}/{kit.A_JOB}/1 on node-001")
    assert view.text(text) == (
        f"{HIDDEN} not restarted; {HIDDEN}. {HIDDEN} on {PLACE} (path leaf-01 → {PLACE}), "
        f"owner {PROJECT}, {PROJECT}'s team; {kit.A}/{kit.A_JOB}/1 on node-001")
    assert Narrowing(jobs, None).text(text) == text  # an operator's view
    assert Narrowing(jobs, [kit.A, kit.B]).text(text) == text
