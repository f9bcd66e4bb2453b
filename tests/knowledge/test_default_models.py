"""The local embedding models a fresh database gets from migration 0002 come back after a flush
(`manage.py flush`, a transactional test's teardown), and only into a database that has none."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.sql import emit_post_migrate_signal

from apps.knowledge.models import EmbeddingModel
from tests.knowledge.factories import EmbeddingModelFactory

DEFAULTS = {("multilingual-e5-small", "local", 384), ("universal-sentence-encoder-multilingual", "use", 512)}


def _models() -> set[tuple]:
    return set(EmbeddingModel.objects.values_list("name", "provider", "dimension"))


@pytest.mark.django_db(transaction=True)
def test_a_flushed_database_gets_the_local_models_back():
    EmbeddingModelFactory()
    call_command("flush", interactive=False, verbosity=0)
    assert _models() == DEFAULTS


@pytest.mark.django_db
def test_a_database_with_any_model_is_left_as_it_is():
    EmbeddingModel.objects.filter(name="universal-sentence-encoder-multilingual").delete()
    before = _models()
    assert before == {("multilingual-e5-small", "local", 384)}
    emit_post_migrate_signal(0, False, "default")
    assert _models() == before


@pytest.mark.django_db
def test_a_database_without_models_gets_both_once():
    EmbeddingModel.objects.all().delete()
    emit_post_migrate_signal(0, False, "default")
    emit_post_migrate_signal(0, False, "default")
    assert _models() == DEFAULTS
    assert EmbeddingModel.objects.count() == 2


@pytest.mark.django_db
def test_nothing_is_written_while_the_knowledge_tables_are_not_migrated():
    """post_migrate after `migrate knowledge zero`: the migrations' models have no EmbeddingModel."""
    from django.apps.registry import Apps

    from apps.knowledge.apps import _default_embedding_models

    EmbeddingModel.objects.all().delete()
    _default_embedding_models(sender=None, using="default", apps=Apps())
    assert _models() == set()
    _default_embedding_models(sender=None, using="default")
    assert _models() == DEFAULTS
