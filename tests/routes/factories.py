import factory

from apps.routes.models import Route
from tests.projects.factories import ProjectFactory


class RouteFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Route

    project = factory.SubFactory(ProjectFactory)
    key = factory.Sequence(lambda n: f"route-{n}")
    name = factory.Sequence(lambda n: f"Route {n}")
    description = "A test workspace."
    system_prompt = "你是测试助手。"
    agent_client_enabled = True
