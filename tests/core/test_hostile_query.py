"""Hostile query strings on list endpoints: paging and filters are checked, never passed to SQL raw."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from apps.knowledge import services
from tests.core.hostile import bearer
from tests.knowledge.helpers import upload

pytestmark = pytest.mark.django_db

BAD_NUMBERS = [str(10**30), "-1", "abc", "1.5", "1e3", " 5", "0x10", "٣", "9" * 5000]


def _get(world, url: str):
    client = APIClient()
    client.raise_request_exception = False
    return client.get(url, **bearer(world.operator_token))


def _document(world):
    return services.document_upload(kb=world.kb, files=[upload("policy.zh.md")])[0]


def _lists(world) -> dict[str, str]:
    document = _document(world)
    return {
        "knowledge_bases": "/api/v1/builder/knowledge-bases",
        "documents": f"/api/v1/builder/knowledge-bases/{world.kb.pk}/documents",
        "chunks": f"/api/v1/builder/documents/{document.pk}/chunks",
    }


@pytest.mark.parametrize("param", ["offset", "limit"])
@pytest.mark.parametrize("value", BAD_NUMBERS)
def test_a_bad_paging_number_is_400_naming_the_parameter(world, param, value):
    answers = {}
    for name, url in _lists(world).items():
        response = _get(world, url + f"?{param}={value}")
        answers[name] = (response.status_code, response.json()["error"], list(response.json().get("fields", {})))
    assert answers == {name: (400, "invalid_request", [param]) for name in ("knowledge_bases", "documents", "chunks")}


@pytest.mark.parametrize("query", ["limit=1&limit=2", "offset=0&offset=1", "limit=5&limit=5"])
def test_a_repeated_parameter_is_400_naming_it_on_builder_lists_and_agent_tool_reads(world, query):
    name = query.split("=", 1)[0]
    answers = {}
    for list_name, url in _lists(world).items():
        response = _get(world, f"{url}?{query}")
        answers[list_name] = (response.status_code, response.json()["error"], response.json().get("field"))
    agent = APIClient().get(f"/agent-api/v1/tools?route={world.route_key}&{query}", **bearer(world.access_token))
    answers["agent_catalog"] = (agent.status_code, agent.json()["error"], agent.json().get("field"))
    assert answers == {key: (400, "invalid_request", name) for key in answers}


def test_a_limit_over_the_maximum_is_400(world):
    response = _get(world, "/api/v1/builder/knowledge-bases?limit=501")
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")


def test_paging_within_bounds_answers_the_window(world):
    response = _get(world, "/api/v1/builder/knowledge-bases?offset=0&limit=500")
    assert response.status_code == 200
    assert response.json()["meta"] == {"total": 1, "offset": 0, "limit": 500}


@pytest.mark.parametrize("value", ["%00", "bogus", "completed%00", "x" * 300])
def test_an_unknown_document_status_filter_is_400(world, value):
    response = _get(world, f"/api/v1/builder/knowledge-bases/{world.kb.pk}/documents?status={value}")
    assert (response.status_code, response.json()["error"], list(response.json()["fields"])) == (
        400, "invalid_request", ["status"])


def test_a_known_document_status_filter_still_filters(world):
    _document(world)
    response = _get(world, f"/api/v1/builder/knowledge-bases/{world.kb.pk}/documents?status=failed")
    assert response.status_code == 200
    assert response.json()["meta"]["total"] == 0


@pytest.mark.parametrize("value", ["not-a-uuid", "%00", "1" * 100])
def test_a_malformed_project_filter_is_400(world, value):
    response = _get(world, f"/api/v1/builder/knowledge-bases?project_id={value}")
    assert (response.status_code, response.json()["error"], list(response.json()["fields"])) == (
        400, "invalid_request", ["project_id"])


@pytest.mark.parametrize("path", ["memories", "project-memories"])
@pytest.mark.parametrize("value", [str(10**30), "-" + str(10**30)])
def test_a_huge_memory_limit_is_clamped_as_the_contract_says(world, path, value):
    client = APIClient()
    response = client.get(f"/agent-api/v1/workspaces/{world.route_key}/{path}?limit={value}",
                          **bearer(world.access_token))
    assert response.status_code == 200
    assert len(response.json()["memories"]) == 1


@pytest.mark.parametrize("value", ["abc", "1.5", "9" * 5000, "%00"])
def test_a_memory_limit_that_is_not_an_integer_is_400(world, value):
    client = APIClient()
    response = client.get(f"/agent-api/v1/workspaces/{world.route_key}/memories?limit={value}",
                          **bearer(world.access_token))
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")


@pytest.mark.parametrize("value", ["xml", "api", "yaml"])
def test_a_format_parameter_is_an_ordinary_query_parameter_on_the_agent_apis(world, value):
    # DRF reads `?format=` as a renderer override and answered 404 not_found on every agent path
    # for a format it has no renderer for, whatever the endpoint's own rule for query parameters.
    client = APIClient()
    agent = bearer(world.access_token)
    answers = {
        "session": client.get(f"/agent-auth/v1/session?format={value}", **agent),
        "workspaces": client.get(f"/agent-api/v1/workspaces?format={value}", **agent),
        "inspection": client.get(f"/agent-api/v1/tool-invocations/inspection-capabilities?format={value}", **agent),
        "token": client.post(f"/agent-auth/v1/token?format={value}", {}, format="json"),
    }
    assert {name: (response.status_code, response.json().get("error")) for name, response in answers.items()} == {
        "session": (200, None), "workspaces": (200, None), "inspection": (400, "invalid_request"),
        "token": (400, "invalid_request")}
    assert answers["inspection"].json()["field"] == "format"


@pytest.mark.parametrize(("url", "token"), [("/api/v1/builder/knowledge-bases", "operator_token"),
                                            ("/agent-api/v1/workspaces", "access_token")])
def test_too_many_query_parameters_is_400_in_its_own_numbers_not_djangos_setting_name(world, settings, url, token):
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 100
    query = "&".join(f"p{n}=1" for n in range(101))
    client = APIClient()
    client.raise_request_exception = False
    response = client.get(f"{url}?{query}", **bearer(getattr(world, token)))
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")
    assert response.json()["message"] == "The request has more than 100 parameters."
