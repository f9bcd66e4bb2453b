"""The route's ``max_tool_calls`` (advertised to hosts in the profile's governance) holds on the
server: once a run has made that many calls, a new call in it is ``rejected_before_dispatch``,
nothing is stored and nothing is sent. Replays are not new calls; a new run has room again. A call
refused for its arguments (never sent) is not a call made; those have their own, higher cap."""

import json
import threading

from django.db import connection
from rest_framework.test import APIClient

from apps.tools.models import Invocation
from tests.ledger.helpers import open_turn
from tests.tools.invocation_helpers import ROUTE, new_id, stored

pytest_plugins = ["tests.tools.invocation_fixtures"]

REFUSED_TEXT = ("This run has made its 2 tool calls, the most the route allows in one run (max_tool_calls). "
                "Nothing was sent to the business system. Answer with what you have, or complete this run and go "
                "on in a new turn.")


def _limit(shop, n: int) -> None:
    type(shop.route).objects.filter(pk=shop.route.pk).update(max_tool_calls=n)


def _refused(response, invocation_id: str, tool: str, text: str = REFUSED_TEXT) -> None:
    assert response.status_code == 200, response.content
    assert response.json() == {
        "schema_version": "bailing.agent-tool-invocation.v1", "invocation_id": invocation_id, "route": ROUTE,
        "tool": tool, "state": "rejected_before_dispatch", "ok": False, "auto_retry_allowed": False, "text": text}


def test_a_call_past_the_routes_max_tool_calls_is_refused_and_changes_nothing(shop, dispatching):
    _limit(shop, 2)
    first, second, third = new_id(), new_id(), new_id()
    assert shop.invoke("item_read", {"item_id": "TEA-1"}, invocation_id=first).json()["state"] == "executed"
    assert shop.invoke("stock_write", {"sku": "TEA-1", "quantity": 1}, invocation_id=second).json()["state"] == (
        "executed")
    before, sent = stored(), len(shop.server.received)

    _refused(shop.invoke("stock_write", {"sku": "TEA-2", "quantity": 1}, invocation_id=third), third, "stock_write")
    assert (stored(), len(shop.server.received)) == (before, sent)

    # The same refused call again: refused the same way (nothing was kept of it).
    _refused(shop.invoke("stock_write", {"sku": "TEA-2", "quantity": 1}, invocation_id=third), third, "stock_write")
    # A made call is replayed as it settled: a replay is not a new call.
    replay = shop.invoke("stock_write", {"sku": "TEA-1", "quantity": 1}, invocation_id=second).json()
    assert (replay["state"], replay["ok"]) == ("executed", True)
    assert (stored(), len(shop.server.received)) == (before, sent)


def test_calls_refused_by_the_schema_do_not_spend_the_runs_max_tool_calls(shop, dispatching):
    _limit(shop, 2)
    for _ in range(5):  # stored as rejected_before_dispatch: never sent, so not calls made
        assert shop.invoke("stock_write", {"sku": ""}).json()["state"] == "rejected_before_dispatch"
    assert shop.invoke("item_read", {"item_id": "TEA-1"}).json()["state"] == "executed"
    assert shop.invoke("stock_write", {"sku": "TEA-1", "quantity": 1}).json()["state"] == "executed"
    before, sent = stored(), len(shop.server.received)

    refused_id = new_id()
    _refused(shop.invoke("item_read", {"item_id": "TEA-2"}, invocation_id=refused_id), refused_id, "item_read")
    assert (stored(), len(shop.server.received)) == (before, sent)
    assert Invocation.objects.count() == 7


def test_calls_the_dispatcher_could_not_deliver_spend_the_runs_max_tool_calls(shop, dispatching):
    """Not sent either, but the hub knocked on the business system: a run must not knock on one that
    is down without end (review of the change above)."""
    from tests.tools.business_server import free_port_refusing

    _limit(shop, 2)
    type(shop.provider).objects.filter(pk=shop.provider.pk).update(base_url=free_port_refusing())
    for _ in range(2):
        body = shop.invoke("item_read", {"item_id": "TEA-1"}).json()
        assert (body["state"], "could not be reached" in body["text"]) == ("rejected_before_dispatch", True)
    before = stored()
    refused_id = new_id()
    _refused(shop.invoke("item_read", {"item_id": "TEA-1"}, invocation_id=refused_id), refused_id, "item_read")
    assert stored() == before


def test_refusals_have_their_own_cap_and_a_good_call_still_has_room(shop, dispatching):
    _limit(shop, 2)  # the cap: max(10, 2 x 2) = 10
    for _ in range(10):
        assert shop.invoke("stock_write", {"sku": ""}).json()["state"] == "rejected_before_dispatch"
    before = stored()

    refused_id = new_id()
    _refused(shop.invoke("stock_write", {"sku": ""}, invocation_id=refused_id), refused_id, "stock_write",
             text="This run has had 10 calls refused before they were sent, the most one run may have. Nothing was "
                  "sent to the business system. This call's arguments do not fit the tool's input_schema either: "
                  "call again only with arguments that do, or answer with what you have.")
    assert stored() == before
    assert shop.invoke("item_read", {"item_id": "TEA-1"}).json()["state"] == "executed"


def test_a_new_run_has_room_again(shop, dispatching):
    _limit(shop, 1)
    assert shop.invoke("item_read", {"item_id": "TEA-1"}).json()["state"] == "executed"
    later = open_turn(shop.client, shop.token, ROUTE, n=2)
    assert later.status_code == 200, later.content
    body = shop.body("item_read", {"item_id": "TEA-1"}, agent_run_id=later.json()["run_id"])
    assert shop.post(body).json()["state"] == "executed"
    assert Invocation.objects.count() == 2


def test_a_route_that_allows_no_tool_calls_refuses_the_first(shop):
    _limit(shop, 0)
    invocation_id = new_id()
    _refused(shop.invoke("item_read", {"item_id": "TEA-1"}, invocation_id=invocation_id), invocation_id, "item_read",
             text="The route allows no tool calls in a run (max_tool_calls is 0). Nothing was sent to the business "
                  "system. Answer with what you have, or complete this run and go on in a new turn.")
    assert stored() == {"invocations": 0, "approvals": 0, "journal": 0}
    assert shop.server.received == []


def test_racing_calls_cannot_all_take_the_last_place(shop, dispatching):
    _limit(shop, 1)
    bodies = [shop.body("item_read", {"item_id": f"TEA-{n}"}) for n in range(6)]
    states: list[str] = []
    barrier = threading.Barrier(len(bodies))

    def call(body: dict) -> None:
        try:
            client = APIClient()
            barrier.wait()
            response = client.generic("POST", "/agent-api/v1/tool-invocations", json.dumps(body),
                                      content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {shop.token}")
            states.append(response.json()["text"])
        finally:
            connection.close()

    threads = [threading.Thread(target=call, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(states) == 6
    assert Invocation.objects.count() == 1
    assert sum(text.startswith("This run has made its 1 tool call,") for text in states) == 5
