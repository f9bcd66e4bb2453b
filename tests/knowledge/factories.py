import factory

from apps.knowledge import services
from apps.knowledge.models import CostRecord, EmbeddingModel, KnowledgeBase
from tests.projects.factories import ProjectFactory


class EmbeddingModelFactory(factory.django.DjangoModelFactory):
    """Registered through the service, so the model's HNSW index exists too."""

    class Meta:
        model = EmbeddingModel

    name = factory.Sequence(lambda n: f"hashing-{n}")
    provider = EmbeddingModel.Provider.HASHING
    dimension = 32
    options = factory.LazyFunction(dict)

    @classmethod
    def _create(cls, model_class, *args, **kwargs):
        return services.embedding_model_register(**kwargs)


class KnowledgeBaseFactory(factory.django.DjangoModelFactory):
    """Created through the service, so its first (active) generation exists too."""

    class Meta:
        model = KnowledgeBase

    project = factory.SubFactory(ProjectFactory)
    name = factory.Sequence(lambda n: f"知识库 {n}")
    embedding_model = factory.SubFactory(EmbeddingModelFactory)
    chunk_strategy = factory.LazyFunction(
        lambda: {"strategy": "auto", "min_chars": 0, "max_chars": 200, "overlap_chars": 0}
    )
    require_confirmation = False

    @classmethod
    def _create(cls, model_class, *args, **kwargs):
        model = kwargs.pop("embedding_model")
        return services.knowledge_base_create(embedding_model=model, embedding_dim=model.dimension, **kwargs)


class CostRecordFactory(factory.django.DjangoModelFactory):
    """A metered rerank call of a KB, as apps.knowledge.pipeline.rerank records it."""

    class Meta:
        model = CostRecord

    call_kind = CostRecord.CallKind.RERANK
    knowledge_base = factory.SubFactory(KnowledgeBaseFactory)
    model = "rerank-small"
    units = 4
    latency_ms = 12
