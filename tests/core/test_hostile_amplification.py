"""A small hostile body never buys a large error: error bodies name the first few offenders and
count the rest."""

from __future__ import annotations

import json

import pytest

from apps.core.exceptions import FIELD_ERRORS_SHOWN
from tests.agent_auth.factories import pkce_pair
from tests.core.hostile import ENDPOINT_NAMES, row_counts, send

pytestmark = pytest.mark.django_db

SMALL = 4096


def test_a_hundred_thousand_bad_routes_in_an_authorization_request_get_a_small_error(world):
    _, challenge = pkce_pair()
    body = json.dumps({
        "client_app_id": "agent-app-x", "redirect_uri": "http://127.0.0.1:53682/callback", "state": "state-12345678",
        "requested_routes": ["!"] * 100_000, "device_label": "laptop", "code_challenge": challenge,
        "code_challenge_method": "S256",
    })
    before = row_counts()
    response = send(world, "authorization_create", body)
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")
    assert len(response.content) < SMALL
    assert "requested_routes" in response.json()["fields"]
    assert row_counts() == before


def test_sixty_four_bad_routes_name_the_first_bad_one(world):
    _, challenge = pkce_pair()
    body = json.dumps({
        "client_app_id": "agent-app-x", "redirect_uri": "http://127.0.0.1:53682/callback", "state": "state-12345678",
        "requested_routes": ["ok-route"] + ["Bad!"] * 63, "device_label": "laptop", "code_challenge": challenge,
        "code_challenge_method": "S256",
    })
    response = send(world, "authorization_create", body)
    assert response.status_code == 400
    assert "'Bad!' is not a route key" in response.json()["fields"]["requested_routes"][0]


def _unknown_keys(count: int) -> str:
    return json.dumps({f"u{n:05d}": n for n in range(count)})


def test_sixty_thousand_unknown_keys_get_a_small_error_on_every_endpoint(world):
    body = _unknown_keys(60_000)
    before = row_counts()
    answers = {}
    for name in ENDPOINT_NAMES:
        response = send(world, name, body)
        payload = response.json()
        answers[name] = (response.status_code < 500, len(response.content) < SMALL,
                         len(payload.get("fields", {})) <= FIELD_ERRORS_SHOWN)
    assert answers == {name: (True, True, True) for name in ENDPOINT_NAMES}
    assert row_counts() == before


def test_the_error_names_the_first_offenders_and_counts_all_of_them(world):
    response = send(world, "memory_create", _unknown_keys(60_000))
    payload = response.json()
    assert (response.status_code, payload["error"]) == (400, "invalid_request")
    assert list(payload["fields"])[:3] == ["u00000", "u00001", "u00002"]
    assert (len(payload["fields"]), payload["field_errors_total"]) == (FIELD_ERRORS_SHOWN, 60_000)


def test_the_builder_counts_unknown_fields_too(world):
    response = send(world, "kb_update", _unknown_keys(60_000))
    payload = response.json()
    assert (response.status_code, payload["error"]) == (422, "invalid_knowledge_base")
    assert (len(payload["fields"]), payload["field_errors_total"]) == (FIELD_ERRORS_SHOWN, 60_000)
    assert len(response.content) < SMALL


def test_a_long_unknown_key_is_cut_in_the_error(world):
    response = send(world, "memory_create", json.dumps({"content": "x", "k" * 100_000: 1}))
    assert response.status_code == 400
    assert len(response.content) < SMALL


def test_an_error_with_few_offenders_has_no_count(world):
    response = send(world, "memory_create", json.dumps({"content": "x", "colour": 1}))
    payload = response.json()
    assert (response.status_code, list(payload["fields"])) == (400, ["colour"])
    assert "field_errors_total" not in payload
