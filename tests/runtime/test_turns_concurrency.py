"""Requests arriving at once, each on its own thread and database connection: the database's
unique constraints and row locks decide, not a read-then-write race."""

import pytest

from apps.ledger.models import Conversation, Message, Run
from tests.concurrency import responses_at_once
from tests.ledger.helpers import complete_run, open_turn

N = 8

pytestmark = pytest.mark.django_db(transaction=True)


def test_identical_turns_at_once_create_one_run_and_the_same_answer(issued, route):
    responses = responses_at_once([lambda client: open_turn(client, issued.access_token, route.key)] * N)
    assert [response.status_code for response in responses] == [200] * N
    assert len({response.content for response in responses}) == 1
    assert (Conversation.objects.count(), Run.objects.count(), Message.objects.count()) == (1, 1, 1)


def test_different_requests_under_one_key_at_once_let_exactly_one_win(issued, route):
    calls = [lambda client, n=n: open_turn(client, issued.access_token, route.key, user_input=f"问题 {n}")
             for n in range(N)]
    responses = responses_at_once(calls)
    assert sorted(response.status_code for response in responses) == [200] + [409] * (N - 1)
    assert {response.json()["error"] for response in responses if response.status_code == 409} == {"turn_conflict"}
    assert (Run.objects.count(), Message.objects.count()) == (1, 1)


def test_different_turns_of_one_new_conversation_at_once_number_their_messages_gaplessly(issued, route):
    calls = [lambda client, n=n: open_turn(client, issued.access_token, route.key, n) for n in range(1, N + 1)]
    responses = responses_at_once(calls)
    assert [response.status_code for response in responses] == [200] * N
    assert Conversation.objects.count() == 1
    assert sorted(Message.objects.values_list("sequence", flat=True)) == list(range(1, N + 1))
    # each turn saw exactly the user messages appended before it
    assert sorted(r.json()["context"]["memory_refs"][0]["prior_messages"] for r in responses) == list(range(N))


def test_identical_completions_at_once_record_one_answer(api_client, issued, route):
    run_id = open_turn(api_client, issued.access_token, route.key).json()["run_id"]
    responses = responses_at_once([lambda client: complete_run(client, issued.access_token, run_id)] * N)
    assert [response.status_code for response in responses] == [200] * N
    assert len({response.content for response in responses}) == 1
    assert Message.objects.filter(role="assistant").count() == 1
    assert Run.objects.get().state == "completed"
