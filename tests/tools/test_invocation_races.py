"""Governed invocations under requests released together: copies of one call racing for the
run's last place, and a call racing its run's completion (found by a concurrency audit; each
test failed before its fix)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from apps.ledger.models import Run
from apps.tools.models import Approval, Invocation
from tests.concurrency import at_once
from tests.ledger.helpers import complete_run, open_turn
from tests.tools.invocation_helpers import ROUTE, URL

pytest_plugins = ["tests.tools.invocation_fixtures"]

pytestmark = pytest.mark.django_db(transaction=True)


def _post(body, token):
    def call(client):
        return client.generic("POST", URL, json.dumps(body), content_type="application/json",
                              HTTP_AUTHORIZATION=f"Bearer {token}")
    return call


def _limit(shop, n: int) -> None:
    type(shop.route).objects.filter(pk=shop.route.pk).update(max_tool_calls=n)


N = 6


@pytest.mark.parametrize("attempt", range(2))
def test_identical_calls_racing_for_the_runs_last_place_all_get_the_one_stored_answer(shop, settings, attempt):
    """§2: "Concurrent calls with one key → one dispatch; the others see in_progress. A settled
    result is replayed." One key is one call: the run's last place is taken by it, so every copy
    must answer with that call's result — never "this run has made its N tool calls" for the very
    call that took the place."""
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0
    _limit(shop, 1)
    body = shop.body("item_read", {"item_id": "TEA-1"})
    results = at_once([_post(body, shop.token)] * N)
    assert Invocation.objects.count() == 1
    statuses = Counter(status for status, _ in results)
    assert statuses == {200: N}, results
    texts = Counter(answer["text"][:60] for _, answer in results)
    refused = [answer for _, answer in results if answer["text"].startswith("This run has made its")]
    assert refused == [], f"{len(refused)} of {N} copies of one call were refused as a new call: {texts}"
    assert {answer["state"] for _, answer in results} == {"in_progress"}


@pytest.mark.parametrize("attempt", range(2))
def test_identical_approval_calls_racing_for_the_last_place_share_one_approval(shop, attempt):
    _limit(shop, 1)
    body = shop.body("refund_issue", {"order_id": "SO-1", "amount": 3})
    results = at_once([_post(body, shop.token)] * N)
    assert Approval.objects.count() == 1
    states = Counter(answer.get("state") for _, answer in results)
    assert states == {"awaiting_approval": N}, [a.get("text", a)[:80] for _, a in results]


def test_identical_writes_racing_for_the_runs_last_place_never_say_nothing_was_sent(shop, dispatching):
    """The same race with a write and a real dispatcher: the write is sent once, and the copies
    that lost the race answer `rejected_before_dispatch` — "Nothing was sent to the business
    system" — about the very call the business system received."""
    _limit(shop, 1)
    shop.server.respond("/api/notes", delay=0.3, body=b'{"saved":1}')
    body = shop.body("note_add", {"text": "once"})
    results = at_once([_post(body, shop.token)] * N)
    assert len(shop.server.requests_to("/api/notes")) == 1
    false_claims = [answer for _, answer in results
                    if answer.get("state") == "rejected_before_dispatch" and "Nothing was sent" in answer["text"]]
    assert false_claims == [], (f"{len(false_claims)} of {N} copies of a write the business system received "
                                f"answered 'Nothing was sent': {false_claims[0]['text'][:120]}")
    assert {answer["state"] for _, answer in results} <= {"executed", "in_progress"}


ROUNDS = 12


def _racing_completion(shop, n: int, tool: str, arguments: dict) -> tuple[tuple, Invocation | None, bool]:
    """Open turn n, then release a new call under its run together with the run's completion:
    (the call's answer, its stored row, whether the row was made after the completion committed)."""
    turn = open_turn(shop.client, shop.token, ROUTE, n)
    assert turn.status_code == 200, turn.content
    run_id = turn.json()["run_id"]
    body = shop.body(tool, arguments, agent_run_id=run_id)
    results = at_once([_post(body, shop.token),
                       lambda client: complete_run(client, shop.token, run_id, n)])
    assert results[1][0] == 200, results
    completed_at = Run.objects.get(pk=run_id).completed_at
    inv = Invocation.objects.filter(run_id=run_id).first()
    return results[0], inv, inv is not None and inv.created_at > completed_at


def test_a_call_racing_its_runs_completion_is_never_made_on_a_completed_run(shop, settings):
    """§2: "agent_run_id must be a run of this session and route that is still open (else 404
    run_not_found / 409 run_not_active)". A call that reaches the run after the completion
    committed must be refused, not stored and queued for dispatch under a completed run."""
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0
    late = []
    for n in range(2, 2 + ROUNDS):
        answer, inv, after = _racing_completion(shop, n, "item_read", {"item_id": f"TEA-{n}"})
        if after:
            late.append((answer, inv.state))
    assert late == [], (f"{len(late)}/{ROUNDS} calls were stored (and queued for dispatch) on a run whose "
                        f"completion had already committed: {late[:3]}")


def test_a_write_racing_its_runs_completion_is_not_sent_to_the_business_system(shop, dispatching):
    """The same race with a real dispatcher: the business system receives a write made under a run
    whose completion (with its execution summary) had already been recorded."""
    late = []
    for n in range(2, 8):
        answer, inv, after = _racing_completion(shop, n, "note_add", {"text": f"write {n}"})
        if after:
            late.append((answer[1].get("state"), inv.dispatched_at is not None))
    sent = len(shop.server.requests_to("/api/notes"))
    assert late == [], (f"{len(late)}/6 writes were accepted after their run's completion committed, "
                        f"(state, dispatched) = {late}; the business system received {sent} writes in all")
