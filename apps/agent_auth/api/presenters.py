"""Response bodies of Agent Auth v1: timestamps are ISO 8601 UTC, durations integer seconds."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from django.utils import timezone

from apps.agent_auth.models import AgentAuthorization, AgentSession
from apps.agent_auth.selectors import session_route_keys_in_order
from apps.agent_auth.services import IssuedTokens


def iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _seconds_until(moment: datetime, now: datetime) -> int:
    return max(0, math.floor((moment - now).total_seconds()))


def token_payload(issued: IssuedTokens) -> dict[str, Any]:
    # Counted from when the tokens were issued: counted from now, a few milliseconds later, the
    # contract's 900 s read 899 (and 30 days 2,591,999 s).
    session, now = issued.session, issued.issued_at
    return {
        "token_type": "Bearer",
        "access_token": issued.access_token,
        "expires_in": _seconds_until(session.access_expires_at, now),
        "refresh_token": issued.refresh_token,
        "refresh_expires_in": _seconds_until(session.refresh_expires_at, now),
        "session_id": str(session.pk),
        "client_app_id": session.client.app_id,
        **subject_display(session),
    }


def subject_display(session: AgentSession) -> dict[str, Any]:
    """``subject_display`` and ``subject_display_status``: provided when the business named the
    subject on approval, else missing (and no ``subject_display``)."""
    if session.subject_display_name:
        return {"subject_display": {"name": session.subject_display_name}, "subject_display_status": "provided"}
    return {"subject_display_status": "missing"}


def session_payload(session: AgentSession) -> dict[str, Any]:
    """`allowed_routes` are the session's grant as its client still allows it (the routes the
    session may use, in the grant's order): a route the operator took off the client since leaves
    the answer as it leaves every endpoint."""
    return {
        "session_id": str(session.pk),
        "client_app_id": session.client.app_id,
        "device_label": session.device_label,
        "principal": session.principal,
        "on_behalf_of": session.on_behalf_of,
        "allowed_routes": session_route_keys_in_order(session),
        "created_at": iso(session.created_at),
        "expires_at": iso(session.access_expires_at),
        "refresh_expires_at": iso(session.refresh_expires_at),
        **subject_display(session),
    }


def authorization_context(authorization: AgentAuthorization) -> dict[str, Any]:
    client = authorization.client
    return {
        "authorization_id": str(authorization.pk),
        "client": {"app_id": client.app_id, "name": client.name},
        "device": {"name": authorization.device_label},
        "requested_routes": list(authorization.requested_routes),
        "status": authorization.status_at(timezone.now()),
        "expires_at": iso(authorization.expires_at),
    }
