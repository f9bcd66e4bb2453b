"""Writes of Agent Auth v1. Sessions and authorizations change only here.

Secrets are generated here, handed back once to the caller, and stored as SHA-256 digests.
Nothing here logs a token, a code or a client token; log lines name ids only.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from django.contrib.auth.models import User
from django.contrib.postgres.fields import ArrayField
from django.db import models, transaction
from django.db.models import F, Func, Value
from django.db.models.functions import Cast
from django.utils import timezone

from apps.agent_auth.errors import (
    AccessDenied,
    AlreadyProcessed,
    AuthorizationExpired,
    ForeignClient,
    InvalidClient,
    InvalidGrant,
    NotFound,
    RouteNotAllowed,
)
from apps.agent_auth.models import (
    ACCESS_TOKEN_PREFIX,
    ACCESS_TOKEN_TTL,
    AUTHORIZATION_TTL,
    CLIENT_TOKEN_PREFIX,
    CODE_PREFIX,
    CODE_TTL,
    REFRESH_TOKEN_PREFIX,
    REFRESH_TTL,
    AgentAuthorization,
    AgentClient,
    AgentRefreshToken,
    AgentSession,
)
from apps.agent_auth.ratelimit import rate_limit_hit
from apps.agent_auth.selectors import (
    SessionEnd,
    SignInPage,
    authorization_page_route_choices,
    client_sign_in_page,
    session_end,
    session_end_text,
)
from apps.core.tokens import secrets_equal, token_generate, token_hash
from apps.projects.models import Project
from apps.projects.selectors import project_role

logger = logging.getLogger("bailinghub.agent_auth")

LAST_USED_RESOLUTION = timedelta(seconds=60)


@dataclass(frozen=True)
class IssuedTokens:
    """A session with the access and refresh tokens just issued for it (shown once)."""

    session: AgentSession
    access_token: str
    refresh_token: str
    issued_at: datetime  # the clock the expiries were set by: the answer's expires_in counts from it


def _with_query(uri: str, params: dict[str, str]) -> str:
    parts = urlsplit(uri)
    query = "&".join(part for part in (parts.query, urlencode(params)) if part)
    return urlunsplit(parts._replace(query=query))


def pkce_s256(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


# Clients


@transaction.atomic
def agent_client_create(
    *,
    project: Project,
    app_id: str,
    name: str,
    allowed_routes: list[str],
    agent_authorize_url: str,
    enabled: bool = True,
    authorization_rate_limit: int = 10,
) -> tuple[AgentClient, str]:
    """Register an agent app; returns it with its client token (the only time it is visible)."""
    client = AgentClient(
        project=project, app_id=app_id, name=name, allowed_routes=allowed_routes,
        agent_authorize_url=agent_authorize_url, enabled=enabled, authorization_rate_limit=authorization_rate_limit,
    )
    client.full_clean()
    client.save()
    return client, agent_client_token_rotate(client=client)


@transaction.atomic
def agent_client_token_rotate(*, client: AgentClient) -> str:
    """Issue a new client token; the old one stops working at once. Returns the new token."""
    token = token_generate(CLIENT_TOKEN_PREFIX)
    client.client_token_hash = token_hash(token)
    client.client_token_rotated_at = timezone.now()
    AgentClient.objects.filter(pk=client.pk).update(
        client_token_hash=client.client_token_hash, client_token_rotated_at=client.client_token_rotated_at
    )
    logger.info("agent client %s: client token rotated", client.app_id)
    return token


# Authorizations


def authorization_create(
    *,
    client_app_id: str,
    redirect_uri: str,
    state: str,
    requested_routes: list[str],
    device_label: str,
    code_challenge: str,
    code_challenge_method: str = "S256",
    requester_ip: str | None,
) -> AgentAuthorization:
    """Record a local agent's PKCE request (formats already validated by the API layer).

    400 `invalid_client` for an unknown or disabled client, or routes outside its allowlist;
    429 `rate_limited` past the client's per-IP limit (every attempt that names a client counts).
    """
    client = AgentClient.objects.filter(app_id=client_app_id, enabled=True).first()
    if client is None:
        raise InvalidClient("Unknown or disabled client_app_id.")
    rate_limit_hit(key=f"agent-authorizations:{client.pk}:{requester_ip or '-'}",
                   limit=client.authorization_rate_limit)
    outside = [key for key in requested_routes if key not in (client.allowed_routes or [])]
    if outside:
        raise InvalidClient("The client may not ask for: " + ", ".join(outside) + ".")
    authorization = AgentAuthorization.objects.create(
        client=client,
        redirect_uri=redirect_uri,
        state=state,
        requested_routes=list(requested_routes),
        device_label=device_label,
        code_challenge=code_challenge,
        code_challenge_method=code_challenge_method,
        requester_ip=requester_ip,
        expires_at=timezone.now() + AUTHORIZATION_TTL,
    )
    logger.info("agent authorization %s created for client %s", authorization.pk, client.app_id)
    return authorization


def authorization_url(*, authorization: AgentAuthorization) -> str:
    return _with_query(authorization.client.agent_authorize_url, {"authorization_id": str(authorization.pk)})


def _pending_for_decision(*, client: AgentClient, authorization_id: uuid.UUID) -> AgentAuthorization:
    authorization = (
        AgentAuthorization.objects.select_for_update(of=("self",))
        .filter(pk=authorization_id, client=client)
        .first()
    )
    if authorization is None:
        raise NotFound("No such authorization.")
    if authorization.status != AgentAuthorization.Status.PENDING:
        raise AlreadyProcessed(authorization_id=str(authorization.pk))
    if authorization.is_expired(timezone.now()):
        raise AuthorizationExpired(authorization_id=str(authorization.pk))
    return authorization


@transaction.atomic
def authorization_approve(
    *,
    client: AgentClient,
    authorization_id: uuid.UUID,
    principal: dict[str, Any],
    on_behalf_of: str,
    allowed_routes: list[str],
    decided_by: User | None = None,
    subject_display: dict[str, str] | None = None,
) -> str:
    """Approve a pending request for `principal`; returns the loopback URL with ?code=&state=.
    `subject_display` (``{name}``) is what the session's answers then show the host.

    `allowed_routes` must lie within the request and the client's allowlist (else 403
    `route_not_allowed`). 404 for another client's authorization, 409 when already decided,
    410 when expired. The code lives 120 s and is stored only as its hash.
    """
    authorization = _pending_for_decision(client=client, authorization_id=authorization_id)
    grantable = set(authorization.requested_routes) & set(client.allowed_routes or [])
    outside = [key for key in allowed_routes if key not in grantable]
    if outside:
        raise RouteNotAllowed("Not within the request and the client's allowed routes: " + ", ".join(outside) + ".")
    now = timezone.now()
    code = token_generate(CODE_PREFIX)
    authorization.status = AgentAuthorization.Status.APPROVED
    authorization.decided_at = now
    authorization.decided_by = decided_by
    authorization.decided_on_page = decided_by is not None
    authorization.principal = principal
    authorization.on_behalf_of = on_behalf_of
    authorization.subject_display_name = (subject_display or {}).get("name", "")
    authorization.allowed_routes = list(allowed_routes)
    authorization.code_hash = token_hash(code)
    authorization.code_expires_at = now + CODE_TTL
    authorization.save()
    logger.info("agent authorization %s approved", authorization.pk)
    return _with_query(authorization.redirect_uri, {"code": code, "state": authorization.state})


@transaction.atomic
def authorization_deny(*, client: AgentClient, authorization_id: uuid.UUID, decided_by: User | None = None) -> str:
    """Deny a pending request; returns the loopback URL with ?error=access_denied&state=."""
    authorization = _pending_for_decision(client=client, authorization_id=authorization_id)
    authorization.status = AgentAuthorization.Status.DENIED
    authorization.decided_at = timezone.now()
    authorization.decided_by = decided_by
    authorization.decided_on_page = decided_by is not None
    authorization.save()
    logger.info("agent authorization %s denied", authorization.pk)
    return _with_query(authorization.redirect_uri, {"error": "access_denied", "state": authorization.state})


def _page_client(*, authorization_id: uuid.UUID, request_host: str | None) -> AgentClient:
    """The client of a request decided on the hub's own page: 404 for no request, 403 for a client
    whose users decide elsewhere, 400 `invalid_client` for a disabled one — its business backend's
    decisions are refused while it is (401), and so are its users' here."""
    client = AgentClient.objects.filter(authorizations__pk=authorization_id).first()
    if client is None:
        raise NotFound("No such authorization.")
    if client_sign_in_page(client, request_host=request_host) != SignInPage.HERE:
        raise ForeignClient()
    if not client.enabled:
        raise InvalidClient(CLIENT_DISABLED_MESSAGE)
    return client


