"""Deleting a document from its page leads back to its knowledge base's page."""

import pytest
from django.contrib.messages import get_messages
from django.test import Client

from apps.knowledge import services
from apps.knowledge.models import Document
from apps.projects.models import Membership
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import upload
from tests.projects.factories import MembershipFactory

pytestmark = pytest.mark.django_db


def test_deleting_a_document_returns_to_its_knowledge_base():
    owner = MembershipFactory(role=Membership.Role.OWNER)
    browser = Client()
    browser.force_login(owner.user)
    kb = KnowledgeBaseFactory(project=owner.project)
    [document, kept] = services.document_upload(kb=kb, files=[upload("policy.zh.md"), upload("plain.txt")])
    response = browser.post(f"/admin/knowledge/document/{document.pk}/delete/", {"post": "yes"})
    assert (response.status_code, response["Location"]) == (302, f"/admin/knowledge/knowledgebase/{kb.pk}/change/")
    assert list(Document.objects.values_list("pk", flat=True)) == [kept.pk]
    assert [str(m) for m in get_messages(response.wsgi_request)] == [
        f"The document “{document}” was deleted successfully."]
