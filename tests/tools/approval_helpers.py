"""A pending approval reached the real way: an agent session opens a turn on a route drawing the
store tools and calls a high-risk write through ``POST /agent-api/v1/tool-invocations``."""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import parse_qs, urlsplit

from apps.agent_auth.services import authorization_approve_by_user, code_exchange
from apps.tools.models import Approval
from tests.agent_auth.helpers import authorization_for
from tests.ledger.helpers import open_turn, post_json

INVOKE_URL = "/agent-api/v1/tool-invocations"


def invocation_id(n: int) -> str:
    return hashlib.sha256(f"approval-test-{n}".encode()).hexdigest()


def turn(client, token: str, *, route_key: str, n: int, conversation: str = "") -> dict[str, Any]:
    """An open run: its ``run_id`` and ``capability_revision``."""
    response = open_turn(client, token, route_key, n, client_conversation_id=conversation or f"approvals-{n}")
    assert response.status_code in (200, 201), response.content
    return response.json()


def call(client, token: str, run: dict[str, Any], *, route_key: str, n: int, tool: str = "order_refund",
         arguments: dict[str, Any] | None = None):
    return post_json(client, INVOKE_URL, {
        "invocation_id": invocation_id(n),
        "route": route_key,
        "capability_revision": run["capability_revision"],
        "agent_run_id": run["run_id"],
        "tool": tool,
        "arguments": arguments if arguments is not None else {"order_id": 1000 + n, "amount": 12.5,
                                                              "reason": "破损退款"},
    }, token)

HUB_PAGE = "https://testserver/agent-auth/authorize"  # "testserver" is in the test settings' ALLOWED_HOSTS


def invoke(client, token: str, *, route_key: str, n: int, tool: str = "order_refund",
           arguments: dict[str, Any] | None = None, conversation: str = ""):
    run = turn(client, token, route_key=route_key, n=n, conversation=conversation)
    return call(client, token, run, route_key=route_key, n=n, tool=tool, arguments=arguments)


def pending_approval(client, token: str, *, route_key: str = "store-assistant", n: int = 1,
                     tool: str = "order_refund", arguments: dict[str, Any] | None = None,
                     conversation: str = "") -> Approval:
    response = invoke(client, token, route_key=route_key, n=n, tool=tool, arguments=arguments,
                      conversation=conversation)
    assert response.status_code == 200, response.content
    answer = response.json()
    assert answer["state"] == "awaiting_approval", answer
    return Approval.objects.select_related("invocation").get(pk=answer["approval_id"])


def session_signed_in_on_page(agent_client, user):
    """A session signed in on BailingHub's own authorization page by ``user``: the agent acts for them.
    The client is made one that sends its users to that page (only such a client's requests are
    decided there)."""
    type(agent_client).objects.filter(pk=agent_client.pk).update(agent_authorize_url=HUB_PAGE)
    agent_client.agent_authorize_url = HUB_PAGE
    authorization = authorization_for(agent_client)
    redirect = authorization_approve_by_user(authorization_id=authorization.pk, user=user,
                                             allowed_routes=list(authorization.requested_routes))
    code = parse_qs(urlsplit(redirect).query)["code"][0]
    return code_exchange(client_app_id=agent_client.app_id, code=code, redirect_uri=authorization.redirect_uri,
                         code_verifier=authorization.verifier)
