import base64
import hashlib
import secrets

import factory

from apps.agent_auth.models import AgentClient
from apps.agent_auth.services import agent_client_create
from tests.projects.factories import ProjectFactory


class AgentClientFactory(factory.django.DjangoModelFactory):
    """Created through the service; the client token it issued is on `.token`."""

    class Meta:
        model = AgentClient

    project = factory.SubFactory(ProjectFactory)
    app_id = factory.Sequence(lambda n: f"agent-app-{n}")
    name = factory.Sequence(lambda n: f"Agent app {n}")
    allowed_routes = factory.LazyFunction(list)
    agent_authorize_url = "https://business.example.com/agent/authorize"

    @classmethod
    def _create(cls, model_class, *args, **kwargs):
        client, token = agent_client_create(**kwargs)
        client.token = token
        return client


def pkce_pair() -> tuple[str, str]:
    """(verifier, S256 challenge) as an agent host makes them."""
    verifier = base64.urlsafe_b64encode(secrets.token_bytes(48)).rstrip(b"=").decode()
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge
