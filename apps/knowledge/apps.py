from django.apps import AppConfig


class KnowledgeConfig(AppConfig):
    name = "apps.knowledge"
    label = "knowledge"

    def ready(self) -> None:
        from apps.knowledge.pipeline.retrieval_settings import retrieval_settings

        retrieval_settings()  # a bad KNOWLEDGE_RETRIEVAL stops the boot here, naming the key
