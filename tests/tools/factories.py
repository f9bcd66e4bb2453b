from pathlib import Path

import factory

from apps.tools import services
from apps.tools.models import ToolProvider
from tests.projects.factories import ProjectFactory

FIXTURES = Path(__file__).parent / "fixtures"
STORE_SPEC = (FIXTURES / "store.yaml").read_bytes()


class ToolProviderFactory(factory.django.DjangoModelFactory):
    """Created through the service, so its tools are compiled from the spec."""

    class Meta:
        model = ToolProvider

    project = factory.SubFactory(ProjectFactory)
    name = factory.Sequence(lambda n: f"store-{n}")
    base_url = "http://127.0.0.1:9/store"
    secret = "provider-signing-secret"
    spec = STORE_SPEC

    @classmethod
    def _create(cls, model_class, *args, **kwargs):
        return services.provider_create(**kwargs).provider
