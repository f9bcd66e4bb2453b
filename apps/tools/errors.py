"""The tools app's errors, each with a stable code and HTTP status."""

from __future__ import annotations

from apps.core.errors import ApiError


class SpecRefusedError(ApiError):
    """The spec as a whole cannot be compiled; ``reason`` is the compiler's refusal code."""

    code = "spec_refused"
    status = 400
    message = "The spec was refused."


class ProviderNameTaken(ApiError):
    code = "provider_name_taken"
    status = 409
    message = "This project already has a tool provider with that name."


class InvalidProvider(ApiError):
    code = "invalid_request"
    status = 400
    message = "The tool provider is invalid."


class ToolProviderNotFound(ApiError):
    code = "tool_provider_not_found"
    status = 404
    message = "Tool provider not found."


class RouteToolsInvalid(ApiError):
    """A route's tool sources or tool policy were refused; ``field`` names the setting."""

    code = "invalid_request"
    status = 400
    message = "The route's tool settings are invalid."


class AgentDirectDisabled(ApiError):
    code = "agent_direct_disabled"
    status = 403
    message = "Direct business tools are switched off on this route."


class ToolNotFound(ApiError):
    code = "tool_not_found"
    status = 404
    message = "No tool of that name is authorized for this session on this route."


class CapabilityChanged(ApiError):
    code = "capability_changed"
    status = 409
    message = "The route's capabilities changed since this revision; discover the tools again."


class InvalidToolProvider(ApiError):
    """The builder API's answer to an invalid provider field; ``fields`` names it."""

    code = "invalid_tool_provider"
    status = 422
    message = "The tool provider is invalid."


class InvalidRouteSettings(ApiError):
    """The builder API's answer to an invalid route tools or bindings field; ``fields`` names it."""

    code = "invalid_route_settings"
    status = 422
    message = "The route's settings are invalid."


class BuilderSpecRefused(ApiError):
    """The builder API's answer to a spec the compiler refuses; ``reason`` is the refusal code."""

    code = "spec_refused"
    status = 422
    message = "The spec was refused."


class RouteNotFound(ApiError):
    code = "route_not_found"
    status = 404
    message = "Route not found."


class ToolsForbidden(ApiError):
    code = "forbidden"
    status = 403
    message = "Your role in this project does not allow this change."


class ToolHeldBySpec(ApiError):
    """A tool whose spec declares governance the hub could not read cannot be switched on."""

    code = "tool_held_by_spec"
    status = 409
    message = "The tool's spec declares a rate limit the hub cannot read: fix it in the spec and re-import."
