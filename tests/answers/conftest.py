import pytest

from apps.knowledge import ingest, services
from apps.knowledge.models import RouteKnowledgeBinding
from apps.projects.models import Membership
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import upload
from tests.projects.factories import MembershipFactory
from tests.routes.factories import RouteFactory


@pytest.fixture
def owner(db):
    return MembershipFactory(role=Membership.Role.OWNER)


@pytest.fixture
def client(api_client, owner):
    api_client.force_login(owner.user)
    return api_client


@pytest.fixture
def kb(owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    [document] = services.document_upload(kb=kb, files=[upload("policy.zh.md")])
    assert ingest.document_ingest(document_id=document.pk) == "completed"
    return kb


@pytest.fixture
def route(owner, kb):
    route = RouteFactory(project=owner.project, key="store-help", name="门店问答")
    RouteKnowledgeBinding.objects.create(route=route, knowledge_base=kb)
    return route


def rag_url(route_key: str, tail: str = "query") -> str:
    return f"/api/v1/routes/{route_key}/rag/{tail}"
