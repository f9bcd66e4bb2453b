"""Two builders create (or rename to) names that read the same at the same moment. Both passed the
service's look for the name: identical names then broke the unique constraint (a 500, now the
look's own answer, 409 knowledge_base_name_taken), and names that only read alike were both saved.
The later write now waits for the earlier one's names lock and finds its name."""

from __future__ import annotations

import pytest

from apps.knowledge.models import KnowledgeBase
from tests.concurrency import second_waits_for_the_first
from tests.knowledge.factories import EmbeddingModelFactory, KnowledgeBaseFactory

pytestmark = pytest.mark.django_db(transaction=True)

BASE = "/api/v1/builder"


def _logged_in(owner, call):
    def run(client):
        client.force_login(owner.user)
        return call(client)
    return run


@pytest.mark.parametrize("later", ["退款政策", "退款\u200c政策", "退款政策\u200b"])
def test_two_creates_of_one_name_at_once_are_one_kb_and_one_409(owner, later):
    model = EmbeddingModelFactory()

    def create(name):
        body = {"project_id": str(owner.project_id), "name": name, "embedding_model_id": str(model.pk),
                "embedding_dim": model.dimension}
        return _logged_in(owner, lambda client: client.post(f"{BASE}/knowledge-bases", body, format="json"))
    answers = second_waits_for_the_first(create("退款政策"), create(later), KnowledgeBase)
    assert [status for status, _ in answers] == [201, 409], answers
    assert answers[1][1]["error"] == "knowledge_base_name_taken"
    assert list(KnowledgeBase.objects.filter(project=owner.project).values_list("name", flat=True)) == ["退款政策"]


@pytest.mark.parametrize("earlier,later", [("售后", "售后"), ("Service 售后", "\uff33ervice 售后")])
def test_two_renames_to_one_name_at_once_leave_the_later_as_it_was(owner, earlier, later):
    first, second = KnowledgeBaseFactory(project=owner.project), KnowledgeBaseFactory(project=owner.project)
    before = second.name

    def rename(kb, name):
        return _logged_in(owner, lambda client: client.patch(f"{BASE}/knowledge-bases/{kb.pk}", {"name": name},
                                                             format="json"))
    answers = second_waits_for_the_first(rename(first, earlier), rename(second, later), KnowledgeBase)
    assert [status for status, _ in answers] == [200, 409], answers
    assert answers[1][1]["error"] == "knowledge_base_name_taken"
    assert (KnowledgeBase.objects.get(pk=first.pk).name, KnowledgeBase.objects.get(pk=second.pk).name) == (
        earlier, before)
