"""A builder API URL served by one view per method (apps.projects.builder.by_method) names all of
its methods in `Allow`: a 405 to PUT on `GET|POST /knowledge-bases` said "GET, HEAD, OPTIONS" — the
first view's own — and a client reading it concluded it could not POST there."""

from __future__ import annotations

import uuid

import pytest
from rest_framework.test import APIClient

from apps.projects.models import OperatorToken
from apps.projects.tokens import operator_token_create
from tests.projects.factories import MembershipFactory

pytestmark = pytest.mark.django_db

ID = uuid.UUID("0b5e1c4e-8f0a-4d7e-9d55-6f1f1d2a7c10")  # no row has it: the 405 comes first


@pytest.fixture
def client() -> APIClient:
    _, token = operator_token_create(user=MembershipFactory().user, name="allow", scopes=OperatorToken.Scope.values)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return api


@pytest.mark.parametrize("method,path,allow", [
    ("PUT", "knowledge-bases", "GET, POST, HEAD, OPTIONS"),
    ("DELETE", f"knowledge-bases/{ID}", "GET, PATCH, HEAD, OPTIONS"),
    ("PUT", f"knowledge-bases/{ID}/documents", "GET, POST, HEAD, OPTIONS"),
    ("PUT", f"knowledge-bases/{ID}/rebuild", "GET, POST, HEAD, OPTIONS"),
    ("POST", f"documents/{ID}", "GET, PATCH, DELETE, HEAD, OPTIONS"),
    ("PUT", "tool-providers", "GET, POST, HEAD, OPTIONS"),
    ("PATCH", f"tool-providers/{ID}", "GET, DELETE, HEAD, OPTIONS"),
    ("DELETE", "routes/store-assistant", "GET, PATCH, HEAD, OPTIONS"),
    ("DELETE", "tasks", "GET, POST, HEAD, OPTIONS"),
])
def test_a_405_names_every_method_of_the_url(client, method, path, allow):
    response = client.generic(method, f"/api/v1/builder/{path}")
    assert (response.status_code, response.json()["error"], response["Allow"]) == (405, "method_not_allowed", allow)


def test_options_names_every_method_of_the_url(client):
    response = client.options("/api/v1/builder/knowledge-bases")
    assert (response.status_code, response["Allow"]) == (200, "GET, POST, HEAD, OPTIONS")
