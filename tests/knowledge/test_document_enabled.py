"""Turning a document off and on: the builder API (PATCH /documents/<id>) and the console's
list, actions and document page. What searches and agents then read is in
tests/runtime/test_document_enabled.py."""

import pytest
from django.test import Client

from apps.knowledge import ingest, services
from apps.knowledge.models import Document
from apps.projects.models import Membership
from apps.projects.tokens import operator_token_create
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import upload
from tests.projects.factories import MembershipFactory

pytestmark = pytest.mark.django_db

BASE = "/api/v1/builder"


@pytest.fixture
def document(owner):
    [document] = services.document_upload(kb=KnowledgeBaseFactory(project=owner.project),
                                          files=[upload("policy.zh.md")])
    assert ingest.document_ingest(document_id=document.pk) == "completed"
    return Document.objects.get(pk=document.pk)


def _enabled(document) -> bool:
    return Document.objects.get(pk=document.pk).enabled


def test_patch_turns_a_document_off_and_on(client, document):
    url = f"{BASE}/documents/{document.pk}"
    assert client.get(url).json()["data"]["enabled"] is True
    response = client.patch(url, {"enabled": False}, format="json")
    assert (response.status_code, response.json()["data"]["enabled"], response.json()["data"]["status"]) == (
        200, False, "completed")
    assert _enabled(document) is False
    assert client.patch(url, {"enabled": True}, format="json").json()["data"]["enabled"] is True
    assert _enabled(document) is True


def test_an_empty_patch_changes_nothing(client, document):
    response = client.patch(f"{BASE}/documents/{document.pk}", {}, format="json")
    assert (response.status_code, response.json()["data"]["enabled"]) == (200, True)


@pytest.mark.parametrize("body", [{"enabled": "false"}, {"enabled": 0}, {"enabled": None}, {"status": "failed"},
                                  {"enabled": False, "filename": "x.md"}])
def test_a_bad_patch_is_422_naming_the_field_and_changes_nothing(client, document, body):
    before = Document.objects.filter(pk=document.pk).values().get()
    response = client.patch(f"{BASE}/documents/{document.pk}", body, format="json")
    payload = response.json()
    assert (response.status_code, payload["error"]) == (422, "invalid_document"), payload
    assert set(payload["fields"]) & set(body)
    assert Document.objects.filter(pk=document.pk).values().get() == before


def test_patch_of_another_projects_document_is_404_and_a_viewer_is_refused(client, api_client, document):
    [other] = services.document_upload(kb=KnowledgeBaseFactory(), files=[upload("policy.zh.md")])
    response = client.patch(f"{BASE}/documents/{other.pk}", {"enabled": False}, format="json")
    assert (response.status_code, response.json()["error"]) == (404, "document_not_found")
    assert _enabled(other) is True
    viewer = MembershipFactory(project=document.knowledge_base.project, role=Membership.Role.VIEWER)
    api_client.force_login(viewer.user)
    response = api_client.patch(f"{BASE}/documents/{document.pk}", {"enabled": False}, format="json")
    assert response.status_code == 403
    assert _enabled(document) is True


def test_a_token_needs_the_ingest_scope_to_turn_a_document_off(api_client, owner, document):
    _, debug = operator_token_create(user=owner.user, name="debug", scopes=["knowledge:debug"])
    _, ingest_token = operator_token_create(user=owner.user, name="ingest", scopes=["knowledge:ingest"])
    url = f"{BASE}/documents/{document.pk}"
    refused = api_client.patch(url, {"enabled": False}, format="json", HTTP_AUTHORIZATION=f"Bearer {debug}")
    assert (refused.status_code, refused.json()["error"]) == (403, "insufficient_scope")
    assert _enabled(document) is True
    allowed = api_client.patch(url, {"enabled": False}, format="json", HTTP_AUTHORIZATION=f"Bearer {ingest_token}")
    assert allowed.status_code == 200
    assert _enabled(document) is False


def test_the_document_page_turns_it_off_and_on(browser, document):
    page_url = f"/admin/knowledge/document/{document.pk}/change/"
    page = browser.get(page_url).content.decode()
    assert f'action="/admin/knowledge/document/{document.pk}/turn-off/"' in page
    response = browser.post(f"/admin/knowledge/document/{document.pk}/turn-off/")
    assert (response.status_code, response["Location"]) == (302, page_url)
    assert _enabled(document) is False
    page = browser.get(page_url).content.decode()
    assert f'action="/admin/knowledge/document/{document.pk}/turn-on/"' in page
    assert "Searches and agents do not read it" in page
    browser.post(f"/admin/knowledge/document/{document.pk}/turn-on/")
    assert _enabled(document) is True


