"""The builder API refuses a knowledge base name with a bidi control, as the console's form does
(apps.core.validators.validate_shown_name)."""

import pytest

from apps.knowledge.models import KnowledgeBase
from tests.knowledge.factories import EmbeddingModelFactory, KnowledgeBaseFactory

pytestmark = pytest.mark.django_db

BASE = "/api/v1/builder"


def _body(owner, model, name):
    return {"project_id": str(owner.project_id), "name": name, "embedding_model_id": str(model.pk),
            "embedding_dim": model.dimension}


def test_create_refuses_a_name_with_a_bidi_control(client, owner):
    response = client.post(f"{BASE}/knowledge-bases", _body(owner, EmbeddingModelFactory(), "Handbook\u202e2v"),
                           format="json")
    assert (response.status_code, response.json()["error"]) == (422, "invalid_knowledge_base"), response.json()
    assert list(response.json()["fields"]) == ["name"]
    assert not KnowledgeBase.objects.exists()


def test_update_refuses_a_name_with_a_bidi_control(client, owner):
    kb = KnowledgeBaseFactory(project=owner.project, name="Handbook")
    response = client.patch(f"{BASE}/knowledge-bases/{kb.pk}", {"name": "Handbook\u202e2v"}, format="json")
    assert (response.status_code, response.json()["error"]) == (422, "invalid_knowledge_base"), response.json()
    kb.refresh_from_db()
    assert kb.name == "Handbook"