def authorization_approve_by_user(*, authorization_id: uuid.UUID, user: User, allowed_routes: list[str],
                                  request_host: str | None = None) -> str:
    """Approve on BailingHub's own page: the principal is the logged-in BailingHub account, and
    only routes it may grant (see `authorization_page_route_choices`) are accepted. `request_host`:
    the host the page was reached at (`client_sign_in_page`)."""
    client = _page_client(authorization_id=authorization_id, request_host=request_host)
    role = project_role(user=user, project=client.project)
    if role is None:
        raise AccessDenied("You are not a member of this client's project.")
    with transaction.atomic():
        authorization = _pending_for_decision(client=client, authorization_id=authorization_id)
        choices = {route.key for route in authorization_page_route_choices(authorization=authorization, user=user)}
        if not allowed_routes or any(key not in choices for key in allowed_routes):
            raise RouteNotAllowed("Choose routes among those offered.")
        principal = {"id": str(user.pk), "tenant": client.project.slug, "roles": [role], "channel": "bailinghub"}
        return authorization_approve(
            client=client, authorization_id=authorization_id, principal=principal,
            on_behalf_of=user.get_username(), allowed_routes=allowed_routes, decided_by=user,
        )


def authorization_deny_by_user(*, authorization_id: uuid.UUID, user: User, request_host: str | None = None) -> str:
    client = _page_client(authorization_id=authorization_id, request_host=request_host)
    if project_role(user=user, project=client.project) is None:
        raise AccessDenied("You are not a member of this client's project.")
    return authorization_deny(client=client, authorization_id=authorization_id, decided_by=user)


