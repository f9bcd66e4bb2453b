"""The database, not a prior read, holds the turn keys."""

import pytest
from django.db import IntegrityError, transaction

from apps.ledger.models import Run
from apps.ledger.services import conversation_lock, run_open
from tests.ledger.helpers import open_turn


@pytest.fixture
def run(api_client, issued, route):
    open_turn(api_client, issued.access_token, route.key)
    return Run.objects.get()


@pytest.mark.parametrize("keys", [
    {"client_turn_id": "turn-1", "user_message_id": "message-other"},
    {"client_turn_id": "turn-other", "user_message_id": "message-1"},
])
def test_run_open_does_not_take_a_held_key(run, keys):
    with transaction.atomic():
        assert run_open(conversation=run.conversation, request_hash="0" * 64, knowledge_delivery="inline",
                        **keys) is None
    assert Run.objects.count() == 1


def test_the_turn_keys_are_unique_constraints(run):
    with pytest.raises(IntegrityError), transaction.atomic():
        Run.objects.create(session=run.session, route=run.route, conversation=run.conversation,
                           client_turn_id="turn-1", user_message_id="message-2", request_hash="0" * 64)


def test_conversation_lock_finds_the_existing_conversation(run, issued, route):
    with transaction.atomic():
        conversation = conversation_lock(session=issued.session, route=route,
                                         client_conversation_id="local-conversation-1")
    assert conversation == run.conversation
