"""Shortcuts that drive the real services (no rows made by hand) to reach a given state."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from apps.agent_auth.services import (
    IssuedTokens,
    authorization_approve,
    authorization_create,
    code_exchange,
)
from tests.agent_auth.factories import pkce_pair

REDIRECT_URI = "http://127.0.0.1:53682/callback"
PRINCIPAL = {"id": "u-1001", "tenant": "store-7", "roles": ["clerk"], "audience": "employee", "channel": "web"}


def authorization_for(client, *, routes=None, redirect_uri=REDIRECT_URI, ip="127.0.0.1"):
    verifier, challenge = pkce_pair()
    authorization = authorization_create(
        client_app_id=client.app_id,
        redirect_uri=redirect_uri,
        state="state-12345678",
        requested_routes=routes if routes is not None else list(client.allowed_routes),
        device_label="Ada's laptop",
        code_challenge=challenge,
        requester_ip=ip,
    )
    authorization.verifier = verifier
    return authorization


def approved_code(client, *, routes=None, principal=None, granted=None, on_behalf_of="ada@example.com"):
    """(authorization, code) after the business backend approved."""
    authorization = authorization_for(client, routes=routes)
    redirect = authorization_approve(
        client=client,
        authorization_id=authorization.pk,
        principal=dict(principal or PRINCIPAL),
        on_behalf_of=on_behalf_of,
        allowed_routes=granted if granted is not None else list(authorization.requested_routes),
    )
    code = parse_qs(urlsplit(redirect).query)["code"][0]
    return authorization, code


def session_for(client, **kwargs) -> IssuedTokens:
    authorization, code = approved_code(client, **kwargs)
    return code_exchange(client_app_id=client.app_id, code=code, redirect_uri=authorization.redirect_uri,
                         code_verifier=authorization.verifier)


def bearer(token: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}