# Sessions and tokens


CLIENT_DISABLED_MESSAGE = ("This application is disabled in BailingHub: its requests cannot be decided while it is. "
                           "Nothing was changed.")


def _enabled_client(client_app_id: str) -> AgentClient:
    client = AgentClient.objects.filter(app_id=client_app_id, enabled=True).first()
    if client is None:
        raise InvalidClient("Unknown or disabled client_app_id.")
    return client


# An access token ends this long before its session at the latest: the wire rules want the
# session's refresh_expires_at *later* than the current access token's expires_at.
ACCESS_ENDS_BEFORE_SESSION = timedelta(seconds=1)


def _access_expiry(now: datetime, refresh_expires_at: datetime) -> datetime:
    return min(now + ACCESS_TOKEN_TTL, refresh_expires_at - ACCESS_ENDS_BEFORE_SESSION)


def _revoke(session: AgentSession, *, revoked_by: str, reason: str, now: datetime, revoked_by_name: str = "") -> bool:
    if session.revoked_at is not None:
        return False
    session.revoked_at = now
    session.revoked_by = revoked_by
    session.revoked_reason = reason[:500]
    session.revoked_by_name = revoked_by_name[:150]
    session.save(update_fields=["revoked_at", "revoked_by", "revoked_reason", "revoked_by_name", "updated_at"])
    logger.warning("agent session %s revoked by %s: %s", session.pk, revoked_by, reason[:200])
    return True


