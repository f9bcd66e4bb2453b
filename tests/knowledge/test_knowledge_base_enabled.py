"""Turning a knowledge base off and on: the builder API and the console's form and list."""

import pytest

from apps.knowledge.models import KnowledgeBase
from tests.knowledge.factories import EmbeddingModelFactory, KnowledgeBaseFactory

pytestmark = pytest.mark.django_db

BASE = "/api/v1/builder"


@pytest.fixture
def kb(owner):
    return KnowledgeBaseFactory(project=owner.project)


def test_a_new_kb_is_on_unless_created_off(client, owner):
    model = EmbeddingModelFactory()
    body = {"project_id": str(owner.project_id), "embedding_model_id": str(model.pk),
            "embedding_dim": model.dimension}
    on = client.post(f"{BASE}/knowledge-bases", {**body, "name": "on"}, format="json")
    off = client.post(f"{BASE}/knowledge-bases", {**body, "name": "off", "enabled": False}, format="json")
    assert (on.status_code, on.json()["data"]["enabled"]) == (201, True)
    assert (off.status_code, off.json()["data"]["enabled"]) == (201, False)
    assert dict(KnowledgeBase.objects.values_list("name", "enabled")) == {"on": True, "off": False}


def test_patch_turns_a_kb_off_and_on(client, kb):
    url = f"{BASE}/knowledge-bases/{kb.pk}"
    assert client.patch(url, {"enabled": False}, format="json").json()["data"]["enabled"] is False
    assert KnowledgeBase.objects.get(pk=kb.pk).enabled is False
    assert client.get(url).json()["data"]["enabled"] is False
    assert client.patch(url, {"enabled": True}, format="json").json()["data"]["enabled"] is True
    assert KnowledgeBase.objects.get(pk=kb.pk).enabled is True


@pytest.mark.parametrize("value", ["false", 0, None, [], {"on": False}])
def test_enabled_that_is_not_a_json_boolean_is_refused_and_changes_nothing(client, kb, value):
    response = client.patch(f"{BASE}/knowledge-bases/{kb.pk}", {"enabled": value, "name": "renamed"}, format="json")
    body = response.json()
    assert (response.status_code, body["error"], "enabled" in body["fields"]) == (422, "invalid_knowledge_base",
                                                                                   True), body
    name = kb.name
    kb.refresh_from_db()
    assert (kb.enabled, kb.name) == (True, name)


def test_a_viewer_or_another_project_cannot_turn_a_kb_off(client, api_client, owner, kb):
    from apps.projects.models import Membership
    from tests.projects.factories import MembershipFactory

    other = KnowledgeBaseFactory()
    response = client.patch(f"{BASE}/knowledge-bases/{other.pk}", {"enabled": False}, format="json")
    assert (response.status_code, response.json()["error"]) == (404, "knowledge_base_not_found")
    viewer = MembershipFactory(project=owner.project, role=Membership.Role.VIEWER)
    api_client.force_login(viewer.user)
    response = api_client.patch(f"{BASE}/knowledge-bases/{kb.pk}", {"enabled": False}, format="json")
    assert response.status_code == 403
    assert set(KnowledgeBase.objects.values_list("enabled", flat=True)) == {True}


def _change_form(kb, **overrides) -> dict:
    return {"name": kb.name, "description": "", "strategy": "auto", "min_chars": "256", "max_chars": "768",
            "overlap_chars": "96", "generations-TOTAL_FORMS": "0", "generations-INITIAL_FORMS": "1",
            "route_bindings-TOTAL_FORMS": "0", "route_bindings-INITIAL_FORMS": "0", **overrides}


def test_the_kb_form_turns_it_off_unticked_and_on_ticked(browser, kb):
    url = f"/admin/knowledge/knowledgebase/{kb.pk}/change/"
    assert browser.post(url, _change_form(kb)).status_code == 302
    assert KnowledgeBase.objects.get(pk=kb.pk).enabled is False
    assert browser.post(url, _change_form(kb, enabled="on")).status_code == 302
    assert KnowledgeBase.objects.get(pk=kb.pk).enabled is True


def test_the_kb_list_shows_and_filters_by_on_or_off(browser, owner):
    KnowledgeBaseFactory(project=owner.project, name="在用的库")
    KnowledgeBaseFactory(project=owner.project, name="停用的库", enabled=False)
    listing = browser.get("/admin/knowledge/knowledgebase/").content.decode()
    assert "在用的库" in listing and "停用的库" in listing
    off = browser.get("/admin/knowledge/knowledgebase/", {"enabled__exact": "0"}).content.decode()
    assert "停用的库" in off and "在用的库" not in off


def test_the_playground_of_a_kb_turned_off_says_agents_do_not_read_it(browser, kb):
    url = f"/admin/knowledge/knowledgebase/{kb.pk}/search/"
    assert 'id="pg-kb-off"' not in browser.get(url).content.decode()
    KnowledgeBase.objects.filter(pk=kb.pk).update(enabled=False)
    page = browser.get(url).content.decode()
    assert 'id="pg-kb-off"' in page and "Agents, turns and routes' answers do not read this knowledge base" in page
