"""Numbers in tool arguments are the numbers a JavaScript host can write: `JSON.stringify` writes
1.0 as 1, so an integral number is one value whatever its spelling — for the idempotency key's
arguments hash, and in what reaches the business system."""

import json

import pytest

from apps.tools.models import Invocation
from tests.tools.invocation_helpers import new_id

pytest_plugins = ["tests.tools.invocation_fixtures"]


def _raw(shop, invocation_id: str, quantity: str) -> str:
    """The call's body with `quantity` spelled exactly as given."""
    body = json.dumps(shop.body("stock_write", {"sku": "TEA-1", "quantity": 0}, invocation_id=invocation_id))
    return body.replace('"quantity": 0', f'"quantity": {quantity}')


@pytest.mark.parametrize("spelling", ["1.0", "1e0", "1.000", "10e-1"])
def test_an_integral_number_in_another_spelling_replays_instead_of_conflicting(shop, dispatching, spelling):
    invocation_id = new_id()
    first = shop.post(_raw(shop, invocation_id, "1"))
    again = shop.post(_raw(shop, invocation_id, spelling))
    assert (first.status_code, again.status_code) == (200, 200)
    assert again.json() == first.json() and first.json()["state"] == "executed"
    assert len(shop.server.requests_to("/api/stock")) == 1
    assert Invocation.objects.filter(invocation_id=invocation_id).count() == 1


def test_a_different_number_is_still_a_conflict(shop, dispatching):
    invocation_id = new_id()
    shop.post(_raw(shop, invocation_id, "1"))
    response = shop.post(_raw(shop, invocation_id, "1.5"))
    assert (response.status_code, response.json()["error"]) == (409, "invocation_conflict")
    assert len(shop.server.requests_to("/api/stock")) == 1


@pytest.mark.parametrize("spelling, sent", [("1.0", b'"quantity":1'), ("-0.0", b'"quantity":0'),
                                            ("1e2", b'"quantity":100')])
def test_the_business_system_receives_the_number_as_javascript_writes_it(shop, dispatching, spelling, sent):
    response = shop.post(_raw(shop, new_id(), spelling))
    assert response.json()["state"] == "executed"
    (received,) = shop.server.requests_to("/api/stock")
    assert sent + b"," in received.body or sent + b"}" in received.body
