"""Vector indexes per index generation instead of per embedding model (apps.knowledge.vector_indexes).

The per-model indexes are dropped; the watchdog (on every worker start, then on its timer) builds
the per-generation indexes that live generations need, CONCURRENTLY, so this migration does not
hold the table while graphs are built."""

from django.db import migrations, models

from apps.knowledge.pipeline.sql import hnsw_index_create_sql, hnsw_index_drop_sql


def drop_model_indexes(apps, schema_editor):
    EmbeddingModel = apps.get_model("knowledge", "EmbeddingModel")
    for model in EmbeddingModel.objects.all():
        schema_editor.execute(hnsw_index_drop_sql(model.pk))


def create_model_indexes(apps, schema_editor):
    EmbeddingModel = apps.get_model("knowledge", "EmbeddingModel")
    for model in EmbeddingModel.objects.all():
        schema_editor.execute(hnsw_index_create_sql(model.pk, model.dimension))


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0007_fusion_rerank_url_sources_cost_records")]
    operations = [
        migrations.AddField(model_name="indexgeneration", name="vector_indexed", field=models.BooleanField(default=False)),
        migrations.RunPython(drop_model_indexes, create_model_indexes),
    ]
