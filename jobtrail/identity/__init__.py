"""Identity: principals from credentials (API tokens, OpenID Connect, a trusted auth proxy,
the operator's CLI), roles, and the signed browser session.

- `principal.py`: the principal and the token grant format;
- `roles.py`: what each role may do (routes and incident commands), as data;
- `session.py`: the signed session cookie and its anti-CSRF token;
- `oidc.py`: the OpenID Connect authorization code flow with PKCE and ID token verification;
- `ledger.py`: login states used once and logouts, in the store (every process sees them).
"""

from __future__ import annotations

from jobtrail.identity.principal import (
    INFRASTRUCTURE,
    LOCAL,
    OPERATOR,
    ROLES,
    Principal,
    check_grants,
    cli_principal,
)

__all__ = ["INFRASTRUCTURE", "LOCAL", "OPERATOR", "ROLES", "Principal", "check_grants",
           "cli_principal"]
