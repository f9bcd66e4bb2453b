"""Migration 0003 gives the notes written before it the principal of the session that wrote them.
Transactional: going back to 0002 unapplies 0006, whose indexes are built concurrently, outside a
transaction."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from apps.ledger.models import MemoryNote
from apps.ledger.services import memory_note_create
from tests.agent_auth.helpers import PRINCIPAL, session_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_existing_notes_take_their_sessions_principal_and_a_note_without_a_session_is_hidden(
        issued, agent_client, route):
    no_tenant = session_for(agent_client, principal={"id": "u-2002", "roles": []})
    memory_note_create(session=issued.session, project=route.project, route=route, content="ada")
    memory_note_create(session=no_tenant.session, project=route.project, route=None, content="no tenant")
    orphan = memory_note_create(session=issued.session, project=route.project, route=None, content="orphan")
    MemoryNote.objects.filter(pk=orphan.pk).update(created_by_session=None)  # its session was deleted

    try:
        executor = MigrationExecutor(connection)
        executor.migrate([("ledger", "0002_rag_query")])  # the columns go, the notes stay
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())

    assert set(MemoryNote.objects.values_list("content", "principal_tenant", "principal_id", "on_behalf_of")) == {
        ("ada", PRINCIPAL["tenant"], PRINCIPAL["id"], "ada@example.com"),
        ("no tenant", "", "u-2002", "ada@example.com"),
        ("orphan", "", "", "ada@example.com"),
    }
