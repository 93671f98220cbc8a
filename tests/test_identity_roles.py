"""Roles over HTTP: every state-changing route and every incident command, for each role
(viewer, responder, commander, admin), as a table: allowed, or 403 naming the role needed.
And who acted is the credential's principal, never a `by` the caller writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from jobtrail.config import Settings
from jobtrail.http import create_app
from jobtrail.http.postmortem import VERBS
from jobtrail.identity import ROLES, Principal
from jobtrail.identity.roles import (
    COMMAND_ROLES,
    ROUTE_ROLES,
    UNAUTHENTICATED_WRITES,
    command_role,
)
from jobtrail.learn import sample
from jobtrail.store import Store
from tests.identity_kit import (
    TOKENS,
    backend_with_incident,
    bearer,
    incident_id,
    run,
)

ROUTES: list[tuple[str, str, Any]] = [
    ("POST", "/v1/events", sample.jsonl().splitlines()[0]),
    ("POST", "/v1/ingest/{adapter}", {"alerts": []}),
    ("POST", "/v1/subscriptions", {}),
    ("DELETE", "/v1/subscriptions/{sub_id}", None),
    ("POST", "/v1/subscriptions/{sub_id}/test", None),
    ("POST", "/v1/silences", {}),
    ("POST", "/v1/notifications/{notification_id}/redeliver", None),
]
"""Each route-level policy, with a body that gets past authorisation (what happens after
does not matter here: 202, 404 or 422)."""
FILLED = {"{adapter}": "alertmanager", "{sub_id}": "sub-none", "{notification_id}": "n-none"}
DATA = {"assign": {"team": "network"}, "commander": {"person": "cy"}, "note": {"text": "n"},
        "severity": {"severity": "sev2"}, "add_action": {"title": "t"},
        "update_action": {"action_id": "act-none", "title": "t"},
        "accept_action": {"action_id": "act-none"},
        "dismiss_action": {"action_id": "act-none", "reason": "r"},
        "edit_postmortem": {"section": "lucky", "text": "t"},
        "request_changes": {"comment": "c"}, "waive_postmortem": {"reason": "r"},
        "record_learning": {"learning": "runbook", "reason": "r"}}
VERB_BODY = {"edit": {"section": "lucky", "text": "t"}, "request-changes": {"comment": "c"},
             "waive": {"reason": "r"}, "learning": {"learning": "runbook", "reason": "r"},
             "monitor": {"rules": "signals: []"}}
SLOW = {"sample", "monitor", "runbook"}
"""Verbs that make an artefact once allowed (their role line is the same as `learning`)."""


def _allowed(role: str, need: str) -> bool:
    return ROLES.index(role) >= ROLES.index(need)


def _names_role(role: str, need: str, error: str) -> bool:
    """The refusal names the role needed (a viewer is stopped at the route: responder)."""
    return f"needs the {need} role" in error or (
        role == "viewer" and "needs the responder role" in error)


def test_every_state_changing_route_has_a_role_policy(tmp_path: Path) -> None:
    app = create_app(Settings(home=tmp_path), backend=object())
    writes = {(r.method, r.resource.canonical) for r in app.router.routes()  # type: ignore[union-attr]
              if r.method not in ("GET", "HEAD")}
    assert writes == set(ROUTE_ROLES) | UNAUTHENTICATED_WRITES
    assert {p for _, p, _ in ROUTES} | {"/v1/incidents/{incident_id}/commands"} | {
        f"/v1/incidents/{{incident_id}}/postmortem/{verb}" for verb in VERBS} == {
        p for _, p in ROUTE_ROLES}
    assert set(COMMAND_ROLES) == set(VERBS.values()) | {
        "ack", "assign", "commander", "note", "mitigate", "resolve", "reopen", "close",
        "severity", "add_action", "update_action", "accept_action", "dismiss_action",
        "page", "correct_time"}


def test_routes_by_role(store: Store, tmp_path: Path) -> None:
    """route x role: allowed (any answer but 401/403) or 403 naming the role it needs."""
    backend = backend_with_incident(store, tmp_path / "home")
    seen: dict[tuple[str, str], int] = {}

    async def scenario(client: aiohttp.ClientSession, base: str) -> None:
        for method, template, body in ROUTES:
            path = template
            for hole, value in FILLED.items():
                path = path.replace(hole, value)
            for role in ROLES:
                sent = body if isinstance(body, str) else json.dumps(body) if body is not None \
                    else None
                answer = await client.request(method, path, data=sent, headers=bearer(role))
                seen[(template, role)] = answer.status
                need = ROUTE_ROLES[(method, template)]
                if _allowed(role, need):
                    assert answer.status not in (401, 403), (template, role,
                                                             await answer.text())
                else:
                    assert answer.status == 403, (template, role)
                    assert f"needs the {need} role" in (await answer.json())["error"]

    run(Settings(home=tmp_path / "home", api_tokens=TOKENS, alerts_interval_s=0), backend,
        scenario)
    assert sum(1 for s in seen.values() if s == 403) == len(ROUTES)  # the viewer's


def test_incident_commands_by_role(store: Store, tmp_path: Path) -> None:
    """command x role, through `POST /v1/incidents/{id}/commands`."""
    backend = backend_with_incident(store, tmp_path / "home")

    async def scenario(client: aiohttp.ClientSession, base: str) -> None:
        url = f"/v1/incidents/{await incident_id(client)}/commands"
        for command in COMMAND_ROLES:
            for role in ROLES:
                body = {"command": command, "command_id": f"{command}-{role}",
                        "data": DATA.get(command, {})}
                answer = await client.post(url, json=body, headers=bearer(role))
                need = command_role(command, body["data"])
                if _allowed(role, need):
                    assert answer.status in (200, 409), (command, role, await answer.text())
                else:
                    assert answer.status == 403, (command, role)
                    assert _names_role(role, need, (await answer.json())["error"])
        forced = {"command": "close", "data": {"force": True, "reason": "drill"}}
        refused = await client.post(url, json={**forced, "command_id": "force-c"},
                                    headers=bearer("commander"))
        assert refused.status == 403 and "needs the admin role" in (await refused.json())[
            "error"]
        assert (await client.post(url, json={**forced, "command_id": "force-a"},
                                  headers=bearer("admin"))).status in (200, 409)

    run(Settings(home=tmp_path / "home", api_tokens=TOKENS, alerts_interval_s=0), backend,
        scenario)


def test_postmortem_verbs_by_role(store: Store, tmp_path: Path) -> None:
    """verb x role, through `POST /v1/incidents/{id}/postmortem/{verb}`."""
    backend = backend_with_incident(store, tmp_path / "home")

    async def scenario(client: aiohttp.ClientSession, base: str) -> None:
        base_url = f"/v1/incidents/{await incident_id(client)}/postmortem"
        for verb, command in VERBS.items():
            need = command_role(command, {})
            for role in ROLES:
                if verb in SLOW and _allowed(role, need):
                    continue
                answer = await client.post(f"{base_url}/{verb}", headers=bearer(role),
                                           json={**VERB_BODY.get(verb, {}),
                                                 "command_id": f"{verb}-{role}"})
                if _allowed(role, need):
                    assert answer.status in (200, 409, 422), (verb, role, await answer.text())
                else:
                    assert answer.status == 403, (verb, role)
                    assert _names_role(role, need, (await answer.json())["error"])

    run(Settings(home=tmp_path / "home", api_tokens=TOKENS, alerts_interval_s=0), backend,
        scenario)


def test_the_actor_is_the_credential_and_a_claimed_by_is_refused(store: Store,
                                                                 tmp_path: Path) -> None:
    backend = backend_with_incident(store, tmp_path / "home")

    async def scenario(client: aiohttp.ClientSession, base: str) -> None:
        inc = await incident_id(client)
        url = f"/v1/incidents/{inc}/commands"
        claimed = await client.post(url, headers=bearer("responder"), json={
            "command": "note", "by": "cy", "command_id": "n0", "data": {"text": "x"}})
        assert claimed.status == 422
        assert (await claimed.json())["error"] == (
            "by: the actor is taken from your credential (person rita (token:rita-key, "
            "responder)), never from the body: drop `by`")
        same = await client.post(url, headers=bearer("responder"), json={
            "command": "note", "by": "rita", "command_id": "n1", "data": {"text": "x"}})
        assert same.status == 422  # not even your own name: the body names no one
        assert (await client.post(url, headers=bearer("responder"), json={
            "command": "note", "command_id": "n1", "data": {"text": "x"}})).status == 200
        shown = await (await client.get(f"/v1/incidents/{inc}",
                                        headers=bearer("admin"))).json()
        note = shown["log"][-1]
        assert (note["kind"], note["actor_kind"], note["actor"], note["credential"]) == (
            "note_added", "person", "rita", "token:rita-key")
        opened = shown["log"][0]
        assert (opened["actor_kind"], opened["credential"]) == ("processor", "")
        me = await (await client.get("/v1/whoami", headers=bearer("commander"))).json()
        assert me == {"name": "cy", "kind": "person", "role": "commander", "teams": [],
                      "projects": ["llm-pretrain"], "all_projects": False,
                      "infrastructure": False, "credential": "token:cy-key"}

    run(Settings(home=tmp_path / "home", api_tokens=TOKENS, alerts_interval_s=0), backend,
        scenario)


def test_the_approver_is_another_principal_with_the_commander_role(store: Store,
                                                                    tmp_path: Path) -> None:
    backend = backend_with_incident(store, tmp_path / "home")

    async def scenario(client: aiohttp.ClientSession, base: str) -> None:
        url = f"/v1/incidents/{await incident_id(client)}/postmortem"

        async def post(verb: str, token: str, **body: Any) -> tuple[int, Any]:
            answer = await client.post(f"{url}/{verb}", headers=bearer(token), json=body)
            return answer.status, await answer.json()

        assert (await post("draft", "tok-ana"))[0] == 200
        # approval needs the required human section written (not its prompt)
        assert (await post("edit", "tok-ana", section="contributing",
                           text="The cable was old."))[0] == 200
        assert (await post("review", "tok-ana", reviewers=["cy"]))[0] == 200
        status, body = await post("approve", "tok-ana", by="bob")  # as the finding did
        assert status == 422 and "taken from your credential" in body["error"]
        status, body = await post("approve", "tok-ana")
        assert status == 409 and "must not be an author" in body["error"]
        status, body = await post("approve", "responder")
        assert status == 403 and "needs the commander role" in body["error"]
        status, body = await post("approve", "commander")
        assert status == 200 and body["postmortem"]["approved_by"] == "cy"
        assert body["events"][0]["actor"] == {"kind": "person", "name": "cy", "rule": "",
                                              "credential": "token:cy-key"}

    run(Settings(home=tmp_path / "home", api_tokens=TOKENS, alerts_interval_s=0), backend,
        scenario)


@pytest.mark.parametrize(("grants", "expected"), [
    (("vision",), ("token:", "service", "commander", False)),
    (("*",), ("token:", "service", "admin", True)),
    (("vision", "user:alice", "role:viewer", "team:ml", "label:alice-cli"),
     ("alice", "person", "viewer", False)),
    (("@infra", "service:alertmanager", "role:responder"),
     ("alertmanager", "service", "responder", False)),
])
def test_token_grants_name_a_principal(grants: tuple[str, ...],
                                       expected: tuple[str, str, str, bool]) -> None:
    who = Principal.from_grants("secret-token", grants)
    assert (who.name if ":" not in expected[0] else "token:") .startswith(expected[0])
    assert (who.kind, who.role, who.operator) == expected[1:]
    assert "secret-token" not in who.credential


@pytest.mark.parametrize("bad", ["vision,role:root", "vision,usr:alice", "vision,user:"])
def test_a_bad_grant_stops_the_server_at_start(bad: str) -> None:
    with pytest.raises(ValueError, match="token grant"):
        Settings.from_env({"JOBTRAIL_API_TOKENS": f"tok={bad}"})
