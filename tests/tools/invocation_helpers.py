"""Requests of the invocation endpoints as an agent host sends them, and what they stored."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

from rest_framework.test import APIClient

from apps.tools.models import Approval, Invocation, InvocationJournalEntry
from apps.tools.surface import route_surface
from tests.agent_auth.helpers import bearer
from tests.tools.business_server import BusinessServer
from tests.tools.factories import FIXTURES

SPEC = (FIXTURES / "invocations.yaml").read_bytes()
ROUTE = "shop-assistant"
TOOLS = ["item_read", "stock_write", "refund_issue", "limited_write", "note_add"]
WRITES = ["stock_write", "refund_issue", "limited_write", "note_add"]
URL = "/agent-api/v1/tool-invocations"


def new_id() -> str:
    return secrets.token_hex(32)


@dataclass
class Shop:
    client: APIClient
    token: str
    session: Any
    route: Any
    provider: Any
    server: BusinessServer
    run_id: str

    @property
    def revision(self) -> str:
        return route_surface(route=self.route, session=self.session).revision

    def body(self, tool: str, arguments: Any, /, *, invocation_id: str | None = None, **overrides: Any) -> dict:
        body = {"invocation_id": invocation_id or new_id(), "route": ROUTE, "capability_revision": self.revision,
                "agent_run_id": self.run_id, "tool": tool, "arguments": arguments}
        body.update(overrides)
        return {key: value for key, value in body.items() if value is not ...}

    def post(self, body: Any, token: str | None = None):
        data = body if isinstance(body, bytes | str) else json.dumps(body, ensure_ascii=False)
        return self.client.generic("POST", URL, data, content_type="application/json", **bearer(token or self.token))

    def invoke(self, tool: str, arguments: Any, /, **kwargs: Any):
        return self.post(self.body(tool, arguments, **kwargs))

    def resume(self, invocation_id: str, body: Any = "{}"):
        return self.client.generic("POST", f"{URL}/{invocation_id}/resume", body, content_type="application/json",
                                   **bearer(self.token))

    def receipt(self, invocation_id: str, **params: str):
        return self.client.get(f"{URL}/{invocation_id}/receipt", params, **bearer(self.token))


def stored() -> dict[str, int]:
    return {"invocations": Invocation.objects.count(), "approvals": Approval.objects.count(),
            "journal": InvocationJournalEntry.objects.count()}
