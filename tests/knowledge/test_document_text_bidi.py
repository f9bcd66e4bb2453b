"""Bidi controls in a document's text (an uploaded file's, a fetched page's) are shown as escapes
wherever the console quotes that text, and stored and given to agents as they are; the chunk editor
adds none. A right-to-left override made `\\u202e0051 CNY (fifteen hundred).` read
`.(derdnuh neetfif) YNC 1500` on the document's page (browser audit, high)."""

from __future__ import annotations

import pytest

from apps.knowledge.models import Chunk, ChunkEdit, EmbeddingModel
from apps.knowledge.services import chunk_text_edit
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts

pytestmark = pytest.mark.django_db

RLO = "\u202e"
KETTLE = f"Deluxe kettle price: {RLO}0051 CNY (fifteen hundred)."
# As the page writes it: the control's escape in a <code>, the text around it as stored.
SHOWN = ('Deluxe kettle price: <code class="bh-bidi-escape" title="U+202E RIGHT-TO-LEFT OVERRIDE: shown, '
         'not applied">\\u202e</code>0051 CNY (fifteen hundred).')


def _one_chunk(owner, filename: str, text: str) -> Chunk:
    """The one child chunk of a document of `text`, ingested in a new KB of `owner`'s project."""
    document = ingest_texts(KnowledgeBaseFactory(project=owner.project), {filename: text})[filename]
    return Chunk.objects.get(document=document, kind="child")


@pytest.fixture
def chunk(owner) -> Chunk:
    return _one_chunk(owner, "kettle.txt", KETTLE)


@pytest.fixture
def kettle(chunk):
    """The document of the kettle's chunk."""
    return chunk.document


def test_the_document_page_shows_a_chunks_override_as_its_escape_and_stores_it(browser, kettle, chunk):
    page = browser.get(f"/admin/knowledge/document/{kettle.pk}/change/").content.decode()
    assert f"<bdi>{SHOWN}</bdi></td>" in page
    assert RLO not in page
    assert chunk.text == KETTLE


def test_the_chunks_page_shows_the_override_in_the_text_and_in_the_changes(browser, owner, kettle, chunk):
    chunk_text_edit(chunk=chunk, text="Deluxe kettle price: 1500 CNY.", user=owner.user)
    page = browser.get(f"/admin/knowledge/document/{kettle.pk}/chunks/").content.decode()
    assert f"<del><bdi>{SHOWN}</bdi></del>" in page
    assert RLO not in page
    assert ChunkEdit.objects.get().text_before == KETTLE


def test_the_playground_shows_the_override_in_its_hits_and_its_recent_searches(browser, kettle):
    page = browser.post(f"/admin/knowledge/knowledgebase/{kettle.knowledge_base_id}/search/",
                        {"query": f"kettle {RLO}price", "mode": "keyword"}).content.decode()
    assert SHOWN.replace("kettle", "<mark>kettle</mark>").replace("price:", "<mark>price</mark>:") in page
    assert '<td class="pg-recent-query"><bdi>kettle <code class="bh-bidi-escape"' in page
    assert 'aria-label="Run again: kettle \\u202eprice"' in page
    # The query's box, and the fields the RAG link and "Run again" post, keep what was typed: it is sent again.
    assert page.count(f'value="kettle {RLO}price"') == page.count(RLO) == 3


def test_the_chunk_editor_refuses_an_override_and_names_where_it_is(browser, kettle, chunk):
    url = f"/admin/knowledge/document/{kettle.pk}/chunks/{chunk.pk}/edit/"
    response = browser.post(url, {"text": f"Deluxe kettle price: 1500 CNY {RLO}(fifteen hundred)."})
    assert response.status_code == 200
    assert ("The text holds invisible direction controls, which make it read otherwise than it is stored: "
            "U+202E (RIGHT-TO-LEFT OVERRIDE) after “kettle price: 1500 CNY ”. Remove them") in response.content.decode()
    assert Chunk.objects.get(pk=chunk.pk).text == KETTLE
    assert not ChunkEdit.objects.exists()


def test_the_chunk_editor_refuses_an_isolate_as_an_override(browser, owner):
    chunk = _one_chunk(owner, "plain.txt", "Kettles ship in two days.")
    response = browser.post(f"/admin/knowledge/document/{chunk.document_id}/chunks/{chunk.pk}/edit/",
                            {"text": "\u2067Kettles ship in two days.\u2069"})
    assert "U+2067 (RIGHT-TO-LEFT ISOLATE) at the start" in response.content.decode()
    assert Chunk.objects.get(pk=chunk.pk).text == "Kettles ship in two days."


def test_the_chunk_editor_keeps_the_marks_of_hebrew_text(browser, owner):
    """A right-to-left mark places the full stop after a Hebrew word where a reader expects it."""
    chunk = _one_chunk(owner, "he.txt", "מחיר הקומקום: 1500 ש״ח")
    response = browser.post(f"/admin/knowledge/document/{chunk.document_id}/chunks/{chunk.pk}/edit/",
                            {"text": "מחיר הקומקום: 1500 ש״ח.\u200f"})
    assert response.status_code == 302
    assert Chunk.objects.get(pk=chunk.pk).text == "מחיר הקומקום: 1500 ש״ח.\u200f"


def test_the_chunk_editor_gives_back_the_documents_own_text_override_and_all(browser, owner, kettle, chunk):
    """Giving back the original removes the edit: the document's text, which the edit did not write."""
    chunk_text_edit(chunk=chunk, text="Deluxe kettle price: 1500 CNY.", user=owner.user)
    response = browser.post(f"/admin/knowledge/document/{kettle.pk}/chunks/{chunk.pk}/edit/", {"text": KETTLE})
    assert response.status_code == 302
    assert Chunk.objects.get(pk=chunk.pk).text == KETTLE


def test_an_embedding_models_name_may_hold_no_override(admin_client):
    response = admin_client.post("/admin/knowledge/embeddingmodel/add/", {
        "name": f"e5 {RLO}llams", "provider": "hashing", "dimension": "32", "options": "{}"})
    assert response.status_code == 200
    assert "Invisible direction controls (such as U+202E) are not allowed in a name" in response.content.decode()
    assert not EmbeddingModel.objects.filter(name__contains=RLO).exists()


def test_the_chunk_editor_quotes_a_text_whose_box_obeys_its_override(browser, kettle, chunk):
    page = browser.get(f"/admin/knowledge/document/{kettle.pk}/chunks/{chunk.pk}/edit/").content.decode()
    assert f'<div class="ck-context" id="ck-stored"><bdi>{SHOWN}</bdi></div>' in page
