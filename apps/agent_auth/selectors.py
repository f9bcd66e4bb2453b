"""Reads of Agent Auth: token lookups, and the ONE place that decides which routes a session may use.

Every `/agent-api/v1/workspaces/:route/...` endpoint resolves its route through
`session_route_get`; the workspace list comes from `session_route_list`. Both recompute, on
each request: the client's `allowed_routes` ∩ the session's `allowed_routes` ∩ the enabled
routes of the client's project whose audience policy admits the session's principal, and —
for runtime endpoints — the route's `agent_client_enabled`.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import BooleanField, Exists, ExpressionWrapper, OuterRef, Q, QuerySet
from django.urls import reverse

from apps.agent_auth.errors import AgentClientDisabled, AudienceNotAllowed, InvalidRoute, RouteUnavailable
from apps.agent_auth.models import (
    ACCESS_TOKEN_PREFIX,
    CLIENT_TOKEN_PREFIX,
    REFRESH_TTL,
    AgentAuthorization,
    AgentClient,
    AgentSession,
)
from apps.agent_auth.validators import route_key_is_valid
from apps.core.tokens import token_hash, token_matches
from apps.projects.models import Membership
from apps.routes.models import Route
from apps.routes.selectors import enabled_route_get

WORKSPACES_MAX = 128


def client_get_by_token(*, token: str) -> AgentClient | None:
    """The client whose token this is (enabled or not; the caller decides), else None."""
    if not token.startswith(CLIENT_TOKEN_PREFIX):
        return None
    client = AgentClient.objects.filter(client_token_hash=token_hash(token)).first()
    if client is None or client.client_token_hash is None or not token_matches(token, client.client_token_hash):
        return None
    return client


def session_get_by_access_token(*, token: str) -> AgentSession | None:
    """The session whose current access token this is (active or not; the caller decides)."""
    if not token.startswith(ACCESS_TOKEN_PREFIX):
        return None
    session = (
        AgentSession.objects.select_related("client", "authorization")
        .filter(access_token_hash=token_hash(token))
        .first()
    )
    if session is None or not token_matches(token, session.access_token_hash):
        return None
    return session


def _approvers(*, user: Any, project: Any) -> QuerySet[User]:
    """`user` while they could still approve an agent of `project`: active, and a member of it (or a
    superuser). Values or OuterRefs."""
    return User.objects.filter(pk=user, is_active=True).filter(
        Q(is_superuser=True) | Q(memberships__project_id=project))


def session_approver_current(*, session: AgentSession) -> bool:
    """Whether the BailingHub account that approved `session` on the hub's own authorization page
    could still approve it: active, and a member of the client's project (or a superuser). The
    session acts for that account, so it ends when the account leaves the project, is deactivated
    or deleted. A session a business backend approved has no such account. Every session is made
    from its authorization (code_exchange), and the product never deletes one: a session whose
    authorization row is gone (an operator's or a database's delete) has nothing left to say who
    approved it, and is not current."""
    authorization = session.authorization
    if authorization is None:
        return False
    if not authorization.decided_on_page:
        return True
    if authorization.decided_by_id is None:
        return False
    return _approvers(user=authorization.decided_by_id, project=session.client.project_id).exists()


class SessionEnd(StrEnum):
    """Why a session can no longer be used (session_end)."""

    REVOKED = "revoked"
    EXPIRED = "expired"
    AUTHORIZATION_DELETED = "authorization_deleted"
    APPROVER_LEFT = "approver_left"


def session_end(*, session: AgentSession, now: datetime, approver_current: bool | None = None) -> SessionEnd | None:
    """Why `session` can no longer be used, the first that applies, or None while it can: revoked,
    expired, its authorization row gone, its approver no longer current. `approver_current` is the
    value a list annotated (session_approver_current_expression); without it, it is read."""
    if session.revoked_at is not None:
        return SessionEnd.REVOKED
    if not session.is_active(now):
        return SessionEnd.EXPIRED
    if session.authorization_id is None:
        return SessionEnd.AUTHORIZATION_DELETED
    if approver_current is None:
        approver_current = session_approver_current(session=session)
    return None if approver_current else SessionEnd.APPROVER_LEFT


def session_end_text(*, session: AgentSession, end: SessionEnd) -> str:
    """Why the session no longer works, in words for the agent host that presents its refresh token
    (session_refresh's refusal): sign in again, and what happened. An access token's refusal says
    less (apps.agent_auth.authentication): the refresh token is the session's own credential."""
    revoked_by: dict[str, str] = {
        AgentSession.RevokedBy.AGENT: "by the agent", AgentSession.RevokedBy.CLIENT: "by the business backend",
        AgentSession.RevokedBy.OPERATOR: "by an operator",
        AgentSession.RevokedBy.SYSTEM: f"by BailingHub ({session.revoked_reason or 'a token was reused'})",
    }
    if end == SessionEnd.REVOKED:
        by = revoked_by.get(session.revoked_by, "")
        return f"This session was revoked{' ' + by if by else ''}: sign in again."
    if end == SessionEnd.EXPIRED:
        return (f"This session has expired (a session lasts {REFRESH_TTL.days} days from its sign-in): sign in "
                "again.")
    if end == SessionEnd.AUTHORIZATION_DELETED:
        return "This session's authorization was deleted by an operator: sign in again."
    return ("The BailingHub account that approved this session can no longer approve it (it left the project, or "
            "was deactivated or deleted): sign in again.")


# The ends a session never comes back from. One whose approver left the project works again once
# that account is a member again.
SESSION_ENDS_FOR_GOOD = frozenset({SessionEnd.REVOKED, SessionEnd.EXPIRED, SessionEnd.AUTHORIZATION_DELETED})


def session_end_for_good(*, session: AgentSession, now: datetime) -> SessionEnd | None:
    """Why `session` will never be usable again (SESSION_ENDS_FOR_GOOD), or None: session_end
    without the approver's membership, which may come back (and is not read)."""
    end = session_end(session=session, now=now, approver_current=True)
    return end if end in SESSION_ENDS_FOR_GOOD else None


def session_ended_for_good_q(now: datetime, prefix: str = "") -> Q:
    """`session_end_for_good` as a condition of a query (see session_approver_current_q for `prefix`)."""
    return (Q(**{f"{prefix}revoked_at__isnull": False}) | Q(**{f"{prefix}refresh_expires_at__lte": now})
            | Q(**{f"{prefix}authorization__isnull": True}))


def session_live(*, session: AgentSession, now: datetime) -> bool:
    """Whether `session` can still be used (session_end says why not). The one rule behind the
    bearer check, task members and the console's states."""
    return session_end(session=session, now=now) is None


def session_approver_current_q(prefix: str = "") -> Q:
    """`session_approver_current` as a condition of a query of sessions, or of rows whose session is
    at `prefix` (``"session__"``)."""
    approver = _approvers(user=OuterRef(f"{prefix}authorization__decided_by_id"),
                          project=OuterRef(f"{prefix}client__project_id"))
    return (Q(**{f"{prefix}authorization__isnull": False})
            & (Q(**{f"{prefix}authorization__decided_on_page": False}) | Q(Exists(approver))))


def session_live_q(now: datetime, prefix: str = "") -> Q:
    """`session_live` as a condition of a query (see session_approver_current_q for `prefix`)."""
    return (Q(**{f"{prefix}revoked_at__isnull": True, f"{prefix}refresh_expires_at__gt": now})
            & session_approver_current_q(prefix))


def session_approver_current_expression(prefix: str = "") -> ExpressionWrapper[Q]:
    """`session_approver_current` as a column (the console's lists)."""
    return ExpressionWrapper(session_approver_current_q(prefix), output_field=BooleanField())


class SignInPage(StrEnum):
    """Where a client sends its users to approve an agent, as this hub sees it."""

    HERE = "here"  # this hub's page
    UNKNOWN_HOST = "unknown_host"  # this hub's page's path on a host this hub does not know as its own
    ELSEWHERE = "elsewhere"  # a business system's page


def client_sign_in_page(client: AgentClient, *, request_host: str | None = None) -> SignInPage:
    """Whether the client's `agent_authorize_url` is this hub's own page: its exact path on an
    address of this hub — the host the page was reached at (`request_host`: the agent opened the
    client's URL, so a browser that arrived here by it proves it), WEB_ORIGIN, or a host named
    exactly in ALLOWED_HOSTS (a `*` or `.domain` pattern names no host of ours). Only such a client's
    requests are decided on the page; a client whose page is a business system's has its backend
    decide, for principals of its own."""
    parts = urlsplit(client.agent_authorize_url)
    if parts.path != reverse("agent-auth-authorize"):
        return SignInPage.ELSEWHERE
    netloc, host = parts.netloc.lower(), (parts.hostname or "")
    if ":" in host:  # an IPv6 literal, as ALLOWED_HOSTS writes it
        host = f"[{host}]"
    ours = {urlsplit(settings.WEB_ORIGIN).netloc.lower()} | ({request_host.lower()} if request_host else set())
    named = {entry.lower() for entry in settings.ALLOWED_HOSTS if entry != "*" and not entry.startswith(".")}
    return SignInPage.HERE if netloc in ours or host in named else SignInPage.UNKNOWN_HOST


def authorization_get_for_client(*, client: AgentClient, authorization_id: uuid.UUID) -> AgentAuthorization | None:
    return (
        AgentAuthorization.objects.select_related("client")
        .filter(pk=authorization_id, client=client)
        .first()
    )


def route_admits_audience(*, route: Route, audience: str | None) -> bool:
    if route.audience_policy == Route.AudiencePolicy.ANY:
        return True
    return bool(audience) and audience in (route.allowed_audiences or [])


def session_route_keys(session: AgentSession) -> set[str]:
    """The route keys a session may use: its client's and its own (the one rule the agent API, the
    task services and the task console read)."""
    return set(session.client.allowed_routes or []) & set(session.allowed_routes or [])


def session_route_keys_in_order(session: AgentSession) -> list[str]:
    """`session_route_keys` in the order of the session's grant (what the session endpoint and the
    task console show)."""
    usable = session_route_keys(session)
    return [key for key in session.allowed_routes or [] if key in usable]


def session_route_list(*, session: AgentSession, require_runtime: bool = True) -> list[Route]:
    """The routes this session may use now, ordered by key (at most 128). One query."""
    keys = session_route_keys(session)
    if not keys:
        return []
    admits = Q(audience_policy=Route.AudiencePolicy.ANY)
    if session.audience:
        admits |= Q(audience_policy=Route.AudiencePolicy.LISTED, allowed_audiences__contains=[session.audience])
    routes = Route.objects.filter(admits, project_id=session.client.project_id, key__in=keys, enabled=True)
    if require_runtime:
        routes = routes.filter(agent_client_enabled=True)
    return list(routes.order_by("key")[:WORKSPACES_MAX])


def session_route_get(*, session: AgentSession, key: str, require_runtime: bool) -> Route:
    """The route `key` as this session may use it, or the error the contract names.

    400 `invalid_route` for a malformed key; 404 `route_unavailable` for any route outside the
    session's grant, missing or disabled (never revealing which); 403 `audience_not_allowed`
    when the route does not admit the principal; with `require_runtime`, 403
    `agent_client_disabled` when local agents are switched off on the route. One query.
    """
    if not route_key_is_valid(key):
        raise InvalidRoute()
    if key not in session_route_keys(session):
        raise RouteUnavailable()
    route = enabled_route_get(project_id=session.client.project_id, key=key)
    if route is None:
        raise RouteUnavailable()
    if not route_admits_audience(route=route, audience=session.audience or None):
        raise AudienceNotAllowed()
    if require_runtime and not route.agent_client_enabled:
        raise AgentClientDisabled()
    return route


def authorization_page_route_choices(*, authorization: AgentAuthorization, user: User) -> list[Route]:
    """Routes a BailingHub user may grant on the authorization page: those requested, still in the
    client's allowlist, enabled, admitting a principal without audience, in a project the user
    belongs to."""
    client = authorization.client
    if not user.is_superuser and not Membership.objects.filter(project_id=client.project_id, user=user).exists():
        return []
    keys = set(authorization.requested_routes) & set(client.allowed_routes or [])
    return list(
        Route.objects.filter(
            project_id=client.project_id, key__in=keys, enabled=True, audience_policy=Route.AudiencePolicy.ANY
        ).order_by("key")
    )
