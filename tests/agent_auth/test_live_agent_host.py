"""A real agent host over HTTP against the live server: PKCE, a loopback callback listener, the
business backend's approval with its client token, tokens, workspaces, rotation and revocation.
And, over the whole run, no token, code or client token in any log line."""

from __future__ import annotations

import http.client
import http.server
import json
import logging
import secrets
import threading
import urllib.request
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import override_settings

from apps.core.logging import RedactSecretsFilter
from tests.agent_auth.factories import AgentClientFactory, pkce_pair
from tests.local_server import SHUTDOWN_POLL_SECONDS
from tests.routes.factories import RouteFactory

pytestmark = pytest.mark.django_db(transaction=True)


class LoopbackListener:
    """The host's one-shot callback server on 127.0.0.1 with a random port."""

    def __init__(self) -> None:
        self.received: list[dict[str, list[str]]] = []
        listener = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                listener.received.append(parse_qs(urlsplit(self.path).query))
                body = b"You can close this window."
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # a careful host never logs its callback URL
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                       kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS})
        self.thread.start()
        self.redirect_uri = f"http://127.0.0.1:{self.server.server_port}/callback"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def listener():
    server = LoopbackListener()
    yield server
    server.close()


class Http:
    """Plain HTTP/1.1 to the hub; never follows redirects (agent hosts refuse them)."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname, parts.port

    def call(self, method: str, path: str, body: dict | None = None, token: str | None = None,
             headers: dict | None = None):
        connection = http.client.HTTPConnection(self.host, self.port, timeout=15)
        sent = {"Accept": "application/json", **(headers or {})}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        if token:
            sent["Authorization"] = f"Bearer {token}"
        connection.request(method, path, body=payload, headers=sent)
        response = connection.getresponse()
        raw = response.read()
        connection.close()
        data = json.loads(raw) if raw else None
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data


@pytest.fixture
def hub(live_server):
    return Http(live_server.url)


@pytest.fixture
def setup(db):
    route = RouteFactory(key="store-assistant", name="门店助手", system_info_name="百灵门店系统",
                         system_info_summary="订单与库存。", tools_direct_enabled=True)
    RouteFactory(project=route.project, key="hr-helpdesk", name="HR Helpdesk")
    client = AgentClientFactory(project=route.project, allowed_routes=["store-assistant", "hr-helpdesk"])
    return client


def authorize(hub: Http, listener: LoopbackListener, client, secrets_seen: list[str]) -> dict:
    """The whole browser authorization, as the host and the business backend do it."""
    verifier, challenge = pkce_pair()
    state = secrets.token_urlsafe(16)
    status, headers, created = hub.call("POST", "/agent-auth/v1/authorizations", {
        "client_app_id": client.app_id, "redirect_uri": listener.redirect_uri, "state": state,
        "requested_routes": ["store-assistant", "hr-helpdesk"], "device_label": "Ada's laptop",
        "code_challenge": challenge, "code_challenge_method": "S256",
    })
    assert status == 201, created
    assert headers["cache-control"] == "no-store"
    authorization_id = created["authorization_id"]
    assert created["authorization_url"].endswith(f"?authorization_id={authorization_id}")

    # The business authorization page asks the hub with its client token, then approves.
    status, headers, context = hub.call("GET", f"/agent-auth/v1/authorizations/{authorization_id}",
                                        token=client.token)
    assert (status, context["status"], context["device"]) == (200, "pending", {"name": "Ada's laptop"})
    status, headers, decided = hub.call("POST", f"/agent-auth/v1/authorizations/{authorization_id}/approve", {
        "principal": {"id": "u-1001", "roles": ["clerk"], "audience": "employee"},
        "on_behalf_of": "ada@example.com", "allowed_routes": ["store-assistant"],
    }, token=client.token)
    assert status == 200, decided

    # The browser follows the redirect to the host's loopback listener.
    with urllib.request.urlopen(decided["redirect_uri"], timeout=15) as callback:
        assert callback.status == 200
    received = listener.received.pop()
    assert received["state"] == [state]
    code = received["code"][0]
    secrets_seen.append(code)

    status, headers, tokens = hub.call("POST", "/agent-auth/v1/token", {
        "grant_type": "authorization_code", "client_app_id": client.app_id, "code": code,
        "redirect_uri": listener.redirect_uri, "code_verifier": verifier,
    })
    assert status == 200, tokens
    assert (headers["cache-control"], headers["pragma"]) == ("no-store", "no-cache")
    secrets_seen.extend([tokens["access_token"], tokens["refresh_token"]])
    return tokens


@pytest.fixture
def unredacted_logs():
    """Lift the console handler's redaction filter: it rewrites records in place, which would
    hide a token our code logged from every handler after it. The code must not rely on it."""
    lifted = [(handler, flt) for handler in logging.getLogger().handlers for flt in handler.filters
              if isinstance(flt, RedactSecretsFilter)]
    for handler, flt in lifted:
        handler.removeFilter(flt)
    yield
    for handler, flt in lifted:
        handler.addFilter(flt)


def test_an_agent_host_authorizes_uses_refreshes_and_revokes(hub, listener, setup, unredacted_logs, caplog, capfd):
    client = setup
    seen: list[str] = [client.token]
    caplog.set_level(logging.DEBUG)
    server_log = logging.getLogger("django.server")
    server_log.addHandler(caplog.handler)  # django.server does not propagate to the root
    try:
        with override_settings(DEBUG=True):  # SQL statements are logged too (django.db.backends)
            caplog.set_level(logging.DEBUG, logger="django.db.backends")
            _flow(hub, listener, client, seen)
    finally:
        server_log.removeHandler(caplog.handler)

    captured = capfd.readouterr()
    lines = [record.getMessage() for record in caplog.records] + [caplog.text, captured.out, captured.err]
    everything = "\n".join(lines)
    assert "agent session" in everything and "INSERT INTO" in everything  # the capture did capture
    assert len(seen) == 9  # the client token; 2 codes; 3 access and 3 refresh tokens (one pair from rotation)
    leaked = [secret[:4] for secret in seen if secret in everything]  # never print a secret, even here
    assert leaked == []


def _flow(hub: Http, listener: LoopbackListener, client, seen: list[str]) -> None:
    tokens = authorize(hub, listener, client, seen)
    access = tokens["access_token"]
    assert tokens["token_type"] == "Bearer" and isinstance(tokens["expires_in"], int)

    status, _, session = hub.call("GET", "/agent-auth/v1/session", token=access)
    assert (status, session["session_id"], session["allowed_routes"]) == (200, tokens["session_id"],
                                                                         ["store-assistant"])

    status, headers, workspaces = hub.call("GET", "/agent-api/v1/workspaces", token=access)
    assert status == 200 and headers["cache-control"] == "no-store"
    assert workspaces == {"schema_version": "bailing.agent-workspaces.v1", "workspaces": [
        {"route": "store-assistant", "name": "门店助手", "description": "A test workspace."}]}
    status, headers, _ = hub.call("GET", "/agent-api/v1/workspaces", token=access,
                                  headers={"If-None-Match": headers["etag"]})
    assert status == 304

    status, _, info = hub.call("GET", "/agent-api/v1/workspaces/store-assistant/system-info", token=access)
    assert status == 200
    assert info["binding"] == {"client_app_id": client.app_id, "session_id": tokens["session_id"],
                               "workspace": "store-assistant"}
    assert (info["metadata_status"], info["availability"]) == ("configured", "unknown")

    status, headers, bootstrap = hub.call("GET", "/agent-api/v1/workspaces/store-assistant/bootstrap", token=access)
    assert status == 200
    assert bootstrap["schema_version"] == "bailing.agent-runtime-profile.v1"
    assert bootstrap["workspace"]["route"] == "store-assistant"
    status, _, body = hub.call("GET", "/agent-api/v1/workspaces/store-assistant/bootstrap", token=access,
                               headers={"If-None-Match": headers["etag"]})
    assert (status, body) == (304, None)

    status, _, error = hub.call("GET", "/agent-api/v1/workspaces/hr-helpdesk/bootstrap", token=access)
    assert (status, error["error"]) == (404, "route_unavailable")

    # Refresh rotates; the same session goes on with the new pair.
    status, headers, rotated = hub.call("POST", "/agent-auth/v1/token", {
        "grant_type": "refresh_token", "client_app_id": client.app_id, "refresh_token": tokens["refresh_token"]})
    assert status == 200 and headers["pragma"] == "no-cache"
    seen.extend([rotated["access_token"], rotated["refresh_token"]])
    assert (rotated["session_id"], rotated["client_app_id"]) == (tokens["session_id"], client.app_id)
    assert hub.call("GET", "/agent-api/v1/workspaces", token=rotated["access_token"])[0] == 200

    # Presenting the rotated refresh token again fails closed and kills the session.
    status, headers, error = hub.call("POST", "/agent-auth/v1/token", {
        "grant_type": "refresh_token", "client_app_id": client.app_id, "refresh_token": tokens["refresh_token"]})
    assert (status, error["error"], headers["pragma"]) == (400, "invalid_grant", "no-cache")
    status, _, error = hub.call("GET", "/agent-api/v1/workspaces", token=rotated["access_token"])
    assert (status, error["error"]) == (401, "unauthorized")

    # A second authorization, then the host signs out.
    second = authorize(hub, listener, client, seen)
    status, headers, body = hub.call("POST", "/agent-auth/v1/revoke", token=second["access_token"])
    assert (status, body, headers["cache-control"]) == (200, {"revoked": True}, "no-store")
    assert hub.call("GET", "/agent-auth/v1/session", token=second["access_token"])[0] == 401
    status, _, error = hub.call("POST", "/agent-auth/v1/token", {
        "grant_type": "refresh_token", "client_app_id": client.app_id, "refresh_token": second["refresh_token"]})
    assert (status, error["error"]) == (400, "invalid_grant")