def code_exchange(*, client_app_id: str, code: str, redirect_uri: str, code_verifier: str) -> IssuedTokens:
    """Exchange a one-time code (with its PKCE verifier) for a new session and its tokens.

    400 `invalid_grant` for an unknown, expired or other client's code, a redirect_uri that is
    not the one requested, or a verifier that does not match. A code works once: presenting it
    again fails and revokes the session it created.
    """
    client = _enabled_client(client_app_id)
    replayed = False
    with transaction.atomic():
        authorization = (
            AgentAuthorization.objects.select_for_update(of=("self",))
            .filter(code_hash=token_hash(code), client=client)
            .first()
        )
        if authorization is None:
            raise InvalidGrant()
        now = timezone.now()
        if authorization.code_used_at is not None:
            reused = AgentSession.objects.select_for_update(of=("self",)).filter(authorization=authorization).first()
            if reused is not None:
                _revoke(reused, revoked_by=AgentSession.RevokedBy.SYSTEM, reason="authorization code reused", now=now)
            replayed = True
        else:
            if authorization.code_expires_at is None or now >= authorization.code_expires_at:
                raise InvalidGrant("The code has expired.")
            if not secrets_equal(authorization.redirect_uri, redirect_uri):
                raise InvalidGrant("redirect_uri does not match the authorization request.")
            if not secrets_equal(pkce_s256(code_verifier), authorization.code_challenge):
                raise InvalidGrant("code_verifier does not match the code challenge.")
            access, refresh = token_generate(ACCESS_TOKEN_PREFIX), token_generate(REFRESH_TOKEN_PREFIX)
            refresh_expires_at = now + REFRESH_TTL
            principal = authorization.principal or {}
            session = AgentSession.objects.create(
                client=client,
                authorization=authorization,
                principal=principal,
                principal_id=principal.get("id", ""),
                audience=principal.get("audience") or "",
                on_behalf_of=authorization.on_behalf_of,
                subject_display_name=authorization.subject_display_name,
                allowed_routes=authorization.allowed_routes,
                device_label=authorization.device_label,
                access_token_hash=token_hash(access),
                access_expires_at=_access_expiry(now, refresh_expires_at),
                refresh_expires_at=refresh_expires_at,
                last_used_at=now,
            )
            AgentRefreshToken.objects.create(session=session, token_hash=token_hash(refresh), generation=1)
            authorization.status = AgentAuthorization.Status.EXCHANGED
            authorization.code_used_at = now
            authorization.save(update_fields=["status", "code_used_at", "updated_at"])
    if replayed:
        raise InvalidGrant("The code has already been used; the session it was exchanged for is revoked (a used code "
                           "presented again may have leaked): sign in again.")
    logger.info("agent session %s created for client %s", session.pk, client.app_id)
    return IssuedTokens(session=session, access_token=access, refresh_token=refresh, issued_at=now)


def session_refresh(*, client_app_id: str, refresh_token: str) -> IssuedTokens:
    """Rotate: the presented refresh token stops working and a new pair is issued, same session.

    Presenting a refresh token that was already rotated fails closed: 400 `invalid_grant`, and
    the session is revoked (the token leaked or was replayed). The session still ends 30 days
    after the first exchange.
    """
    client = _enabled_client(client_app_id)
    reused = False
    with transaction.atomic():
        current = (
            AgentRefreshToken.objects.select_for_update(of=("self",))
            .filter(token_hash=token_hash(refresh_token)).first()
        )
        if current is None:
            raise InvalidGrant()
        session = AgentSession.objects.select_for_update(of=("self",)).get(pk=current.session_id)
        if session.client_id != client.pk:
            raise InvalidGrant()
        now = timezone.now()
        if current.rotated_at is not None:
            _revoke(session, revoked_by=AgentSession.RevokedBy.SYSTEM, reason="rotated refresh token reused", now=now)
            reused = True
        else:
            # In its last second a session has no access token left to give.
            end = session_end(session=session, now=now)
            if end is not None:
                raise InvalidGrant(session_end_text(session=session, end=end))
            if _access_expiry(now, session.refresh_expires_at) <= now:
                raise InvalidGrant(session_end_text(session=session, end=SessionEnd.EXPIRED))
            access, refresh = token_generate(ACCESS_TOKEN_PREFIX), token_generate(REFRESH_TOKEN_PREFIX)
            current.rotated_at = now
            current.save(update_fields=["rotated_at", "updated_at"])
            AgentRefreshToken.objects.create(
                session=session, token_hash=token_hash(refresh), generation=current.generation + 1
            )
            session.access_token_hash = token_hash(access)
            session.access_expires_at = _access_expiry(now, session.refresh_expires_at)
            session.last_used_at = now
            session.save(update_fields=["access_token_hash", "access_expires_at", "last_used_at", "updated_at"])
    if reused:
        raise InvalidGrant("This refresh token was already used; the session has been revoked.")
    logger.info("agent session %s refreshed", session.pk)
    return IssuedTokens(session=session, access_token=access, refresh_token=refresh, issued_at=now)


