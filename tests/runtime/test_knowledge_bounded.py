"""Knowledge queries run under lock and statement timeouts, which never outlive them."""

import pytest
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext

from apps.core import dblimits
from apps.knowledge.pipeline import parallel
from apps.runtime.knowledge.scope import bounded
from tests.runtime.knowledge_helpers import search

pytest_plugins = ["tests.runtime.knowledge_fixtures"]

pytestmark = pytest.mark.django_db(transaction=True)


def _limits():
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('lock_timeout'), current_setting('statement_timeout')")
        return cursor.fetchone()


def test_outside_a_transaction_the_limits_hold_inside_the_block_and_are_reset_after_it_even_on_an_error():
    before = _limits()
    assert before == ("0", "0")
    with bounded():
        assert _limits() == ("2s", "10s")
    assert _limits() == before
    with pytest.raises(ValueError), bounded():
        raise ValueError("a failing search")
    assert _limits() == before


def test_inside_a_transaction_the_limits_hold_until_the_transaction_ends():
    with transaction.atomic():
        with bounded():
            assert _limits() == ("2s", "10s")
        assert _limits() == ("2s", "10s")  # set_config(…, true): until the transaction ends
    assert _limits() == ("0", "0")


def _limit_statements(queries) -> list[str]:
    return [query["sql"] for query in queries.captured_queries
            if "lock_timeout" in query["sql"] and "current_setting" not in query["sql"]]


def test_nested_blocks_outside_a_transaction_set_the_limits_once_and_reset_them_once():
    with CaptureQueriesContext(connection) as queries, bounded():
        with bounded():
            assert dblimits.in_force() == ["2000ms", "10000ms"]
        with bounded():
            pass
        statements = len(_limit_statements(queries))
        assert _limits() == ("2s", "10s")  # the inner blocks left them in force
    assert statements == 1
    assert len(_limit_statements(queries)) == 2  # and the outer block's reset
    assert dblimits.in_force() is None
    assert _limits() == ("0", "0")


def test_a_failure_inside_a_nested_block_in_a_transaction_rolls_back_to_its_own_savepoint():
    with transaction.atomic():
        with bounded():
            with pytest.raises(DatabaseError), bounded(), connection.cursor() as cursor:
                cursor.execute("SELECT 1 / 0")
            with connection.cursor() as cursor:  # the transaction goes on
                cursor.execute("SELECT 2")
                assert cursor.fetchone() == (2,)
            assert _limits() == ("2s", "10s")
        assert dblimits.in_force() is None


def test_different_inner_limits_hold_inside_and_the_outer_ones_come_back():
    with dblimits.limited(lock_timeout_ms=2000, statement_timeout_ms=10000):
        with dblimits.limited(lock_timeout_ms=500, statement_timeout_ms=1500):
            assert _limits() == ("500ms", "1500ms")
            assert dblimits.in_force() == ["500ms", "1500ms"]
        assert _limits() == ("2s", "10s")
        assert dblimits.in_force() == ["2000ms", "10000ms"]
    assert _limits() == ("0", "0")


def test_an_agent_search_sets_its_limits_once_and_its_worker_takes_them_without_asking(
        api_client, ksession, kroute, docs, monkeypatch):
    taken = []
    real = parallel._take_limits
    monkeypatch.setattr(parallel, "_take_limits", lambda limits: (taken.append(limits), real(limits)))
    with CaptureQueriesContext(connection) as queries:
        response = search(api_client, ksession.access_token, kroute.key, "退款政策 七天无理由退货")
    assert response.status_code == 200
    assert next(hint["title"] for hint in response.json()["hints"]) == "退款.md"
    sql = [query["sql"] for query in queries.captured_queries]
    assert len([text for text in sql if "set_config('lock_timeout'" in text]) == 1
    assert len([text for text in sql if text.startswith("RESET lock_timeout")]) == 1
    assert [text for text in sql if "current_setting" in text] == []
    assert taken == [["2000ms", "10000ms"]]  # the vector channel ran beside, under the request's limits
    assert _limits() == ("0", "0")
    assert dblimits.in_force() is None
