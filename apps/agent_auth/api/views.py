"""Agent Auth v1 endpoints (contracts-beyond-seeds §1). Success is 201 for creating an
authorization and 200 with a JSON body for everything else."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, ClassVar, cast

from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import NotAuthenticated, ParseError, UnsupportedMediaType
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer
from rest_framework.views import APIView

from apps.agent_auth.api.presenters import authorization_context, session_payload, token_payload
from apps.agent_auth.api.serializers import (
    AuthorizationApproveSerializer,
    AuthorizationCreateSerializer,
    AuthorizationDenySerializer,
    BearerRevokeSerializer,
    CodeGrantSerializer,
    RefreshGrantSerializer,
    RevokeSerializer,
    SessionRevokeSerializer,
)
from apps.agent_auth.authentication import (
    REFUSED_MISSING,
    REFUSED_MISSING_CLIENT,
    AgentBearerAuthentication,
    ClientTokenAuthentication,
    refused,
)
from apps.agent_auth.errors import InvalidRequest, NotFound, UnsupportedGrantType
from apps.agent_auth.models import AUTHORIZATION_TTL, AgentClient, AgentSession
from apps.agent_auth.selectors import authorization_get_for_client
from apps.agent_auth.services import (
    IssuedTokens,
    authorization_approve,
    authorization_create,
    authorization_deny,
    authorization_url,
    code_exchange,
    session_refresh,
    session_revoke,
    session_revoke_by_refresh_token,
    session_revoke_for_client,
)
from apps.core.errors import json_body_required_text, malformed_body
from apps.core.negotiation import AgentContentNegotiation


# DRF types `request.auth` as a Token; our authentication classes put these there.
def _auth_client(request: Request) -> AgentClient:
    return cast(AgentClient, request.auth)


def _auth_session(request: Request) -> AgentSession:
    return cast(AgentSession, request.auth)


class AgentAuthApi(APIView):
    """Agent Auth answers only with its contract's error codes: a body that is not JSON, or of
    another media type, is `invalid_request` (never 415), with the parser's account of what is
    wrong. (Another charset never reaches the view: ContentCharsetMiddleware answers it, with the
    same code under BAILING_CLOSED_ERROR_PREFIXES.)"""

    content_negotiation_class = AgentContentNegotiation
    # What a request without an Authorization header is told, where a token is required.
    token_missing: ClassVar[str | None] = None

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, ParseError):
            exc = malformed_body(exc.detail)
        elif isinstance(exc, UnsupportedMediaType):
            exc = InvalidRequest(json_body_required_text(self.request.content_type))
        elif isinstance(exc, NotAuthenticated) and self.token_missing:
            exc = refused(self.token_missing)
        return super().handle_exception(exc)


class PublicApi(AgentAuthApi):
    """Called by a local agent before it holds a token."""

    authentication_classes: list[type[BaseAuthentication]] = []
    permission_classes = [AllowAny]


class ClientTokenApi(AgentAuthApi):
    """Called by the business backend with its client token; `request.auth` is the AgentClient."""

    authentication_classes = [ClientTokenAuthentication]
    permission_classes = [IsAuthenticated]
    token_missing = REFUSED_MISSING_CLIENT


class AgentBearerApi(AgentAuthApi):
    """Called by a local agent with its access token; `request.auth` is the AgentSession."""

    authentication_classes = [AgentBearerAuthentication]
    permission_classes = [IsAuthenticated]
    token_missing = REFUSED_MISSING


class AuthorizationCreateApi(PublicApi):
    def post(self, request: Request) -> Response:
        serializer = AuthorizationCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        authorization = authorization_create(**serializer.validated_data, requester_ip=request.META.get("REMOTE_ADDR"))
        return Response(
            {
                "authorization_id": str(authorization.pk),
                "authorization_url": authorization_url(authorization=authorization),
                "expires_in": int(AUTHORIZATION_TTL.total_seconds()),
            },
            status=201,
        )


class AuthorizationDetailApi(ClientTokenApi):
    def get(self, request: Request, authorization_id: uuid.UUID) -> Response:
        authorization = authorization_get_for_client(client=_auth_client(request), authorization_id=authorization_id)
        if authorization is None:
            raise NotFound("No such authorization.")
        return Response(authorization_context(authorization))


class AuthorizationApproveApi(ClientTokenApi):
    def post(self, request: Request, authorization_id: uuid.UUID) -> Response:
        serializer = AuthorizationApproveSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        redirect_uri = authorization_approve(client=_auth_client(request), authorization_id=authorization_id,
                                             **serializer.validated_data)
        return Response({"redirect_uri": redirect_uri})


class AuthorizationDenyApi(ClientTokenApi):
    def post(self, request: Request, authorization_id: uuid.UUID) -> Response:
        AuthorizationDenySerializer(data=request.data).is_valid(raise_exception=True)
        redirect_uri = authorization_deny(client=_auth_client(request), authorization_id=authorization_id)
        return Response({"redirect_uri": redirect_uri})


class TokenApi(PublicApi):
    grants: ClassVar[dict[str, tuple[type[Serializer[Any]], Callable[..., IssuedTokens]]]] = {
        "authorization_code": (CodeGrantSerializer, code_exchange),
        "refresh_token": (RefreshGrantSerializer, session_refresh),
    }

    def post(self, request: Request) -> Response:
        data = request.data
        if not isinstance(data, dict) or not isinstance(data.get("grant_type"), str):
            raise InvalidRequest("grant_type is required.")
        if data["grant_type"] not in self.grants:
            raise UnsupportedGrantType()
        serializer_class, issue = self.grants[data["grant_type"]]
        serializer = serializer_class(data=data)
        serializer.is_valid(raise_exception=True)
        fields = {key: value for key, value in serializer.validated_data.items() if key != "grant_type"}
        return Response(token_payload(issue(**fields)))


class SessionDetailApi(AgentBearerApi):
    def get(self, request: Request) -> Response:
        return Response(session_payload(_auth_session(request)))


class RevokeApi(AgentAuthApi):
    """The agent's revoke: with its bearer, or (no Authorization header) with a refresh token.
    The body is checked either way before anything is revoked."""

    authentication_classes = [AgentBearerAuthentication]
    permission_classes = [AllowAny]

    def post(self, request: Request) -> Response:
        if request.auth is not None:
            BearerRevokeSerializer(data=request.data).is_valid(raise_exception=True)
            session_revoke(session=_auth_session(request), revoked_by=AgentSession.RevokedBy.AGENT,
                           reason="revoked by the agent")
        else:
            serializer = RevokeSerializer(data=request.data)
            serializer.is_valid(raise_exception=True)
            session_revoke_by_refresh_token(**serializer.validated_data)
        return Response({"revoked": True})


class ClientSessionRevokeApi(ClientTokenApi):
    def post(self, request: Request, session_id: uuid.UUID) -> Response:
        SessionRevokeSerializer(data=request.data).is_valid(raise_exception=True)
        session_revoke_for_client(client=_auth_client(request), session_id=session_id)
        return Response({"revoked": True})
