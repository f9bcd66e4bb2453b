"""A knowledge base's name is unique in its project: the add and change pages say so beside the
name, in the console's words, and store nothing."""

import pytest

from apps.knowledge.models import KnowledgeBase
from tests.knowledge.factories import EmbeddingModelFactory, KnowledgeBaseFactory

pytestmark = pytest.mark.django_db

TAKEN = "A knowledge base with this name already exists in this project."
EMPTY_INLINES = {"generations-TOTAL_FORMS": "0", "generations-INITIAL_FORMS": "0",
                 "route_bindings-TOTAL_FORMS": "0", "route_bindings-INITIAL_FORMS": "0"}


def test_adding_a_kb_under_a_taken_name_is_refused_beside_the_name(browser, owner):
    KnowledgeBaseFactory(project=owner.project, name="售后")
    response = browser.post("/admin/knowledge/knowledgebase/add/", {
        "project": str(owner.project_id), "name": "售后", "description": "",
        "embedding_model": str(EmbeddingModelFactory().pk), "strategy": "auto", "min_chars": "0",
        "max_chars": "768", "overlap_chars": "0", **EMPTY_INLINES})
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {"name": [TAKEN]}
    assert KnowledgeBase.objects.filter(name="售后").count() == 1


def test_renaming_a_kb_to_a_taken_name_is_refused_beside_the_name(browser, owner):
    KnowledgeBaseFactory(project=owner.project, name="售后")
    kb = KnowledgeBaseFactory(project=owner.project, name="退货")
    response = browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/change/", {
        "name": "售后", "description": "", "strategy": "auto", "min_chars": "0", "max_chars": "768",
        "overlap_chars": "0", **{**EMPTY_INLINES, "generations-INITIAL_FORMS": "1"}})
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {"name": [TAKEN]}
    kb.refresh_from_db()
    assert kb.name == "退货"


def test_the_same_name_in_another_project_is_fine(browser, owner):
    KnowledgeBaseFactory(name="售后")  # another project's
    kb = KnowledgeBaseFactory(project=owner.project, name="退货")
    response = browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/change/", {
        "name": "售后", "description": "", "strategy": "auto", "min_chars": "0", "max_chars": "768",
        "overlap_chars": "0", **{**EMPTY_INLINES, "generations-INITIAL_FORMS": "1"}})
    assert response.status_code == 302, response.content.decode()[:2000]
    kb.refresh_from_db()
    assert kb.name == "售后"
