"""Shared set-up of the tools and routes builder API tests."""

from __future__ import annotations

from apps.knowledge.models import RouteKnowledgeBinding
from apps.projects.tokens import operator_token_create
from apps.routes.models import Route
from apps.tools.models import RouteToolSource, Tool, ToolProvider
from tests.tools.factories import STORE_SPEC

BASE = "/api/v1/builder"
STORE_TEXT = STORE_SPEC.decode("utf-8")


def token_client(api_client, owner, scopes):
    _, token = operator_token_create(user=owner.user, name="ci", scopes=scopes)
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return api_client


def error(response, status, code):
    body = response.json()
    assert (response.status_code, body["error"]) == (status, code), body
    return body


def snapshot():
    """Everything a rejected request must leave as it was."""
    return (
        sorted(ToolProvider.objects.values_list("name", "spec_sha256", "base_url", "enabled", "secret_encrypted")),
        sorted(Tool.objects.values_list("provider__name", "name", "enabled", "compiled")),
        sorted(RouteToolSource.objects.values_list("route__key", "provider__name", "allowed_tools", "position")),
        sorted(RouteKnowledgeBinding.objects.values_list("route__key", "knowledge_base_id")),
        sorted(Route.objects.values_list("key", "permission", "tools_direct_enabled", "write_tools",
                                         "force_approval_tools", "unattended_write_tools", "max_tool_calls")),
    )