@transaction.atomic
def session_revoke(*, session: AgentSession, revoked_by: str, reason: str = "",
                   revoked_by_name: str = "") -> AgentSession:
    """End a session now; its tokens stop working at once. Revoking twice changes nothing.
    `revoked_by_name` is the operator's username when an operator revokes it."""
    locked = AgentSession.objects.select_for_update(of=("self",)).get(pk=session.pk)
    _revoke(locked, revoked_by=revoked_by, reason=reason, now=timezone.now(), revoked_by_name=revoked_by_name)
    session.revoked_at, session.revoked_by, session.revoked_reason, session.revoked_by_name = (
        locked.revoked_at, locked.revoked_by, locked.revoked_reason, locked.revoked_by_name
    )
    return locked


def session_revoke_by_refresh_token(*, client_app_id: str, refresh_token: str) -> None:
    """The agent's own revoke with a refresh token of the session's lineage.

    As in RFC 7009, an unknown token is not an error (nothing to revoke); an unknown client is.
    """
    client = AgentClient.objects.filter(app_id=client_app_id).first()
    if client is None:
        raise InvalidClient("Unknown client_app_id.")
    token = (
        AgentRefreshToken.objects.select_related("session")
        .filter(token_hash=token_hash(refresh_token), session__client=client)
        .first()
    )
    if token is not None:
        session_revoke(session=token.session, revoked_by=AgentSession.RevokedBy.AGENT, reason="revoked by the agent")


def session_revoke_for_client(*, client: AgentClient, session_id: uuid.UUID) -> AgentSession:
    """The business backend ends one of its client's sessions; 404 for any other session."""
    session = AgentSession.objects.filter(pk=session_id, client=client).first()
    if session is None:
        raise NotFound("No such session.")
    return session_revoke(session=session, revoked_by=AgentSession.RevokedBy.CLIENT, reason="revoked by the client")


def session_touch(*, session: AgentSession) -> None:
    """Record activity, at most once a minute per session (one UPDATE, no read)."""
    now = timezone.now()
    if session.last_used_at is not None and now - session.last_used_at < LAST_USED_RESOLUTION:
        return
    AgentSession.objects.filter(pk=session.pk).update(last_used_at=now)
    session.last_used_at = now


def _key(value: str) -> Cast:
    return Cast(Value(value), models.CharField(max_length=64))


@transaction.atomic
def route_grants_rekey(*, project_id: Any, old: str, new: str | None) -> int:
    """A route of the project renamed from `old` to `new`, or deleted (`new` None): every grant of
    the project that names `old` — its agent clients, authorizations not yet exchanged, sessions —
    names `new` instead, or loses it. Grants are route keys: left as they were, a rename cut its
    agents off, and a route created later with the old key inherited every grant of the deleted
    one. Returns how many grants changed."""
    lists: ArrayField[list[str], list[str]] = ArrayField(models.CharField(max_length=64))
    if new is None:
        changed = Func(F("allowed_routes"), _key(old), function="array_remove", output_field=lists)
    else:  # a grant that already named `new` (a stale one) keeps it once
        changed = Func(Func(F("allowed_routes"), _key(new), function="array_remove", output_field=lists),
                       _key(old), _key(new), function="array_replace", output_field=lists)
    now = timezone.now()
    return sum((
        AgentClient.objects.filter(project_id=project_id, allowed_routes__contains=[old])
        .update(allowed_routes=changed, updated_at=now),
        AgentAuthorization.objects.filter(
            client__project_id=project_id, allowed_routes__contains=[old],
            status__in=[AgentAuthorization.Status.PENDING, AgentAuthorization.Status.APPROVED],
        ).update(allowed_routes=changed, updated_at=now),
        AgentSession.objects.filter(client__project_id=project_id, allowed_routes__contains=[old])
        .update(allowed_routes=changed, updated_at=now),
    ))
