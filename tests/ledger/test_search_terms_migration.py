"""ledger 0004-0006: the message search's terms for the messages written before them. The column
comes with a database default (code that predates it still inserts), the fill commits batch by batch
and, cut short, takes up where it stopped; the indexes are built concurrently. Transactional: the
migrations run outside a transaction, as `migrate` runs them."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test.utils import CaptureQueriesContext

from apps.ledger import services as ledger_services
from apps.ledger.models import Message
from apps.ledger.services import message_terms_fill
from tests.ledger.helpers import complete_run, open_turn

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE, LATEST = ("ledger", "0003_memory_note_principal"), ("ledger", "0006_message_search_indexes")


def _migrate(target) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([target])


def _indexes() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename IN ('ledger_message', 'ledger_conversation')")
        return {name for (name,) in cursor.fetchall()}


def _terms() -> dict[str, list[str]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT content, search_terms FROM ledger_message")
        return dict(cursor.fetchall())


@pytest.fixture
def written(api_client, issued, route):
    for n, (asked, answered) in enumerate([("My refund has not arrived", "已为您查询：包裹在杭州转运中心。"),
                                           ("发票抬头写错了", "可以重开增值税专用发票。")], start=1):
        run_id = open_turn(api_client, issued.access_token, route.key, n, user_input=asked).json()["run_id"]
        complete_run(api_client, issued.access_token, run_id, n, content=answered)
    yield
    _migrate(LATEST)  # whatever a failed assertion left behind


def test_the_messages_written_before_the_search_get_their_terms_and_indexes(written):
    _migrate(BEFORE)
    assert "ledger_message_search_terms" not in _indexes()
    _migrate(("ledger", "0004_message_search_terms"))
    with connection.cursor() as cursor:  # an insert of code that predates the column
        cursor.execute("INSERT INTO ledger_message (id, created_at, updated_at, conversation_id, sequence, role, kind, "
                       "client_message_id, content, run_id) SELECT gen_random_uuid(), now(), now(), conversation_id, "
                       "99, role, kind, 'old-code', '旧代码写的消息', run_id FROM ledger_message LIMIT 1")
    assert set(map(tuple, _terms().values())) == {()}
    _migrate(LATEST)

    terms = _terms()
    assert {"转运", "中心"} <= set(terms["已为您查询：包裹在杭州转运中心。"])
    assert "refund" in terms["My refund has not arrived"] and "代码" in terms["旧代码写的消息"]
    assert {"ledger_message_search_terms", "ledger_message_client_id", "ledger_conversation_client_id",
            "ledger_conversation_on_behalf"} <= _indexes()
    assert [m.content for m in Message.objects.filter(search_terms__contains=["增值", "值税"])] == [
        "可以重开增值税专用发票。"]


def test_a_fill_cut_short_takes_up_the_messages_still_without_terms(written, monkeypatch):
    _migrate(("ledger", "0004_message_search_terms"))
    with connection.cursor() as cursor:  # as a fill stopped after the first message left them
        cursor.execute("UPDATE ledger_message SET search_terms = CASE content WHEN 'My refund has not arrived' "
                       "THEN '{kept}'::text[] ELSE '{}' END")
    assert message_terms_fill() == 3  # the three others, not the one it had written
    terms = _terms()
    assert terms["My refund has not arrived"] == ["kept"]
    assert "重开" in terms["可以重开增值税专用发票。"]
    assert message_terms_fill() == 0
    # Statements of a bounded size: here one message's text each (2,000 long Chinese messages made
    # one of ~340 MB).
    monkeypatch.setattr(ledger_services, "FILL_WRITE_CHARS", 1)
    with CaptureQueriesContext(connection) as queries:
        assert message_terms_fill(every=True) == 4
    assert len([q for q in queries if q["sql"].startswith("UPDATE ledger_message")]) == 4
    assert "refund" in _terms()["My refund has not arrived"]
