"""What each role may do, as data: the state-changing routes and the incident commands.

Roles are ordered (`viewer` < `responder` < `commander` < `admin`); a role may do what the
roles below it may. Project scope is separate and checked beside: a commander of `vision`
cannot resolve an `nlp` incident. docs/operations.md has this table in prose, with a test for
each line (tests/test_identity_roles.py).
"""

from __future__ import annotations

from typing import Any

POSTMORTEM_VERBS = {
    "draft": "draft_postmortem", "edit": "edit_postmortem", "review": "request_review",
    "request-changes": "request_changes", "approve": "approve_postmortem",
    "publish": "publish_postmortem", "waive": "waive_postmortem",
    "learning": "record_learning", "sample": "record_learning",
    "monitor": "record_learning", "runbook": "record_learning",
    "amend": "amend_postmortem"}
"""`POST /v1/incidents/{id}/postmortem/<verb>` -> the incident command it is."""

ROUTE_ROLES: dict[tuple[str, str], str] = {
    ("POST", "/v1/events"): "responder",
    ("POST", "/v1/ingest/{adapter}"): "responder",
    ("POST", "/v1/incidents/{incident_id}/commands"): "responder",
    ("POST", "/v1/subscriptions"): "responder",
    ("DELETE", "/v1/subscriptions/{sub_id}"): "responder",
    ("POST", "/v1/subscriptions/{sub_id}/test"): "responder",
    ("POST", "/v1/silences"): "responder",
    ("POST", "/v1/notifications/{notification_id}/redeliver"): "responder",
}
"""The least role each state-changing route needs; commands then need their own (below)."""

UNAUTHENTICATED_WRITES = frozenset({
    ("POST", "/v1/subscriptions/{sub_id}/unsubscribe"),  # the HMAC link in an email
    ("POST", "/v1/incidents/{incident_id}/ack"),  # the signed acknowledge link in a message
    ("POST", "/ui/login"),  # presents a token, gets a session
    ("POST", "/auth/logout"),  # ends the caller's own session (CSRF-checked)
})
"""State-changing routes that authenticate otherwise (or end a session). Whatever the route,
a state-changing request that a browser's ambient credential (the session cookie, the auth
proxy's identity) would authenticate must come from this site (`jobtrail.http.guard`)."""

SIGN_IN_ROUTES = frozenset({
    ("POST", "/ui/login"),  # a cross-site form would sign the browser in as someone else
})
"""State-changing routes that must come from this site even without a cookie."""

ANONYMOUS_READS = frozenset({
    ("GET", "/livez"), ("GET", "/readyz"), ("GET", "/healthz"), ("GET", "/metrics"),
    ("GET", "/openapi.json"), ("GET", "/auth/login"), ("GET", "/auth/callback"),
    ("GET", r"/ui/{name}"),
})
"""Routes that never read the caller: a session cookie on them is not checked against the
store's logouts (a probe does no store I/O for a browser's cookie)."""

COMMAND_ROLES: dict[str, str] = {
    # responders: on it, notes and follow-ups, writing the postmortem
    "ack": "responder", "note": "responder", "add_action": "responder",
    "update_action": "responder", "accept_action": "responder", "dismiss_action": "responder",
    "draft_postmortem": "responder", "edit_postmortem": "responder",
    "request_review": "responder", "record_learning": "responder", "page": "responder",
    "correct_time": "responder",
    # commanders: lifecycle, ownership, severity, the postmortem's verdict
    "assign": "commander", "commander": "commander", "mitigate": "commander",
    "resolve": "commander", "reopen": "commander", "close": "commander",
    "severity": "commander", "request_changes": "commander",
    "approve_postmortem": "commander", "publish_postmortem": "commander",
    "waive_postmortem": "commander", "amend_postmortem": "commander",
}


def command_role(command: str, data: dict[str, Any]) -> str:
    """The role an incident command needs; a forced close (it waives the commander
    checklist) is an admin's."""
    if command == "close" and data.get("force"):
        return "admin"
    return COMMAND_ROLES.get(command, "admin")


for _verb, _command in POSTMORTEM_VERBS.items():
    ROUTE_ROLES[("POST", f"/v1/incidents/{{incident_id}}/postmortem/{_verb}")] = \
        command_role(_command, {})
