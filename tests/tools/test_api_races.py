"""Two builders create a tool provider of one name at the same moment: both pass the service's
check, the later INSERT breaks the unique constraint; the answer is the check's own, 409
provider_name_taken, with one provider and its tools."""

from __future__ import annotations

import pytest

from apps.projects.models import Membership
from apps.tools.models import Tool, ToolProvider
from tests.concurrency import at_once_past_the_check
from tests.projects.factories import MembershipFactory
from tests.tools.builder_helpers import BASE, STORE_TEXT

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_creates_of_one_provider_name_at_once_are_one_provider_and_one_409():
    owner = MembershipFactory(role=Membership.Role.OWNER)
    body = {"project_id": str(owner.project_id), "name": "store", "base_url": "https://shop.example/api",
            "secret": "a-signing-secret", "spec": STORE_TEXT}

    def create(client):
        client.force_login(owner.user)
        return client.post(f"{BASE}/tool-providers", body, format="json")
    answers = at_once_past_the_check([create, create], ToolProvider)
    assert sorted(status for status, _ in answers) == [201, 409], answers
    [(_, refused)] = [answer for answer in answers if answer[0] == 409]
    assert refused["error"] == "provider_name_taken"
    [provider] = ToolProvider.objects.filter(project=owner.project, name="store")
    assert Tool.objects.filter(provider__project=owner.project).count() == provider.tools.count() == 5
