from django.apps import AppConfig


def _default_embedding_models(sender, using: str = "default", apps=None, **kwargs) -> None:
    """After migrate or flush: a database left without embedding models gets the local ones back.
    Through the models as the migrations have made them so far (`apps`): nothing when the knowledge
    tables are not there (yet), e.g. after `migrate knowledge zero`."""
    from django.apps import apps as global_apps

    from apps.knowledge.services import embedding_models_restore_defaults

    try:
        model = (apps or global_apps).get_model("knowledge", "EmbeddingModel")
    except LookupError:
        return
    embedding_models_restore_defaults(model=model, using=using)


class KnowledgeConfig(AppConfig):
    name = "apps.knowledge"
    label = "knowledge"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from apps.core.workers import queue_work_register
        from apps.knowledge.pipeline.retrieval_settings import retrieval_settings
        from apps.knowledge.progress import document_queue_work

        retrieval_settings()  # a bad KNOWLEDGE_RETRIEVAL stops the boot here, naming the key
        queue_work_register("documents", document_queue_work)
        self._allowed_networks_check()
        post_migrate.connect(_default_embedding_models, sender=self)

    @staticmethod
    def _allowed_networks_check() -> None:
        from django.conf import settings
        from django.core.exceptions import ImproperlyConfigured

        from apps.core.outbound import networks_parse

        for name in ("KNOWLEDGE_URL_ALLOWED_NETWORKS", "KNOWLEDGE_RERANK_ALLOWED_NETWORKS"):
            try:
                networks_parse(getattr(settings, name))
            except ValueError as exc:
                raise ImproperlyConfigured(f"{name}: {exc}") from exc
