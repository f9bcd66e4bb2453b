"""The tool index is built by the real Celery worker (the session's worker thread, real Redis and
PostgreSQL) once a provider's import commits."""

import time

import pytest

from apps.core.tasks import ping
from apps.tools import semantic
from apps.tools.models import ToolEmbedding
from apps.tools.services import provider_reimport
from tests.projects.factories import ProjectFactory
from tests.tools.factories import ToolProviderFactory
from tests.tools.surface_helpers import store_spec_with

pytestmark = pytest.mark.django_db(transaction=True)


def _drain():
    # The session worker runs one task at a time: once a ping comes back, what was queued before it is done.
    assert ping.delay("drain").get(timeout=120) == {"pong": "drain"}


def _fresh_hashes(provider):
    expected = {tool.pk: semantic.text_sha256(semantic.index_text(tool.compiled)) for tool in provider.tools.all()}
    stored = dict(ToolEmbedding.objects.filter(tool__provider=provider, model=semantic.embedder_label())
                  .values_list("tool_id", "text_sha256"))
    return expected, stored


def test_the_worker_indexes_a_new_providers_tools(celery_worker_session):
    provider = ToolProviderFactory(project=ProjectFactory(), name="store")
    _drain()
    expected, stored = _fresh_hashes(provider)
    assert len(expected) == 5
    assert stored == expected


def test_the_worker_reindexes_a_reimported_tool(celery_worker_session):
    provider = ToolProviderFactory(project=ProjectFactory(), name="store")
    _drain()
    before = dict(ToolEmbedding.objects.values_list("tool__name", "updated_at"))
    time.sleep(0.01)
    provider_reimport(provider=provider, spec=store_spec_with("summary: Adjust stock", "summary: Adjust the stock"))
    _drain()
    expected, stored = _fresh_hashes(provider)
    after = dict(ToolEmbedding.objects.values_list("tool__name", "updated_at"))
    assert stored == expected
    assert [name for name in after if after[name] != before[name]] == ["stock_adjust"]


@pytest.mark.django_db(transaction=True)
def test_a_provider_deleted_while_its_index_writes_waits_for_the_write_and_takes_its_rows():
    """The index writes a batch under the provider's row lock; the delete takes the same lock first.
    Without it, a row written between the delete's reading of the index and its commit failed the
    delete on its foreign key (a fresh clone's browser test did)."""
    import threading

    from django.db import connection, transaction

    from apps.tools.models import Tool, ToolProvider
    from apps.tools.services import provider_delete

    provider = ToolProviderFactory(project=ProjectFactory(), name="store")
    ToolEmbedding.objects.all().delete()
    tool = Tool.objects.filter(provider=provider).first()
    locked, release, written = threading.Event(), threading.Event(), []

    def index_batch() -> None:  # as semantic.index_rebuild writes one batch
        try:
            with transaction.atomic():
                ToolProvider.objects.select_for_update(no_key=True).filter(pk=provider.pk).first()
                locked.set()
                release.wait(30)
                written.append(ToolEmbedding.objects.create(tool=tool, model="m", text_sha256="0" * 64,
                                                            embedding=[0.1] * 384).pk)
        finally:
            connection.close()

    writer = threading.Thread(target=index_batch)
    writer.start()
    assert locked.wait(30)
    threading.Timer(1.0, release.set).start()  # the delete below must wait for the write
    provider_delete(provider=provider)
    writer.join(30)
    assert len(written) == 1
    assert not ToolProvider.objects.filter(pk=provider.pk).exists()
    assert not ToolEmbedding.objects.filter(pk=written[0]).exists()
