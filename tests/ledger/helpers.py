"""Requests of the turn, completion and memory endpoints, as an agent host sends them."""

from __future__ import annotations

import json
from typing import Any

from apps.ledger.models import Conversation, MemoryNote, Message, Run
from tests.agent_auth.helpers import bearer


def turn_url(route_key: str) -> str:
    return f"/agent-api/v1/workspaces/{route_key}/turns"


def complete_url(run_id: str) -> str:
    return f"/agent-api/v1/runs/{run_id}/complete"


def turn_body(n: int = 1, **overrides: Any) -> dict[str, Any]:
    body = {
        "client_conversation_id": "local-conversation-1",
        "client_turn_id": f"turn-{n}",
        "user_message_id": f"message-{n}",
        "user_input": f"帮我查一下员工 Ada ({n})",
    }
    body.update(overrides)
    return {key: value for key, value in body.items() if value is not ...}


def completion_body(n: int = 1, **overrides: Any) -> dict[str, Any]:
    body = {"assistant_message_id": f"assistant-message-{n}", "status": "completed", "content": f"已完成 {n}。"}
    body.update(overrides)
    return {key: value for key, value in body.items() if value is not ...}


def post_json(client, url: str, body: Any, token: str, **extra):
    data = body if isinstance(body, bytes | str) else json.dumps(body, ensure_ascii=False)
    return client.generic("POST", url, data, content_type="application/json", **bearer(token), **extra)


def open_turn(client, token: str, route_key: str, n: int = 1, **overrides: Any):
    return post_json(client, turn_url(route_key), turn_body(n, **overrides), token)


def complete_run(client, token: str, run_id: str, n: int = 1, **overrides: Any):
    return post_json(client, complete_url(run_id), completion_body(n, **overrides), token)


def ledger_counts() -> dict[str, int]:
    """Rows of every ledger table, to assert that a refused request stored nothing."""
    return {model.__name__: model.objects.count() for model in (Conversation, Message, Run, MemoryNote)}
