"""Newest-first builder lists (a KB's documents, a route's RAG questions) page by cursor as well as
by offset. An automation script walking offset pages while uploads or questions land saw a row
twice (every new row shifts the later pages by one); a cursor is a position — creation time and
id — so a walk gives every row that existed when it began exactly once, ties in creation time
included, and a cursor still holds after its row is deleted."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from apps.knowledge.models import Document
from apps.ledger.models import RagQuery
from apps.projects.tokens import operator_token_create
from tests.answers.factories import RagQueryFactory
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.projects.factories import MembershipFactory, UserFactory
from tests.routes.factories import RouteFactory

pytestmark = pytest.mark.django_db

MOMENT = dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC)


@pytest.fixture
def kb():
    return KnowledgeBaseFactory()


@pytest.fixture
def client(kb) -> APIClient:
    user = UserFactory()
    MembershipFactory(project=kb.project, user=user)
    _, token = operator_token_create(user=user, name="pages", scopes=["knowledge:debug"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def _document(kb, name: str, created_at: dt.datetime) -> Document:
    document = Document.objects.create(knowledge_base=kb, filename=name, file_type="txt", size=1,
                                       content_hash="0" * 64)
    Document.objects.filter(pk=document.pk).update(created_at=created_at)
    return document


def _documents_url(kb) -> str:
    return f"/api/v1/builder/knowledge-bases/{kb.pk}/documents"


def _walk(client: APIClient, url: str, limit: int, *, params=None, between=lambda: None) -> list[str]:
    """Every page by cursor, calling `between` after each page; the ids in the order seen."""
    ids: list[str] = []
    params = {**(params or {}), "limit": limit}
    body = client.get(url, params).json()
    while True:
        assert body["meta"]["limit"] == limit
        ids += [row.get("id") or row.get("query_id") for row in body["data"]]
        between()
        cursor = body["meta"]["next_cursor"]
        if cursor is None:
            return ids
        body = client.get(url, {**params, "cursor": cursor}).json()
        assert body["meta"]["offset"] is None


@pytest.mark.parametrize("limit", [1, 2, 3, 7])
def test_a_cursor_walk_gives_every_document_once_while_uploads_land(client, kb, limit):
    for n in range(7):
        _document(kb, f"d{n}.txt", MOMENT - dt.timedelta(seconds=n // 2))  # pairs share a creation time
    listing = client.get(_documents_url(kb), {"limit": 500}).json()
    everything = [row["id"] for row in listing["data"]]
    assert listing["meta"] == {"total": 7, "offset": 0, "limit": 500, "next_cursor": None}
    uploads = iter(range(100))

    def upload():
        _document(kb, f"new{next(uploads)}.txt", MOMENT + dt.timedelta(minutes=1))

    assert _walk(client, _documents_url(kb), limit, between=upload) == everything


def test_offset_pages_shift_under_uploads_and_name_the_next_cursor(client, kb):
    """What the cursor is for: an upload between two offset pages repeats a row; the first page's
    next_cursor continues where it ended."""
    for n in range(4):
        _document(kb, f"d{n}.txt", MOMENT - dt.timedelta(seconds=n))
    first = client.get(_documents_url(kb), {"limit": 2}).json()
    _document(kb, "late.txt", MOMENT + dt.timedelta(seconds=1))
    by_offset = client.get(_documents_url(kb), {"limit": 2, "offset": 2}).json()
    by_cursor = client.get(_documents_url(kb), {"limit": 2, "cursor": first["meta"]["next_cursor"]}).json()
    assert by_offset["data"][0]["id"] == first["data"][-1]["id"]
    assert [row["filename"] for row in by_cursor["data"]] == ["d2.txt", "d3.txt"]
    assert by_cursor["meta"] == {"total": 5, "offset": None, "limit": 2, "next_cursor": None}


def test_a_cursor_holds_after_its_document_is_deleted(client, kb):
    for n in range(3):
        _document(kb, f"d{n}.txt", MOMENT - dt.timedelta(seconds=n))
    first = client.get(_documents_url(kb), {"limit": 1}).json()
    Document.objects.filter(pk=first["data"][0]["id"]).delete()
    rest = client.get(_documents_url(kb), {"limit": 5, "cursor": first["meta"]["next_cursor"]})
    assert rest.status_code == 200
    assert [row["filename"] for row in rest.json()["data"]] == ["d1.txt", "d2.txt"]


def test_a_cursor_walk_keeps_the_lists_filters(client, kb):
    for n in range(5):
        document = _document(kb, f"d{n}.txt", MOMENT - dt.timedelta(seconds=n))
        Document.objects.filter(pk=document.pk).update(enabled=n % 2 == 0)
    ids = _walk(client, _documents_url(kb), 1, params={"enabled": "true"})
    assert [Document.objects.get(pk=pk).filename for pk in ids] == ["d0.txt", "d2.txt", "d4.txt"]


@pytest.mark.parametrize(("params", "name"), [
    ({"cursor": "yesterday"}, "cursor"),
    ({"cursor": "1733400000000000.not-a-uuid"}, "cursor"),
    ({"cursor": "1733400000000000"}, "cursor"),
    ({"cursor": "9" * 18 + ".00000000-0000-0000-0000-000000000000"}, "cursor"),  # past year 9999
    ({"cursor": "9" * 19 + ".00000000-0000-0000-0000-000000000000"}, "cursor"),
    ({"cursor": ""}, "cursor"),
    ({"cursor": "1733400000000000.00000000-0000-0000-0000-000000000000", "offset": "0"}, "cursor"),
    ({"cursor": "1733400000000000.00000000-0000-0000-0000-000000000000", "limit": "0"}, "limit"),
])
def test_a_bad_cursor_is_400_naming_it(client, kb, params, name):
    _document(kb, "d.txt", MOMENT)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(_documents_url(kb), params)
    assert not [q["sql"] for q in queries if "COUNT(" in q["sql"]]  # refused before the listing's count
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert list(response.json()["fields"]) == [name]


def test_a_cursor_walk_gives_every_rag_question_once_while_questions_land(kb, client):
    route = RouteFactory(project=kb.project, key="cursor-walk")
    for n in range(5):
        RagQueryFactory(route=route, question=f"q{n}")
    RagQuery.objects.filter(route=route).update(created_at=MOMENT)  # ids decide among equal times
    url = f"/api/v1/routes/{route.key}/rag/queries"
    everything = [row["query_id"] for row in client.get(url, {"limit": 500}).json()["data"]]
    assert len(everything) == 5
    asked = iter(range(100))

    def ask():
        new = RagQueryFactory(route=route, question=f"new {next(asked)}")
        RagQuery.objects.filter(pk=new.pk).update(created_at=MOMENT + dt.timedelta(minutes=1))

    assert _walk(client, url, 2, between=ask) == everything


def test_a_list_not_ordered_newest_first_is_refused_on_its_first_page():
    """A programming error shows on the first page, not as a 500 on the second."""
    from rest_framework.request import Request
    from rest_framework.test import APIRequestFactory

    from apps.projects.builder import newest_first_page

    request = Request(APIRequestFactory().get("/"))
    with pytest.raises(ValueError, match="not listed newest first"):
        newest_first_page(request, Document.objects.order_by("filename"), limit_max=10, offset_max=10)
