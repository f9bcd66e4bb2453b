import base64

import pytest
from django.core.exceptions import ValidationError

from apps.agent_auth.services import agent_client_create
from apps.agent_auth.validators import loopback_redirect_uri_problem
from apps.core.tokens import token_generate, token_hash, token_matches
from tests.agent_auth.factories import AgentClientFactory


def test_tokens_are_prefix_plus_base64url_of_32_random_bytes():
    token = token_generate("bha_")
    assert token.startswith("bha_") and len(token) == 4 + 43
    assert len(base64.urlsafe_b64decode(token[4:] + "=")) == 32
    assert token_generate("bha_") != token


def test_a_token_matches_only_its_own_hash():
    token = token_generate("bhr_")
    assert token_hash(token) == token_hash(token) and len(token_hash(token)) == 64
    assert token_matches(token, token_hash(token))
    assert not token_matches(token_generate("bhr_"), token_hash(token))
    assert not token_matches(token, "")


@pytest.mark.parametrize("url", [
    "https://business.example.com/agent/authorize",
    "https://hub.example.com:8443/agent-auth/authorize",
    "http://127.0.0.1:8000/agent-auth/authorize",
    "http://[::1]:8000/agent-auth/authorize",
])
def test_acceptable_authorization_page_urls(route, url):
    client = AgentClientFactory(project=route.project, agent_authorize_url=url)
    assert client.agent_authorize_url == url


@pytest.mark.parametrize("url", [
    "http://business.example.com/agent/authorize",
    "http://127.0.0.1/agent-auth/authorize",
    "http://localhost:8000/agent-auth/authorize",
    "https://business.example.com/agent/authorize?tenant=7",
    "https://business.example.com/agent/authorize#x",
    "https://user:pw@business.example.com/agent/authorize",
    "javascript:alert(1)",
    "ftp://business.example.com/",
])
def test_unsafe_authorization_page_urls_are_refused(route, url):
    with pytest.raises(ValidationError) as error:
        agent_client_create(project=route.project, app_id="app-x", name="x", allowed_routes=[],
                            agent_authorize_url=url)
    assert "agent_authorize_url" in error.value.message_dict


@pytest.mark.parametrize(("routes", "field"), [
    (["payroll"], "allowed_routes"),
    (["auto"], "allowed_routes"),
    (["store-assistant", "store-assistant"], "allowed_routes"),
])
def test_allowed_routes_are_existing_route_keys_of_the_project(route, routes, field):
    with pytest.raises(ValidationError) as error:
        agent_client_create(project=route.project, app_id="app-x", name="x", allowed_routes=routes,
                            agent_authorize_url="https://b.example.com/a")
    assert field in error.value.message_dict


def test_allowed_routes_of_another_project_are_refused(route):
    from tests.routes.factories import RouteFactory

    elsewhere = RouteFactory(key="elsewhere")
    with pytest.raises(ValidationError):
        agent_client_create(project=route.project, app_id="app-x", name="x", allowed_routes=[elsewhere.key],
                            agent_authorize_url="https://b.example.com/a")


@pytest.mark.parametrize("app_id", ["ab", "Store", "-store", "store app", "s" * 65, "store\n"])
def test_app_id_format(route, app_id):
    with pytest.raises(ValidationError) as error:
        agent_client_create(project=route.project, app_id=app_id, name="x", allowed_routes=[],
                            agent_authorize_url="https://b.example.com/a")
    assert "app_id" in error.value.message_dict


@pytest.mark.parametrize(("uri", "ok"), [
    ("http://127.0.0.1:1/", True),
    ("http://127.0.0.1:65535/cb", True),
    ("http://[::1]:5000", True),
    ("http://127.0.0.1:0/cb", False),
    ("http://127.0.0.1:/cb", False),
    ("http://127.0.0.2:5000/cb", False),
    ("http://127.0.0.1.evil.example:5000/cb", False),
    ("http://127.0.0.1:5000@evil.example/cb", False),
    ("http://[::1]:5000/cb#", False),
    ("http://127.0.0.1:5000/c b", False),
    ("http://127.0.0.1:5000/" + "a" * (2048 - 22), True),
    ("http://127.0.0.1:5000/" + "a" * (2049 - 22), False),
])
def test_loopback_redirect_uris(uri, ok):
    assert (loopback_redirect_uri_problem(uri) is None) is ok
