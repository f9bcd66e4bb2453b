from django.apps import AppConfig


class KnowledgeConfig(AppConfig):
    name = "apps.knowledge"
    label = "knowledge"

    def ready(self) -> None:
        from apps.knowledge.pipeline.retrieval_settings import retrieval_settings

        retrieval_settings()  # a bad KNOWLEDGE_RETRIEVAL stops the boot here, naming the key
        self._url_networks_check()

    @staticmethod
    def _url_networks_check() -> None:
        import ipaddress

        from django.conf import settings
        from django.core.exceptions import ImproperlyConfigured

        for cidr in settings.KNOWLEDGE_URL_ALLOWED_NETWORKS:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError as exc:
                raise ImproperlyConfigured(f"KNOWLEDGE_URL_ALLOWED_NETWORKS: {cidr!r} is not a network "
                                           "(CIDR, e.g. 10.1.0.0/16).") from exc
