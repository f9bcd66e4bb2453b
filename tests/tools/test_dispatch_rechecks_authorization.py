"""A call queued for the dispatcher is sent only while its caller may still make it: an operator who
withdraws the agent's access between the request that queued a call and the worker that takes it
(a slow queue, a message the watchdog sends again after a broker outage) stops it, as the resume
and the next request would be stopped — and what the operator did not withdraw is still sent."""

from collections.abc import Callable

import pytest

from apps.agent_auth.models import AgentClient
from apps.agent_auth.services import session_revoke
from apps.routes.models import Route
from apps.tools.approvals import approval_decide
from apps.tools.delivery import invocation_dispatch
from apps.tools.models import Approval, Invocation, ToolProvider
from apps.tools.route_tools import route_tools_set
from tests.routes.factories import RouteFactory
from tests.tools.invocation_helpers import Shop

pytest_plugins = ["tests.tools.invocation_fixtures"]


def _queued(shop: Shop, settings) -> Invocation:
    """A write queued for the dispatcher and proven not sent (no worker takes this test's queue)."""
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0
    body = shop.invoke("note_add", {"text": "once"}).json()
    assert body["state"] == "in_progress"
    inv = Invocation.objects.get(invocation_id=body["invocation_id"])
    assert inv.journal_state == "absent"
    return inv


def _session_revoked(shop: Shop) -> None:
    session_revoke(session=shop.session, revoked_by="operator", reason="lost laptop")


def _client_disabled(shop: Shop) -> None:
    AgentClient.objects.filter(pk=shop.session.client_id).update(enabled=False)


def _route_disabled(shop: Shop) -> None:
    Route.objects.filter(pk=shop.route.pk).update(enabled=False)


def _route_taken_from_the_client(shop: Shop) -> None:
    AgentClient.objects.filter(pk=shop.session.client_id).update(allowed_routes=[])


def _agents_switched_off_on_the_route(shop: Shop) -> None:
    Route.objects.filter(pk=shop.route.pk).update(agent_client_enabled=False)


def _direct_tools_switched_off(shop: Shop) -> None:
    Route.objects.filter(pk=shop.route.pk).update(tools_direct_enabled=False)


def _tool_taken_off_the_route(shop: Shop) -> None:
    route_tools_set(route=shop.route, write_tools=["stock_write"])


def _audience_narrowed(shop: Shop) -> None:
    Route.objects.filter(pk=shop.route.pk).update(audience_policy=Route.AudiencePolicy.LISTED,
                                                  allowed_audiences=["manager"])


# Each withdrawal, and what the call's answer names as the cause.
WITHDRAWALS: dict[str, tuple[Callable[[Shop], None], str]] = {
    "session revoked": (_session_revoked, "the agent session that made it was revoked or ended"),
    "client disabled": (_client_disabled, "or its client disabled"),
    "route disabled": (_route_disabled, "(route_unavailable)"),
    "route taken from the client": (_route_taken_from_the_client, "(route_unavailable)"),
    "agents switched off on the route": (_agents_switched_off_on_the_route, "(agent_client_disabled)"),
    "direct tools switched off": (_direct_tools_switched_off, "direct tools were switched off"),
    "tool taken off the route": (_tool_taken_off_the_route, "its tool was taken off its route"),
    "audience narrowed": (_audience_narrowed, "(audience_not_allowed)"),
}


@pytest.mark.parametrize(("withdraw", "cause"), WITHDRAWALS.values(), ids=WITHDRAWALS.keys())
def test_a_queued_call_whose_access_was_withdrawn_is_never_sent(shop, settings, withdraw, cause):
    inv = _queued(shop, settings)
    withdraw(shop)
    assert invocation_dispatch(invocation_pk=str(inv.pk)) == "access_withdrawn"
    inv.refresh_from_db()
    assert (inv.state, inv.journal_state, inv.frozen_arguments) == ("rejected_before_dispatch", "absent", "")
    assert (inv.result["state"], inv.result["auto_retry_allowed"]) == ("rejected_before_dispatch", False)
    assert "Nothing was sent" in inv.result["text"] and cause in inv.result["text"]
    assert shop.server.received == []
    assert invocation_dispatch(invocation_pk=str(inv.pk)) == "settled"  # the watchdog's message again
    assert shop.server.received == []


def test_a_queued_call_is_sent_when_the_operator_withdrew_something_else(shop, settings):
    """Another tool taken off the route, and the client's other route withdrawn, leave this call alone."""
    other = RouteFactory(project=shop.route.project, key="other-route")
    AgentClient.objects.filter(pk=shop.session.client_id).update(allowed_routes=[shop.route.key, other.key])
    inv = _queued(shop, settings)
    route_tools_set(route=shop.route, write_tools=["note_add"])
    AgentClient.objects.filter(pk=shop.session.client_id).update(allowed_routes=[shop.route.key])
    assert invocation_dispatch(invocation_pk=str(inv.pk)) == "executed"
    assert len(shop.server.requests_to("/api/notes")) == 1


def test_a_queued_call_whose_provider_was_switched_off_is_never_sent(shop, settings):
    inv = _queued(shop, settings)
    ToolProvider.objects.filter(pk=shop.provider.pk).update(enabled=False)
    assert invocation_dispatch(invocation_pk=str(inv.pk)) == "tool_changed"
    inv.refresh_from_db()
    assert (inv.state, inv.result["auto_retry_allowed"]) == ("rejected_before_dispatch", False)
    assert shop.server.received == []


def test_a_queued_call_whose_route_forced_an_approval_since_waits_for_one_and_nothing_is_sent(shop, settings):
    """As a call refused for now is (test_invocations_approvals): the route's new rule applies to a
    call not yet sent, so the agent's resume asks the approver first."""
    inv = _queued(shop, settings)
    route_tools_set(route=shop.route, force_approval_tools=["note_add"])
    assert invocation_dispatch(invocation_pk=str(inv.pk)) == "approval_required"
    assert shop.server.received == []
    inv.refresh_from_db()
    assert (inv.state, inv.result["auto_retry_allowed"]) == ("rejected_before_dispatch", True)
    body = shop.resume(inv.invocation_id).json()
    approval = Approval.objects.get(invocation=inv)
    assert (body["state"], body["approval_id"], approval.reasons) == (
        "awaiting_approval", str(approval.pk), ["route_forced"])
    assert shop.server.received == []


def test_an_approved_call_is_sent_though_the_route_forced_approvals_since(shop, settings):
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0
    route_tools_set(route=shop.route, force_approval_tools=["note_add"])
    invocation_id = shop.invoke("note_add", {"text": "once"}).json()["invocation_id"]
    approval_decide(approval_id=Approval.objects.get().pk, projects=[shop.route.project], decision_id="d-1",
                    decision="approved")
    assert shop.resume(invocation_id).json()["state"] == "in_progress"
    inv = Invocation.objects.get(invocation_id=invocation_id)
    assert invocation_dispatch(invocation_pk=str(inv.pk)) == "executed"
    assert len(shop.server.requests_to("/api/notes")) == 1
