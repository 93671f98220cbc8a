"""Kept for old imports: identity lives in `jobtrail.identity`."""

from __future__ import annotations

from jobtrail.identity import INFRASTRUCTURE, LOCAL, OPERATOR, Principal

__all__ = ["INFRASTRUCTURE", "LOCAL", "OPERATOR", "Principal"]