def test_a_get_of_the_turn_off_url_changes_nothing(browser, document):
    browser.get(f"/admin/knowledge/document/{document.pk}/turn-off/")
    assert _enabled(document) is True


def test_a_viewer_cannot_turn_a_document_off(document):
    viewer = MembershipFactory(project=document.knowledge_base.project, role=Membership.Role.VIEWER)
    client = Client()
    client.force_login(viewer.user)
    page = client.get(f"/admin/knowledge/document/{document.pk}/change/").content.decode()
    assert "turn-off" not in page
    assert client.post(f"/admin/knowledge/document/{document.pk}/turn-off/").status_code == 403
    assert _enabled(document) is True


def test_the_list_actions_turn_documents_off_and_on_and_the_list_shows_and_filters_it(browser, document):
    listing = "/admin/knowledge/document/"
    response = browser.post(listing, {"action": "turn_off_documents", "_selected_action": [str(document.pk)]})
    assert response.status_code == 302
    assert _enabled(document) is False
    off = browser.get(listing, {"enabled__exact": "0"}).content.decode()
    assert document.filename in off and 'title="Searches and agents do not read it.">off</span>' in off
    assert document.filename not in browser.get(listing, {"enabled__exact": "1"}).content.decode()
    browser.post(listing, {"action": "turn_on_documents", "_selected_action": [str(document.pk)]})
    assert _enabled(document) is True


def test_the_kb_page_marks_a_document_that_is_off(browser, document):
    url = f"/admin/knowledge/knowledgebase/{document.knowledge_base_id}/change/"
    assert 'title="Searches and agents do not read it.">off</span>' not in browser.get(url).content.decode()
    services.document_set_enabled(document=document, enabled=False)
    assert 'title="Searches and agents do not read it.">off</span>' in browser.get(url).content.decode()


def test_the_document_list_filters_by_on_or_off(client, document):
    services.document_upload(kb=document.knowledge_base, files=[upload("products.csv")])
    services.document_set_enabled(document=document, enabled=False)
    url = f"{BASE}/knowledge-bases/{document.knowledge_base_id}/documents"

    def listed(**params) -> set[str]:
        response = client.get(url, params)
        assert response.status_code == 200, response.json()
        assert response.json()["meta"]["total"] == len(response.json()["data"])
        return {row["filename"] for row in response.json()["data"]}

    assert listed() == {"policy.zh.md", "products.csv"}
    assert listed(enabled="false") == {"policy.zh.md"}
    assert listed(enabled="true") == {"products.csv"}


@pytest.mark.parametrize("value", ["0", "False", "yes", "off"])
def test_the_document_list_refuses_an_enabled_that_is_not_true_or_false(client, document, value):
    response = client.get(f"{BASE}/knowledge-bases/{document.knowledge_base_id}/documents", {"enabled": value})
    assert (response.status_code, response.json()["error"], list(response.json()["fields"])) == (
        400, "invalid_request", ["enabled"])


def test_turning_a_document_off_and_on_is_written_to_its_history(browser, owner, document):
    from django.contrib.admin.models import LogEntry

    browser.post(f"/admin/knowledge/document/{document.pk}/turn-off/")
    browser.post("/admin/knowledge/document/", {"action": "turn_on_documents", "_selected_action": [str(document.pk)]})
    entries = LogEntry.objects.filter(object_id=str(document.pk)).order_by("action_time", "id")
    assert [(entry.user_id, entry.get_change_message()) for entry in entries] == [
        (owner.user_id, "Turned off: searches and agents no longer read this document."),
        (owner.user_id, "Turned on.")]
    history = browser.get(f"/admin/knowledge/document/{document.pk}/history/").content.decode()
    assert "Turned off: searches and agents no longer read this document." in history


def test_a_refused_action_writes_no_history(browser, document):
    from django.contrib.admin.models import LogEntry

    browser.post("/admin/knowledge/document/", {"action": "retry_documents", "_selected_action": [str(document.pk)]})
    assert not LogEntry.objects.filter(object_id=str(document.pk)).exists()
