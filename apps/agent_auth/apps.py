from django.apps import AppConfig


class AgentAuthConfig(AppConfig):
    name = "apps.agent_auth"
    label = "agent_auth"
    verbose_name = "Agent sign-in"
