"""The invocation endpoint's checks, in the contract's order: body, route, run, revision, tool, input
schema — each refused with its status and code, nothing stored and nothing sent."""

import json

import pytest
from django.db import connection

from apps.ledger.models import Run
from apps.projects.models import Project
from apps.routes.models import Route
from apps.tools.models import Invocation
from apps.tools.route_tools import route_tools_set
from tests.core.hostile import NON_CANONICAL_UUID_FORMS, non_canonical_uuid
from tests.tools.invocation_helpers import new_id, stored

pytest_plugins = ["tests.tools.invocation_fixtures"]

NOTHING = {"invocations": 0, "approvals": 0, "journal": 0}


def _refused(shop, response, status: int, error: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["error"] == error
    assert response["Cache-Control"] == "no-store"
    assert stored() == NOTHING
    assert shop.server.received == []
    return body


@pytest.mark.parametrize("body, says", [(b"{not json", "The body is not valid JSON: "),
                                        (b"[]", "The body must be a JSON object."),
                                        (b'"x"', "The body must be a JSON object.")])
def test_a_malformed_body_is_invalid_request(shop, body, says):
    message = _refused(shop, shop.post(body), 400, "invalid_request")["message"]
    assert message.startswith(says) and message.count("not valid JSON") <= 1


@pytest.mark.parametrize("token", ["bha_" + "x" * 43, ""], ids=["unknown token", "no token"])
def test_a_malformed_body_without_a_valid_token_is_401_first(shop, token):
    """A host whose token expired hears 401 (and refreshes), not a 400 about its body."""
    response = shop.client.generic("POST", "/agent-api/v1/tool-invocations", b"{not json",
                                   content_type="application/json",
                                   **({"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}))
    assert (response.status_code, response.json()["error"]) == (401, "unauthorized")
    assert stored() == NOTHING


@pytest.mark.parametrize("field, value", [
    ("invocation_id", "ABC"), ("invocation_id", "g" * 64), ("capability_revision", "x"), ("agent_run_id", "nope"),
    ("tool", "1bad"), ("arguments", []), ("arguments", "{}"), ("extra", 1),
])
def test_each_field_is_checked(shop, field, value):
    body = _refused(shop, shop.post(shop.body("item_read", {"item_id": "1"}, **{field: value})), 400,
                    "invalid_request")
    assert field in body["fields"]


@pytest.mark.parametrize("missing", ["invocation_id", "capability_revision", "agent_run_id", "tool", "arguments"])
def test_each_field_is_required(shop, missing):
    body = _refused(shop, shop.post(shop.body("item_read", {"item_id": "1"}, **{missing: ...})), 400,
                    "invalid_request")
    assert missing in body["fields"]


def test_a_malformed_route_is_invalid_route(shop):
    body = _refused(shop, shop.invoke("item_read", {"item_id": "1"}, route="Bad Route"), 400, "invalid_route")
    assert body["message"].startswith("Route keys are 2–64 characters")


@pytest.mark.parametrize("body", [{}, "no route"], ids=["empty-object", "every-field-but-route"])
def test_a_call_without_a_route_is_told_the_route_is_missing(shop, body):
    """Route checks come first (§2): an empty body was told the route key's format rules."""
    sent = {} if body == {} else shop.body("item_read", {"item_id": "1"}, route=...)
    answer = _refused(shop, shop.post(sent), 400, "invalid_route")
    assert answer["message"] == "route is missing: name the workspace (its route key)."


def test_a_route_outside_the_session_is_not_allowed(shop):
    _refused(shop, shop.invoke("item_read", {"item_id": "1"}, route="other-route"), 403, "route_not_allowed")


def test_a_disabled_route_is_unavailable(shop):
    Route.objects.filter(pk=shop.route.pk).update(enabled=False)
    _refused(shop, shop.invoke("item_read", {"item_id": "1"}), 404, "route_unavailable")


def test_direct_tools_off_is_refused(shop):
    Route.objects.filter(pk=shop.route.pk).update(tools_direct_enabled=False)
    _refused(shop, shop.invoke("item_read", {"item_id": "1"}), 403, "agent_direct_disabled")


def test_a_principal_outside_the_audience_is_refused(shop):
    Route.objects.filter(pk=shop.route.pk).update(audience_policy="listed", allowed_audiences=["hr"])
    _refused(shop, shop.invoke("item_read", {"item_id": "1"}), 403, "audience_not_allowed")


def test_an_unknown_run_is_run_not_found(shop):
    _refused(shop, shop.invoke("item_read", {"item_id": "1"}, agent_run_id="00000000-0000-4000-8000-000000000000"),
             404, "run_not_found")


def test_a_finished_run_is_not_active(shop):
    Run.objects.filter(pk=shop.run_id).update(state=Run.State.COMPLETED)
    _refused(shop, shop.invoke("item_read", {"item_id": "1"}), 409, "run_not_active")


def test_a_stale_revision_is_capability_changed(shop):
    _refused(shop, shop.invoke("item_read", {"item_id": "1"}, capability_revision="0" * 64), 409,
             "capability_changed")


def test_an_unknown_tool_is_tool_not_found(shop):
    _refused(shop, shop.invoke("nope", {}), 404, "tool_not_found")


def test_a_tool_not_opened_to_agents_is_tool_not_found(shop):
    route_tools_set(route=shop.route, write_tools=["stock_write"])
    _refused(shop, shop.invoke("note_add", {"text": "x"}), 404, "tool_not_found")


def test_arguments_breaking_the_schema_are_rejected_naming_the_field(shop):
    response = shop.invoke("stock_write", {"sku": "TEA-1", "quantity": "many"})
    body = response.json()
    assert (response.status_code, body["state"], body["ok"], body["auto_retry_allowed"]) == (
        200, "rejected_before_dispatch", False, False)
    assert body["text"].startswith("The arguments do not fit the tool's input schema: quantity:")
    assert "Nothing was sent" in body["text"]
    assert shop.server.received == []
    stored = Invocation.objects.get()
    assert stored.frozen_arguments == ""
    assert stored.settled_at == stored.created_at  # settled as it was made: it read settled before asked


@pytest.mark.parametrize(("schema", "value", "said"), [
    ({"type": "string", "maxLength": 2000}, "长" * 3023, "… (3,023 characters) is longer than 2000 characters"),
    ({"enum": ["a", "b"]}, "x" * 500, '… (500 characters) is not one of "a" or "b"'),
    ({"type": "array", "maxItems": 1}, ["y" * 80, 2], "… (86 characters of JSON) has more than 1 item"),
])
def test_a_long_value_breaking_the_schema_is_cut_and_the_reason_kept(schema, value, said):
    """The validator's message begins with the whole value: cut at 300 characters, a 3,023-character
    note lost "is longer than 2000 characters", the one thing the model needed (browser audit)."""
    from apps.tools.call_checks import schema_problem

    field, message = schema_problem(schema={"type": "object", "properties": {"note": schema}},
                                    arguments={"note": value})
    assert field == "note"
    assert message.endswith(said) and len(message) < 160


def test_an_argument_the_tool_does_not_name_is_refused_not_dropped(shop):
    # It would have nowhere to go in the request: the business system would never see it.
    response = shop.invoke("note_add", {"text": "call back", "priority": "urgent"})
    body = response.json()
    assert (response.status_code, body["state"], body["auto_retry_allowed"]) == (200, "rejected_before_dispatch", False)
    assert body["text"].startswith("The arguments do not fit the tool's input schema: priority: Additional "
                                   "properties are not allowed ('priority' was unexpected).")
    assert shop.server.received == []


def test_a_missing_required_argument_is_named(shop):
    body = shop.invoke("stock_write", {"sku": "TEA-1"}).json()
    assert "input schema: quantity:" in body["text"]


def test_an_unexpected_argument_is_named_when_the_schema_closes_it(shop):
    body = shop.invoke("refund_issue", {"order_id": "1", "amount": 0}).json()
    assert body["state"] == "rejected_before_dispatch"
    assert "amount:" in body["text"]  # exclusiveMinimum: true with minimum 0


def test_execution_paused_is_503_and_stores_nothing(shop):
    Project.objects.filter(pk=shop.route.project_id).update(tool_execution_paused=True)
    body = _refused(shop, shop.invoke("item_read", {"item_id": "1"}), 503, "execution_paused")
    assert "Receipts still work" in body["message"]


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_another_method_with_a_body_is_405_and_its_body_unread(shop, method):
    """Only a POST's body is a call: its arguments are not measured, nor parsed, for another method
    (a GET's body was parsed whole, unauthenticated, past every limit)."""
    body = json.dumps(shop.body("item_read", {"pad": "x" * (1024 * 1024 + 10)}))
    response = shop.client.generic(method, "/agent-api/v1/tool-invocations", body, content_type="application/json",
                                   HTTP_AUTHORIZATION=f"Bearer {shop.token}")
    _refused(shop, response, 405, "method_not_allowed")


def test_an_unauthenticated_call_is_401(shop):
    _refused(shop, shop.post(shop.body("item_read", {"item_id": "1"}), token="bha_nope"), 401, "unauthorized")


def test_the_invocation_id_of_another_call_is_a_conflict(shop, dispatching):
    invocation_id = new_id()
    shop.invoke("item_read", {"item_id": "1"}, invocation_id=invocation_id)
    for change in ({"tool": "note_add", "arguments": {"text": "x"}}, {"arguments": {"item_id": "2"}}):
        response = shop.post(shop.body("item_read", {"item_id": "1"}, invocation_id=invocation_id, **change))
        assert (response.status_code, response.json()["error"]) == (409, "invocation_conflict")
    assert len(shop.server.received) == 1


def test_the_same_call_under_another_run_of_the_session_replays(shop, dispatching):
    """The contract's conflicts are a different route, tool, arguments or revision; the run is none."""
    from tests.ledger.helpers import open_turn

    invocation_id = new_id()
    first = shop.invoke("item_read", {"item_id": "1"}, invocation_id=invocation_id).json()
    other_run = open_turn(shop.client, shop.token, shop.route.key, n=9).json()["run_id"]
    again = shop.post(shop.body("item_read", {"item_id": "1"}, invocation_id=invocation_id, agent_run_id=other_run))
    assert again.status_code == 200
    assert again.json() == first and first["state"] == "executed"
    assert len(shop.server.received) == 1
    assert Invocation.objects.filter(invocation_id=invocation_id).count() == 1


@pytest.fixture
def task_tables_missing(transactional_db):
    """The task tables gone, as on a database whose task migrations have not run."""
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE tasks_taskmember RENAME TO tasks_taskmember_gone")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE tasks_taskmember_gone RENAME TO tasks_taskmember")


def test_a_call_while_task_control_is_unavailable_is_blocked_not_run_without_it(shop, task_tables_missing):
    response = shop.invoke("item_read", {"item_id": "1"})
    body = _refused(shop, response, 503, "TASK_UNAVAILABLE")
    assert response["Retry-After"] == "5"
    assert body["message"] == "Task control is unavailable; nothing was run without it."


def test_a_turn_while_task_control_is_unavailable_is_blocked(shop, task_tables_missing):
    from rest_framework.test import APIClient

    from tests.ledger.helpers import open_turn

    runs = Run.objects.count()
    response = open_turn(APIClient(), shop.token, shop.route.key, n=5)
    assert (response.status_code, response.json()["error"]) == (503, "TASK_UNAVAILABLE")
    assert Run.objects.count() == runs


@pytest.mark.parametrize("form", NON_CANONICAL_UUID_FORMS)
def test_an_agent_run_id_in_another_spelling_is_invalid_request(shop, form):
    body = shop.body("item_read", {"item_id": "1"}, agent_run_id=non_canonical_uuid(shop.run_id, form))
    assert "agent_run_id" in _refused(shop, shop.post(body), 400, "invalid_request")["fields"]
