"""Agent Auth v1 errors (contracts-beyond-seeds §1) and the route errors every workspace endpoint shares."""

from __future__ import annotations

from apps.core.errors import ApiError, InvalidRequest, RateLimited, Unauthorized

__all__ = [
    "AccessDenied",
    "AgentAuthUnavailable",
    "AgentClientDisabled",
    "AlreadyProcessed",
    "AudienceNotAllowed",
    "AuthorizationExpired",
    "InvalidClient",
    "InvalidGrant",
    "InvalidRequest",
    "InvalidRoute",
    "NotFound",
    "RateLimited",
    "RouteNotAllowed",
    "RouteUnavailable",
    "Unauthorized",
    "UnsupportedGrantType",
]


class InvalidClient(ApiError):
    code = "invalid_client"
    status = 400
    message = "The client is unknown, disabled, or may not ask for these routes."


class RouteNotAllowed(ApiError):
    code = "route_not_allowed"
    status = 403
    message = "These routes are not within the request and the client's allowed routes."


class InvalidGrant(ApiError):
    code = "invalid_grant"
    status = 400
    message = "The code or refresh token is invalid, expired or already used."


class UnsupportedGrantType(ApiError):
    code = "unsupported_grant_type"
    status = 400
    message = "grant_type must be authorization_code or refresh_token."


class AccessDenied(ApiError):
    code = "access_denied"
    status = 403
    message = "You may not decide this authorization."


class ForeignClient(AccessDenied):
    """The request's client sends its users to its own authorization page (a business system's):
    BailingHub's page does not decide for it."""

    message = "This application's users approve agents on its own site, not on BailingHub's page."


class NotFound(ApiError):
    code = "not_found"
    status = 404
    message = "Not found."


class AlreadyProcessed(ApiError):
    code = "already_processed"
    status = 409
    message = "This authorization has already been decided."


class AuthorizationExpired(ApiError):
    code = "expired"
    status = 410
    message = "This authorization has expired."


class AgentAuthUnavailable(ApiError):
    code = "agent_auth_unavailable"
    status = 503
    message = "Agent authorization is temporarily unavailable; retry later."

    retry_after = 5


class InvalidRoute(ApiError):
    code = "invalid_route"
    status = 400
    message = "Route keys are 2–64 characters of a-z, 0-9, '_' or '-', starting with a letter or digit."


class RouteUnavailable(ApiError):
    code = "route_unavailable"
    status = 404
    # Never says which (outside the grant, disabled or missing): what the agent can do about each.
    message = ("This route is not available to this session: GET /agent-api/v1/workspaces lists the ones it may "
               "use; for another, sign in again asking for it (an operator must allow it for the client).")


class AudienceNotAllowed(ApiError):
    code = "audience_not_allowed"
    status = 403
    message = "This route does not admit the session's audience."


class AgentClientDisabled(ApiError):
    code = "agent_client_disabled"
    status = 403
    message = "Local agents are not enabled on this route."
