"""DRF authentication for agent bearers (access tokens) and business backends (client tokens).

Both answer 401 `unauthorized` (never 403) for a missing, unknown, expired or revoked token or a
disabled client: each defines `authenticate_header`, which is what makes DRF send 401.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from django.utils import timezone
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from apps.agent_auth.models import ACCESS_TOKEN_TTL, AgentClient, AgentSession
from apps.agent_auth.selectors import client_get_by_token, session_get_by_access_token, session_live
from apps.agent_auth.services import session_touch


@dataclass(frozen=True)
class AgentPrincipal:
    """`request.user` on agent endpoints: the principal the session acts for."""

    id: str
    tenant: str | None = None
    roles: tuple[str, ...] = ()
    audience: str | None = None
    channel: str | None = None

    is_authenticated: ClassVar[bool] = True
    is_anonymous: ClassVar[bool] = False

    @classmethod
    def of(cls, session: AgentSession) -> AgentPrincipal:
        principal = session.principal or {}
        return cls(
            id=principal.get("id", session.principal_id),
            tenant=principal.get("tenant"),
            roles=tuple(principal.get("roles") or ()),
            audience=principal.get("audience"),
            channel=principal.get("channel"),
        )


@dataclass(frozen=True)
class ClientCaller:
    """`request.user` on business-backend endpoints: the agent client whose token was presented."""

    client: AgentClient

    is_authenticated: ClassVar[bool] = True
    is_anonymous: ClassVar[bool] = False


# Why an agent's access token was refused (401 `unauthorized` whatever the reason), as far as its
# host needs to know what to do: refresh, or sign in again. What ended a session (revoked, by whom;
# the client disabled; its approver gone) is said only to the refresh token's holder (the token
# endpoint's invalid_grant / invalid_client): an access token is the shorter-lived, more widely
# handled credential, and a copied one learns nothing of the session from its refusal.
EXPLAINED = "explained"
REFUSED_UNKNOWN = ("This access token is not valid: a refresh replaced it, or it was never issued. Refresh the "
                   "session with its refresh token, or sign in again.")
REFUSED_EXPIRED = (f"This access token has expired (they last {ACCESS_TOKEN_TTL.seconds // 60} minutes): refresh "
                   "the session with its refresh token.")
REFUSED_MISSING = ("No access token was sent: send it as Authorization: Bearer <access token> (an agent gets one by "
                   "signing in with Agent Auth).")
REFUSED_MISSING_CLIENT = ("No client token was sent: send the agent client's token as Authorization: Bearer "
                          "<client token>.")
REFUSED_MALFORMED = "The Authorization header must be the word Bearer and one token: Authorization: Bearer <token>."
REFUSED_ENDED = ("This session can no longer be used: refresh it with its refresh token to learn why, or sign in "
                 "again.")


def refused(message: str) -> AuthenticationFailed:
    """401 `unauthorized` with `message`, which the error's body carries (apps.core.exceptions)."""
    return AuthenticationFailed(message, code=EXPLAINED)


def _bearer(request: Request) -> str | None:
    """The bearer credential, None when no Authorization header; 401 when it is malformed."""
    header = get_authorization_header(request)
    if not header:
        return None
    parts = header.split()
    if len(parts) != 2 or parts[0].lower() != b"bearer":
        raise refused(REFUSED_MALFORMED)
    try:
        return parts[1].decode("ascii")
    except UnicodeDecodeError as exc:
        raise refused(REFUSED_MALFORMED) from exc


class AgentBearerAuthentication(BaseAuthentication):
    """`Authorization: Bearer bha_...`. `request.auth` is the AgentSession (client loaded),
    `request.user` its AgentPrincipal. Revoked or expired sessions, disabled clients, and sessions
    whose approving BailingHub account has left the client's project fail."""

    def authenticate(self, request: Request) -> tuple[AgentPrincipal, AgentSession] | None:
        token = _bearer(request)
        if token is None:
            return None
        session = session_get_by_access_token(token=token)
        now = timezone.now()
        if session is None:
            raise refused(REFUSED_UNKNOWN)
        if now >= session.access_expires_at:
            raise refused(REFUSED_EXPIRED)
        if not session.client.enabled or not session_live(session=session, now=now):
            raise refused(REFUSED_ENDED)
        session_touch(session=session)
        return AgentPrincipal.of(session), session

    def authenticate_header(self, request: Request) -> str:
        return "Bearer"


class ClientTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer bhk_...` from a business backend. `request.auth` is the AgentClient."""

    def authenticate(self, request: Request) -> tuple[ClientCaller, AgentClient] | None:
        token = _bearer(request)
        if token is None:
            return None
        client = client_get_by_token(token=token)
        if client is None or not client.enabled:
            raise AuthenticationFailed()
        return ClientCaller(client), client

    def authenticate_header(self, request: Request) -> str:
        return "Bearer"
