"""Two builders create (or rename to) the same knowledge-base name at the same moment: both pass
the service's check, the later write breaks the unique constraint, and that was a 500. It must be
the check's own answer, 409 knowledge_base_name_taken, with one row."""

from __future__ import annotations

import pytest

from apps.knowledge.models import KnowledgeBase
from tests.concurrency import at_once_past_the_check
from tests.knowledge.factories import EmbeddingModelFactory, KnowledgeBaseFactory

pytestmark = pytest.mark.django_db(transaction=True)

BASE = "/api/v1/builder"


def _logged_in(owner, call):
    def run(client):
        client.force_login(owner.user)
        return call(client)
    return run


def test_two_creates_of_one_name_at_once_are_one_kb_and_one_409(owner):
    model = EmbeddingModelFactory()
    body = {"project_id": str(owner.project_id), "name": "退款政策", "embedding_model_id": str(model.pk),
            "embedding_dim": model.dimension}
    answers = at_once_past_the_check(
        [_logged_in(owner, lambda client: client.post(f"{BASE}/knowledge-bases", body, format="json"))] * 2,
        KnowledgeBase)
    assert sorted(status for status, _ in answers) == [201, 409], answers
    [(_, refused)] = [answer for answer in answers if answer[0] == 409]
    assert refused["error"] == "knowledge_base_name_taken"
    assert KnowledgeBase.objects.filter(project=owner.project, name="退款政策").count() == 1


def test_two_renames_to_one_name_at_once_leave_one_of_them_as_it_was(owner):
    first, second = KnowledgeBaseFactory(project=owner.project), KnowledgeBaseFactory(project=owner.project)
    names = {first.pk: first.name, second.pk: second.name}

    def rename(kb):
        return _logged_in(owner, lambda client: client.patch(f"{BASE}/knowledge-bases/{kb.pk}", {"name": "售后"},
                                                             format="json"))
    answers = at_once_past_the_check([rename(first), rename(second)], KnowledgeBase)
    assert sorted(status for status, _ in answers) == [200, 409], answers
    [(_, refused)] = [answer for answer in answers if answer[0] == 409]
    assert refused["error"] == "knowledge_base_name_taken"
    kept = KnowledgeBase.objects.filter(pk__in=names).exclude(name="售后").get()
    assert kept.name == names[kept.pk]
