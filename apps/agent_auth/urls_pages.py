"""Browser pages of Agent Auth (not the JSON API): mounted at /agent-auth/ before the API."""

from django.urls import path

from apps.agent_auth import pages

urlpatterns = [
    path("authorize", pages.authorization_page, name="agent-auth-authorize"),
    path("login", pages.login_page, name="agent-auth-login"),
]
