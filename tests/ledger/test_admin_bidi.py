"""Right-to-left ids an agent chose, in the ledger's lists and pages: each reads left to right as
stored, isolated from the words around it, and escaped (apps.core.bidi). Before, a conversation
conv-مستخدم-935e06 read conv-935-مستخدمe06, even alone in its cell."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils.html import escape

from apps.ledger.models import Run
from apps.projects.models import Membership
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.ledger.helpers import complete_run, open_turn
from tests.projects.factories import MembershipFactory

CONVERSATION = "conv-مستخدم-935e06<script>alert(1)</script>"
PRINCIPAL_ID = "مستخدم<b>"
ON_BEHALF_OF = "مستخدم@example.com"
TURN = "دور-7<i>"
MESSAGE = "رسالة-7<i>"


def ident(value: str) -> str:
    return f'<span class="bh-ident" dir="ltr">{escape(value)}</span>'


@pytest.fixture
def run(api_client, agent_client, route) -> Run:
    issued = session_for(agent_client, principal={**PRINCIPAL, "id": PRINCIPAL_ID}, on_behalf_of=ON_BEHALF_OF)
    run_id = open_turn(api_client, issued.access_token, route.key, client_conversation_id=CONVERSATION,
                       client_turn_id=TURN, user_message_id=MESSAGE).json()["run_id"]
    complete_run(api_client, issued.access_token, run_id)
    return Run.objects.select_related("conversation").get(pk=run_id)


@pytest.fixture
def viewer(route) -> Client:
    client = Client()
    client.force_login(MembershipFactory(project=route.project, role=Membership.Role.VIEWER).user)
    return client


# Each page of the ledger and the agent-chosen ids it shows; `{conversation}` and `{run}` are the run's.
PAGES_AND_IDS = [
    ("/admin/ledger/conversation/", [CONVERSATION, ON_BEHALF_OF, PRINCIPAL_ID]),
    ("/admin/ledger/conversation/{conversation}/change/", [CONVERSATION, ON_BEHALF_OF, PRINCIPAL_ID]),
    ("/admin/ledger/run/", [CONVERSATION, ON_BEHALF_OF]),
    ("/admin/ledger/run/{run}/change/", [CONVERSATION, TURN, MESSAGE]),
    ("/admin/ledger/message/", [CONVERSATION]),
]


@pytest.mark.parametrize(("path", "value"), [(path, value) for path, values in PAGES_AND_IDS for value in values])
def test_the_ledgers_pages_show_the_agents_ids_left_to_right_escaped(run, viewer, path, value):
    page = viewer.get(path.format(conversation=run.conversation_id, run=run.pk)).content.decode()
    assert ident(value) in page
    assert "<script>alert(1)" not in page
