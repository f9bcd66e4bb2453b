"""Resume, receipt and inspection capabilities: exactly the contract's shapes, read-only receipts
and inspection (no query parameters, nothing dispatched or consumed), 404 for another session's id."""

import pytest

from apps.tools.models import Approval
from tests.agent_auth.helpers import bearer
from tests.tools.invocation_helpers import URL, new_id

pytest_plugins = ["tests.tools.invocation_fixtures"]


def test_inspection_capabilities(shop):
    response = shop.client.get(f"{URL}/inspection-capabilities", **bearer(shop.token))
    assert response.status_code == 200
    assert response.json() == {"schema_version": "bailing.agent-invocation-inspection-capabilities.v1",
                               "receipt_schema": "bailing.agent-invocation-receipt.v1", "read_only": True}
    assert response["Cache-Control"] == "no-store"


def test_inspection_takes_no_query_parameters(shop):
    response = shop.client.get(f"{URL}/inspection-capabilities", {"x": "1"}, **bearer(shop.token))
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")


def test_the_receipt_of_an_executed_call(shop, dispatching):
    invocation_id = new_id()
    result = shop.invoke("item_read", {"item_id": "1"}, invocation_id=invocation_id).json()
    response = shop.receipt(invocation_id)
    receipt = response.json()
    observed_at = receipt.pop("observed_at")
    assert observed_at
    assert receipt == {
        "schema_version": "bailing.agent-invocation-receipt.v1", "read_only": True,
        "business_operation_performed": False, "invocation_id": invocation_id, "agent_run_id": shop.run_id,
        "route": "shop-assistant", "tool": "item_read", "result": result, "result_source": "job",
        "dispatch_state": "attempted", "approval": {"status": "none", "approval_id": None},
        "journal_state": "completed"}
    assert response["Cache-Control"] == "no-store"
    assert len(shop.server.received) == 1


def test_the_receipt_of_a_pending_approval_consumes_nothing(shop):
    invocation_id = new_id()
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 2}, invocation_id=invocation_id)
    receipt = shop.receipt(invocation_id).json()
    approval = Approval.objects.get()
    assert (receipt["dispatch_state"], receipt["journal_state"], receipt["approval"]) == (
        "not_dispatched", "absent", {"status": "pending", "approval_id": str(approval.pk)})
    assert receipt["result"]["state"] == "awaiting_approval"
    approval.refresh_from_db()
    assert (approval.status, approval.used_at) == ("pending", None)


def test_a_malformed_stored_result_is_null_never_a_success(shop):
    from apps.tools.models import Invocation

    invocation_id = new_id()
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 2}, invocation_id=invocation_id)
    Invocation.objects.update(result={"state": "executed", "ok": True})
    receipt = shop.receipt(invocation_id).json()
    assert (receipt["result"], receipt["result_source"]) == (None, "none")


def test_the_receipt_takes_no_query_parameters(shop):
    invocation_id = new_id()
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 2}, invocation_id=invocation_id)
    response = shop.receipt(invocation_id, route="shop-assistant")
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")


@pytest.mark.parametrize("path", ["receipt", "resume"])
def test_an_unknown_invocation_is_404(shop, path):
    url = f"{URL}/{new_id()}/{path}"
    response = (shop.client.get(url, **bearer(shop.token)) if path == "receipt"
                else shop.client.generic("POST", url, "{}", content_type="application/json", **bearer(shop.token)))
    assert (response.status_code, response.json()["error"]) == (404, "invocation_not_found")


def test_another_sessions_invocation_is_404(shop):
    from tests.agent_auth.factories import AgentClientFactory
    from tests.agent_auth.helpers import PRINCIPAL, session_for

    invocation_id = new_id()
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 2}, invocation_id=invocation_id)
    other = session_for(AgentClientFactory(project=shop.route.project, allowed_routes=["shop-assistant"]),
                        principal=PRINCIPAL)
    response = shop.client.get(f"{URL}/{invocation_id}/receipt", **bearer(other.access_token))
    assert (response.status_code, response.json()["error"]) == (404, "invocation_not_found")


@pytest.mark.parametrize("body", ['{"x":1}', "[]", "{oops"])
def test_resume_takes_exactly_an_empty_object(shop, body):
    invocation_id = new_id()
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 2}, invocation_id=invocation_id)
    response = shop.resume(invocation_id, body)
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")


def test_resume_refuses_a_body_over_one_kib(shop):
    invocation_id = new_id()
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 2}, invocation_id=invocation_id)
    response = shop.resume(invocation_id, "{" + " " * 1100 + "}")
    assert response.status_code == 413


def test_resume_rechecks_the_route(shop):
    from apps.routes.models import Route

    invocation_id = new_id()
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 2}, invocation_id=invocation_id)
    Route.objects.filter(pk=shop.route.pk).update(tools_direct_enabled=False)
    response = shop.resume(invocation_id)
    assert (response.status_code, response.json()["error"]) == (403, "agent_direct_disabled")


def test_resume_refuses_a_tool_no_longer_authorized(shop):
    from apps.tools.route_tools import route_tools_set

    invocation_id = new_id()
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 2}, invocation_id=invocation_id)
    route_tools_set(route=shop.route, write_tools=["stock_write"])
    response = shop.resume(invocation_id)
    assert (response.status_code, response.json()["error"]) == (404, "tool_not_found")


def test_resume_of_a_settled_call_refuses_a_tool_no_longer_authorized(shop):
    """A stable result is returned only after the same re-check: the contract's resume "re-checks the
    current authorization, then returns the stored result"."""
    from apps.projects.models import Project
    from apps.tools.approvals import approval_decide
    from apps.tools.models import Approval
    from apps.tools.route_tools import route_tools_set

    invocation_id = new_id()
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 2}, invocation_id=invocation_id)
    approval_decide(approval_id=Approval.objects.get().pk, projects=Project.objects.all(), decision_id="d-1",
                    decision="denied")
    assert shop.resume(invocation_id).json()["state"] == "denied"
    sent = shop.body("refund_issue", {"order_id": "SO-1", "amount": 2}, invocation_id=invocation_id)
    assert shop.post(sent).json()["state"] == "denied"  # replayed while the tool is there
    route_tools_set(route=shop.route, write_tools=["stock_write"])
    response = shop.resume(invocation_id)
    assert (response.status_code, response.json()["error"]) == (404, "tool_not_found")
    # The same call sent again (its replay, as first sent) is held to the same check: it was the one
    # path that skipped it (hostile-input audit).
    again = shop.post(sent)
    assert (again.status_code, again.json()["error"]) == (404, "tool_not_found")


def test_resume_refuses_a_tool_whose_execution_changed(shop):
    invocation_id = new_id()
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 2}, invocation_id=invocation_id)
    shop.provider.base_url = shop.provider.base_url + "/v2"
    shop.provider.save(update_fields=["base_url"])
    response = shop.resume(invocation_id)
    assert (response.status_code, response.json()["error"]) == (409, "capability_changed")
