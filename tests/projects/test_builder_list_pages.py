"""Offset pages of the builder API's lists, walked to the end, give every row once. Project names
repeated then (only slugs were unique), so a list ordered by project name and row name alone had
ties, and PostgreSQL orders tied rows differently from one LIMIT/OFFSET to the next: pages repeated
some knowledge bases (or tool providers) and skipped others. Names are unique now; the rows of
different projects still share their own names."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from apps.projects.tokens import operator_token_create
from tests.knowledge.factories import EmbeddingModelFactory, KnowledgeBaseFactory
from tests.projects.factories import MembershipFactory, ProjectFactory, UserFactory
from tests.tools.factories import ToolProviderFactory

pytestmark = pytest.mark.django_db

PROJECTS = 3


def _client(user) -> APIClient:
    _, token = operator_token_create(user=user, name="pages", scopes=["knowledge:debug", "tools:write"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def _walk(client: APIClient, url: str, limit: int) -> list[str]:
    ids: list[str] = []
    offset = 0
    while True:
        body = client.get(f"{url}?limit={limit}&offset={offset}").json()
        ids += [row["id"] for row in body["data"]]
        offset += limit
        if offset >= body["meta"]["total"]:
            return ids


@pytest.fixture
def operator():
    """An owner of three projects."""
    user = UserFactory()
    for n in range(PROJECTS):
        MembershipFactory(project=ProjectFactory(name=f"Retail {n}"), user=user)
    return user


@pytest.mark.parametrize("limit", [1, 2, 5, 7])
def test_knowledge_base_pages_give_every_kb_once(operator, limit):
    model = EmbeddingModelFactory()
    for membership in operator.memberships.all():
        for n in range(12):
            KnowledgeBaseFactory(project=membership.project, name=f"FAQ {n:02d}", embedding_model=model)
    client = _client(operator)
    everything = [kb["id"] for kb in client.get("/api/v1/builder/knowledge-bases?limit=500").json()["data"]]
    assert len(set(everything)) == PROJECTS * 12
    assert _walk(client, "/api/v1/builder/knowledge-bases", limit) == everything


@pytest.mark.parametrize("limit", [1, 2, 5])
def test_tool_provider_pages_give_every_provider_once(operator, limit):
    for membership in operator.memberships.all():
        for n in range(6):
            ToolProviderFactory(project=membership.project, name=f"shop-{n}")
    client = _client(operator)
    everything = [p["id"] for p in client.get("/api/v1/builder/tool-providers?limit=500").json()["data"]]
    assert len(set(everything)) == PROJECTS * 6
    assert _walk(client, "/api/v1/builder/tool-providers", limit) == everything
