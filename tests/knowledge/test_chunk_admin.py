"""A document's chunks in the console: the page, disable / enable / edit through it, who may do
what, and errors shown next to the field."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from apps.knowledge.models import Chunk, ChunkEdit, ChunkOverride
from apps.projects.models import Membership
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts
from tests.knowledge.test_chunk_overrides import DAMAGED, EDITED, HANDBOOK
from tests.projects.factories import MembershipFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def document(owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    return ingest_texts(kb, {"handbook.md": HANDBOOK})["handbook.md"]


@pytest.fixture
def damaged(document) -> Chunk:
    return Chunk.objects.get(document=document, kind="child", text=DAMAGED)


def _chunks_url(document) -> str:
    return f"/admin/knowledge/document/{document.pk}/chunks/"


def _action_url(document, chunk, action: str) -> str:
    return f"{_chunks_url(document)}{chunk.pk}/{action}/"


def _client_of(role: str, project=None) -> Client:
    membership = MembershipFactory(role=role, **({"project": project} if project else {}))
    client = Client()
    client.force_login(membership.user)
    return client


def _unchanged(chunk: Chunk) -> tuple:
    row = Chunk.objects.get(pk=chunk.pk)
    return row.disabled, row.text, ChunkOverride.objects.count(), ChunkEdit.objects.count()


def test_the_chunks_page_shows_each_chunks_chapter_path_text_and_section(browser, document, damaged):
    response = browser.get(_chunks_url(document))
    page = response.content.decode()
    row = re.search(rf'<tr id="chunk-{damaged.pk}".*?</tr>', page, re.S).group(0)
    assert response.status_code == 200
    assert '<td class="ck-chapter"><bdi>Handbook / Refunds</bdi></td>' in row
    assert f'<div class="ck-text"><bdi>{DAMAGED}</bdi></div>' in row
    assert '<div class="ck-section-same">Section 0, as above</div>' in row
    first = re.search(r'<tr id="chunk-[^"]*" class="ck-row" data-chunk-id="[^"]*"\s+data-index="0">.*?</tr>', page,
                      re.S).group(0)
    assert re.search(r'<div class="ck-section-text"><bdi>Customers may return .*? claims desk\.</bdi></div>',
                     first, re.S)
    assert len(re.findall(r'<tr id="chunk-', page)) == 3
    assert "Index generation #1 (active) · 3 chunks · 0 disabled · 0 edited." in re.sub(r"\s+", " ", page)


def test_the_document_page_links_to_its_chunks(browser, document):
    page = browser.get(f"/admin/knowledge/document/{document.pk}/change/").content.decode()
    assert f'href="{_chunks_url(document)}" id="document-chunks-link"' in page


def test_the_chunks_page_runs_the_same_queries_for_one_chunk_as_for_three(browser, owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    docs = ingest_texts(kb, {"one.md": "# One\n\nA single short paragraph.", "three.md": HANDBOOK})
    browser.get(_chunks_url(docs["one.md"]))  # warm caches (content types, session)
    with CaptureQueriesContext(connection) as one:
        browser.get(_chunks_url(docs["one.md"]))
    with CaptureQueriesContext(connection) as three:
        browser.get(_chunks_url(docs["three.md"]))
    assert len(one.captured_queries) == len(three.captured_queries)


def test_an_operator_disables_a_chunk_and_it_is_shown_disabled(browser, owner, document, damaged):
    response = browser.post(_action_url(document, damaged, "disable"))
    assert (response.status_code, response["Location"]) == (302, f"{_chunks_url(document)}#chunk-{damaged.pk}")
    page = browser.get(_chunks_url(document)).content.decode()
    row = re.search(rf'<tr id="chunk-{damaged.pk}" class="ck-row ck-disabled".*?</tr>', page, re.S).group(0)
    assert '<span class="ck-badge ck-off">disabled</span>' in row
    assert f"changed by {owner.user.username}" in row
    assert 'value="Enable"' in row
    assert Chunk.objects.get(pk=damaged.pk).disabled is True


def test_an_operator_enables_it_again(browser, document, damaged):
    browser.post(_action_url(document, damaged, "disable"))
    response = browser.post(_action_url(document, damaged, "enable"))
    assert response.status_code == 302
    assert Chunk.objects.get(pk=damaged.pk).disabled is False
    assert list(ChunkEdit.objects.order_by("id").values_list("action", flat=True)) == ["disabled", "enabled"]


def test_the_history_names_who_did_what(browser, owner, document, damaged):
    browser.post(_action_url(document, damaged, "edit"), {"text": EDITED})
    page = browser.get(_chunks_url(document)).content.decode()
    row = re.search(r'<tr class="ck-edit-row">.*?</tr>', page, re.S).group(0)
    cells = [re.sub(r"\s+", " ", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
    assert cells[1:4] == [owner.user.username, "Text edited (generation #1)", str(damaged.index)]
    assert cells[4] == f"<del><bdi>{DAMAGED}</bdi></del> → <ins><bdi>{EDITED}</bdi></ins>"


def test_the_edit_form_shows_the_chunk_text(browser, document, damaged):
    page = browser.get(_action_url(document, damaged, "edit")).content.decode()
    assert re.search(rf'<textarea name="text"[^>]*>\s*{re.escape(DAMAGED)}</textarea>', page)


def test_an_edit_is_saved_and_re_embedded(browser, document, damaged):
    response = browser.post(_action_url(document, damaged, "edit"), {"text": EDITED})
    assert (response.status_code, response["Location"]) == (302, f"{_chunks_url(document)}#chunk-{damaged.pk}")
    row = Chunk.objects.get(pk=damaged.pk)
    assert (row.text, row.embedding is not None) == (EDITED, True)


def test_an_empty_edit_shows_the_error_next_to_the_field_and_changes_nothing(browser, document, damaged):
    before = _unchanged(damaged)
    response = browser.post(_action_url(document, damaged, "edit"), {"text": "  "})
    page = response.content.decode()
    assert response.status_code == 200
    assert '<p class="errornote">Please correct the error below; nothing was changed.</p>' in page
    assert re.search(r'<ul class="errorlist"[^>]*><li>This field is required.</li></ul>\s*<p><textarea', page)
    assert _unchanged(damaged) == before


def test_the_edit_box_stops_where_the_service_does(browser, document, damaged, settings):
    settings.KNOWLEDGE_PARENT_MAX_CHARS = 40
    page = browser.get(_action_url(document, damaged, "edit")).content.decode()
    assert re.search(r'<textarea name="text"[^>]*maxlength="40"', page)


def test_an_edit_over_the_limit_is_refused_next_to_the_field(browser, document, damaged, settings):
    settings.KNOWLEDGE_PARENT_MAX_CHARS = 40
    before = _unchanged(damaged)
    page = browser.post(_action_url(document, damaged, "edit"), {"text": "x" * 41}).content.decode()
    assert '<ul class="errorlist"' in page and "The text can be at most 40 characters (it has 41)." in page
    assert _unchanged(damaged) == before


def test_a_viewer_sees_the_chunks_without_actions(document, damaged):
    page = _client_of(Membership.Role.VIEWER, document.knowledge_base.project).get(_chunks_url(document))
    assert page.status_code == 200
    assert 'value="Disable"' not in page.content.decode() and "Edit text" not in page.content.decode()


@pytest.mark.parametrize("action", ["disable", "enable", "edit"])
def test_a_viewer_cannot_change_a_chunk(document, damaged, action):
    before = _unchanged(damaged)
    client = _client_of(Membership.Role.VIEWER, document.knowledge_base.project)
    response = client.post(_action_url(document, damaged, action), {"text": EDITED})
    assert response.status_code == 403
    assert _unchanged(damaged) == before


@pytest.mark.parametrize("action", ["disable", "enable", "edit"])
def test_another_projects_operator_gets_404_and_nothing_changes(document, damaged, action):
    before = _unchanged(damaged)
    response = _client_of(Membership.Role.OWNER).post(_action_url(document, damaged, action), {"text": EDITED})
    assert response.status_code == 404
    assert _unchanged(damaged) == before


def test_another_projects_operator_cannot_see_the_chunks(document):
    assert _client_of(Membership.Role.OWNER).get(_chunks_url(document)).status_code == 404


def test_a_chunk_of_another_document_is_not_found_under_this_one(browser, owner, document):
    kb = KnowledgeBaseFactory(project=owner.project, embedding_model=document.knowledge_base.embedding_model)
    other = ingest_texts(kb, {"x.md": "# X\n\nOther text here."})["x.md"]
    chunk = Chunk.objects.get(document=other, kind="child")
    response = browser.post(_action_url(document, chunk, "disable"))
    assert response.status_code == 404
    assert Chunk.objects.get(pk=chunk.pk).disabled is False


def test_disable_answers_only_post(browser, document, damaged):
    response = browser.get(_action_url(document, damaged, "disable"))
    assert response.status_code == 405
    assert Chunk.objects.get(pk=damaged.pk).disabled is False


def test_an_orphaned_override_is_reported_on_the_page(browser, document):
    from tests.knowledge.test_chunk_overrides import _rebuild

    first = Chunk.objects.get(document=document, kind="child", index=0)
    browser.post(_action_url(document, first, "disable"))
    _rebuild(document.knowledge_base, max_chars=120, overlap_chars=0)
    page = browser.get(_chunks_url(document)).content.decode()
    orphans = re.search(r'<div class="errornote" id="ck-orphans">(.*?)</div>', page, re.S).group(1)
    assert "1 change could not be re-applied" in re.sub(r"\s+", " ", orphans)
    assert re.search(r"chunk 0 \(disabled\s+by \S+\), not found in generation #2", orphans)
