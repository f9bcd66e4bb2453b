"""Register the two local embedding models (and their HNSW indexes) so a fresh install can create
knowledge bases at once. More models: apps.knowledge.services.embedding_model_register."""

from django.db import migrations

from apps.knowledge.default_models import DEFAULT_EMBEDDING_MODELS as DEFAULTS
from apps.knowledge.pipeline.sql import hnsw_index_create_sql, hnsw_index_drop_sql


def register(apps, schema_editor):
    EmbeddingModel = apps.get_model("knowledge", "EmbeddingModel")
    for values in DEFAULTS:
        model, _ = EmbeddingModel.objects.get_or_create(
            name=values["name"], defaults={"provider": values["provider"], "dimension": values["dimension"],
                                           "options": {}},
        )
        schema_editor.execute(hnsw_index_create_sql(model.pk, model.dimension))


def unregister(apps, schema_editor):
    EmbeddingModel = apps.get_model("knowledge", "EmbeddingModel")
    for model in EmbeddingModel.objects.filter(name__in=[values["name"] for values in DEFAULTS]):
        schema_editor.execute(hnsw_index_drop_sql(model.pk))
        model.delete()


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0001_initial")]
    operations = [migrations.RunPython(register, unregister)]
