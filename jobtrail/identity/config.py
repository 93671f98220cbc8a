"""The OpenID Connect client's settings (a light module: `jobtrail.config` imports it)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class OidcConfig:
    issuer: str
    client_id: str
    client_secret: str = field(default="", repr=False)
    redirect_uri: str = ""
    scopes: str = "openid profile email"
    user_claim: str = "preferred_username"
    teams_claim: str = "groups"
    projects_claim: str = "projects"
    role_claim: str = "jobtrail_role"
    default_role: str = "viewer"
    leeway_s: float = 30.0
