"""Knowledge queries run under lock and statement timeouts, which never outlive them."""

import pytest
from django.db import connection, transaction

from apps.runtime.knowledge.scope import bounded

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
