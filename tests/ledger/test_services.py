"""The database, not a prior read, holds the turn keys."""

import pytest
from django.db import IntegrityError, transaction

from apps.ledger.models import Message, Run
from apps.ledger.services import conversation_lock, run_open
from tests.ledger.helpers import complete_run, open_turn


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


def test_a_runs_user_input_is_read_back_verbatim(run):
    from apps.ledger.selectors import run_user_input

    assert run_user_input(run=run) == "帮我查一下员工 Ada (1)"


def test_a_run_is_found_only_on_its_own_route(run, issued, route):
    from apps.ledger.errors import RunNotFound
    from apps.ledger.selectors import run_get_for_route
    from tests.routes.factories import RouteFactory

    assert run_get_for_route(session=issued.session, route=route, run_id=run.pk) == run
    with pytest.raises(RunNotFound):
        run_get_for_route(session=issued.session, route=RouteFactory(project=route.project), run_id=run.pk)


def test_a_completion_whose_content_is_nested_thousands_deep_is_stored_as_text(api_client, issued, run):
    """Recognising an execution summary parsed the content with json.loads, whose RecursionError
    (not a ValueError) answered the completion 500."""
    content = '{"a":' + "[" * 30_000 + "]" * 30_000 + "}"
    api_client.raise_request_exception = False
    response = complete_run(api_client, issued.access_token, str(run.pk), content=content)
    assert response.status_code == 200
    message = Message.objects.get(role=Message.Role.ASSISTANT)
    assert (message.kind, message.content) == (Message.Kind.TEXT, content)
