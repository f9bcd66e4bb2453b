"""OPTIONS on the agent API, Agent Auth and the builder API names the methods of the URL (`Allow`) and nothing
else: DRF's metadata described the view class ({"name": "Tool Invocation Api", "renders": [...],
"parses": [...]}), internals no client needs. Every answer under the agent prefixes, OPTIONS and
405s included, is `Cache-Control: no-store`."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.core.hostile import bearer, row_counts

pytestmark = pytest.mark.django_db


def _agent_paths(world) -> dict[str, str]:
    ws = f"/agent-api/v1/workspaces/{world.route_key}"
    return {"/agent-api/v1/workspaces": "GET, HEAD, OPTIONS", f"{ws}/bootstrap": "GET, HEAD, OPTIONS",
            f"{ws}/turns": "POST, OPTIONS", "/agent-api/v1/tool-invocations": "POST, OPTIONS",
            f"/agent-api/v1/tools?route={world.route_key}": "GET, HEAD, OPTIONS",
            "/agent-api/v1/task-control/capabilities": "GET, HEAD, OPTIONS"}


def test_options_on_the_agent_api_names_the_methods_and_describes_nothing(world):
    before = row_counts()
    answers = {}
    for path in _agent_paths(world):
        response = APIClient().options(path, **bearer(world.access_token))
        answers[path] = (response.status_code, response.json(), response["Allow"], response["Cache-Control"])
    assert answers == {path: (200, {}, allow, "no-store") for path, allow in _agent_paths(world).items()}
    assert row_counts() == before


def test_options_on_the_builder_api_names_every_method_of_the_url_and_describes_nothing(world):
    response = APIClient().options("/api/v1/builder/knowledge-bases", **bearer(world.operator_token))
    assert (response.status_code, response.json(), response["Allow"], response["Cache-Control"]) == (
        200, {}, "GET, POST, HEAD, OPTIONS", "no-store")


@pytest.mark.parametrize("path", ["/agent-auth/v1/token", "/agent-auth/v1/authorizations",
                                  "/agent-auth/v1/revoke"])
def test_options_on_agent_auth_describes_nothing(world, path):
    """Agent Auth's views were left on DRF's description ({"name": "Token Api", ...})."""
    response = APIClient().options(path)
    assert (response.status_code, response.json(), response["Cache-Control"]) == (200, {}, "no-store")
    assert "OPTIONS" in response["Allow"]


@pytest.mark.parametrize("path", ["/agent-api/v1/tool-invocations", "/agent-api/v1/workspaces",
                                  "/agent-auth/v1/session", "/agent-auth/v1/token"])
def test_options_without_a_token_and_a_405_are_no_store_on_the_agent_prefixes(world, path):
    options = APIClient().options(path)
    refused = APIClient().generic("PUT", path, b"{}", content_type="application/json", **bearer(world.access_token))
    assert options["Cache-Control"] == refused["Cache-Control"] == "no-store"
    assert options.status_code in (200, 401) and refused.status_code in (401, 405)
