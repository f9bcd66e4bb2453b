"""Memory notes under requests released together (found by a concurrency audit; each test failed
before its fix): a PATCH racing a DELETE answered 500, and two DELETEs both answered "deleted"."""

from __future__ import annotations

from collections import Counter

import pytest

from apps.ledger.models import MemoryNote
from tests.agent_auth.helpers import bearer
from tests.concurrency import at_once
from tests.ledger.helpers import post_json

pytestmark = pytest.mark.django_db(transaction=True)

ROUTE_NOTES = "/agent-api/v1/workspaces/{}/memories"
PROJECT_NOTES = "/agent-api/v1/workspaces/{}/project-memories"


ROUNDS = 20


@pytest.mark.parametrize("url", [ROUTE_NOTES, PROJECT_NOTES], ids=["route", "project"])
def test_a_note_updated_while_it_is_deleted_answers_404_never_500(api_client, issued, route, url):
    """knowledge-and-memory: update "按 id + workspace + persona 定位;没有 → LookupError" (404
    not_found), and no agent endpoint may answer 500. A PATCH that loaded the note just before a
    DELETE removed it must answer 404 (or succeed before the delete), not crash."""
    base = url.format(route.key)
    token = issued.access_token
    seen = Counter()
    crashes = []
    for n in range(ROUNDS):
        note_id = post_json(api_client, base, {"content": f"笔记 {n}"}, token).json()["memory_id"]
        results = at_once([
            lambda client, note_id=note_id: client.patch(f"{base}/{note_id}", {"content": "改"}, format="json",
                                                         **bearer(token)),
            lambda client, note_id=note_id: client.delete(f"{base}/{note_id}", **bearer(token)),
        ])
        seen.update(f"patch {results[0][0]} / delete {results[1][0]}" for _ in [0])
        crashes += [body for status, body in results if status >= 500]
    assert MemoryNote.objects.count() == 0
    assert crashes == [], f"{len(crashes)}/{ROUNDS} rounds crashed: {seen}; first: {crashes[0]}"


def test_two_deletes_of_one_note_at_once_delete_it_once_and_the_other_hears_404(api_client, issued, route):
    base = ROUTE_NOTES.format(route.key)
    token = issued.access_token
    outcomes = Counter()
    for n in range(ROUNDS):
        note_id = post_json(api_client, base, {"content": f"笔记 {n}"}, token).json()["memory_id"]
        results = at_once([lambda client, note_id=note_id: client.delete(f"{base}/{note_id}", **bearer(token))] * 2)
        outcomes[tuple(sorted(status for status, _ in results))] += 1
    assert set(outcomes) <= {(200, 404)}, outcomes

