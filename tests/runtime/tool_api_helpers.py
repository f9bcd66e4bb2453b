"""Requests of the agent tool endpoints, as an agent host sends them."""

from __future__ import annotations

from typing import Any

from apps.ledger.models import Conversation, Message, Run
from apps.tools.models import RouteToolSource, Tool, ToolProvider
from tests.agent_auth.helpers import bearer
from tests.ledger.helpers import post_json


def search(client, token: str, body: Any, route_key: str = "store-assistant"):
    return post_json(client, f"/agent-api/v1/workspaces/{route_key}/capabilities/search", body, token)


def detail(client, token: str, name: str, **params: str):
    return client.get(f"/agent-api/v1/tools/{name}", params, **bearer(token))


def catalog(client, token: str, **params: str):
    return client.get("/agent-api/v1/tools", params, **bearer(token))


def stored_rows() -> dict[str, int]:
    """Rows of every table a tool endpoint could touch, to assert that it wrote nothing."""
    counts = {model.__name__: model.objects.count()
              for model in (Conversation, Message, Run, ToolProvider, Tool, RouteToolSource)}
    counts["tool_updates"] = sorted(str(value) for value in Tool.objects.values_list("updated_at", flat=True))
    return counts


def refused(response, status: int, error: str) -> None:
    assert response.status_code == status, response.content
    assert response.json()["error"] == error
    assert response["Cache-Control"] == "no-store"
