"""PostgreSQL stopped under a running web server: every kind of endpoint answers 503 with
Retry-After (never 500), and the server recovers by itself when PostgreSQL is back.

The stack is real and separate from the suite's: its own embedded PostgreSQL and Redis under a
temporary var dir, migrated, served by gunicorn with DEBUG off."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _embedded(env: dict[str, str], code: str) -> None:
    subprocess.run([sys.executable, "-c", f"from bailinghub import embedded; {code}"], cwd=ROOT, env=env,
                   check=True, capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def stack(embedded_var_dir):
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "TEST_DATABASE_NAME"}}
    env.update(BAILING_VAR_DIR=str(embedded_var_dir("unavailable-var")), DEBUG="false",
               SECRET_KEY="unavailable-test-" + "k" * 40, DJANGO_SETTINGS_MODULE="bailinghub.settings")
    server = None
    try:
        up = subprocess.run([sys.executable, "-m", "bailinghub.embedded", "up"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
        assert up.returncode == 0, up.stderr[-4000:]
        env.update(line.split("=", 1) for line in up.stdout.split())
        migrate = subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=300)
        assert migrate.returncode == 0, migrate.stderr[-2000:]
        client = ("from apps.agent_auth.services import agent_client_create; from apps.projects.models import Project; "
                  "agent_client_create(project=Project.objects.get(slug='bailing-retail'), app_id='unavailable-test', "
                  "name='Unavailable test', allowed_routes=['store-assistant'], "
                  "agent_authorize_url='http://127.0.0.1:9/authorize')")
        for command in (["seed_demo"], ["shell", "-c", client]):
            done = subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env=env, capture_output=True,
                                  text=True, timeout=120)
            assert done.returncode == 0, done.stderr[-2000:]
        port = _free_port()
        server = subprocess.Popen([sys.executable, "-m", "gunicorn", "bailinghub.wsgi", "--bind", f"127.0.0.1:{port}",
                                   "--workers", "1", "--threads", "2", "--timeout", "60"],
                                  cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/healthz", timeout=2)
                break
            except OSError:
                assert server.poll() is None, "gunicorn exited"
                assert time.monotonic() < deadline, "gunicorn did not answer"
                time.sleep(0.2)
        yield base, env
    finally:  # also when the set-up failed: no embedded server outlives the test
        if server is not None:
            server.terminate()
            server.wait(30)
        subprocess.run([sys.executable, "-m", "bailinghub.embedded", "down"], cwd=ROOT, env=env, timeout=120)


REQUESTS = {
    "agent api": ("GET", "/agent-api/v1/workspaces", {"Authorization": "Bearer bha_" + "x" * 40}, None),
    "agent auth": ("POST", "/agent-auth/v1/authorizations", {"Content-Type": "application/json"},
                   {"client_app_id": "unavailable-test", "redirect_uri": "http://127.0.0.1:53682/callback",
                    "state": "state-12345678", "requested_routes": ["store-assistant"], "device_label": "laptop",
                    "code_challenge": "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
                    "code_challenge_method": "S256"}),
    "builder api": ("GET", "/api/v1/builder/knowledge-bases", {"Authorization": "Bearer bhop_" + "x" * 40}, None),
    "console": ("GET", "/admin/", {"Cookie": "sessionid=" + "s" * 32}, None),
    "console login": ("GET", "/admin/login/", {}, None),
}


def _call(base: str, name: str) -> tuple[int, dict[str, str], bytes]:
    method, path, headers, body = REQUESTS[name]
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, method=method, headers=headers)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_postgres_down_is_503_with_retry_after_everywhere_and_recovers_by_itself(stack):
    base, env = stack
    before = {name: _call(base, name)[0] for name in REQUESTS}
    assert before == {"agent api": 401, "agent auth": 201, "builder api": 401, "console": 302,
                      "console login": 200}

    _embedded(env, "embedded.postgres_stop()")
    try:
        during = {name: _call(base, name) for name in REQUESTS}
    finally:
        _embedded(env, "embedded.postgres_start()")

    for name in ("agent api", "agent auth", "builder api"):
        status, headers, body = during[name]
        assert (name, status, headers.get("Retry-After")) == (name, 503, "5")
        # Agent Auth's closed error list names its own: agent_auth_unavailable.
        expected = "agent_auth_unavailable" if name == "agent auth" else "service_unavailable"
        assert json.loads(body)["error"] == expected
        assert headers["Content-Type"].startswith("application/json")
    assert during["agent api"][1]["Cache-Control"] == "no-store"
    status, headers, body = during["console"]
    assert (status, headers.get("Retry-After")) == (503, "5")
    assert b"Temporarily unavailable" in body
    assert during["console login"][0] == 200  # a page that needs no database still answers

    after = {name: _call(base, name)[0] for name in REQUESTS}
    assert after == before


def test_redis_down_is_503_where_redis_is_needed_and_recovers_by_itself(stack):
    base, env = stack
    assert _call(base, "agent auth")[0] == 201  # rate-limited per client and address in Redis

    _embedded(env, "embedded.redis_stop()")
    try:
        status, headers, body = _call(base, "agent auth")
        unaffected = _call(base, "agent api")[0]
    finally:
        _embedded(env, "embedded.redis_start()")

    assert (status, headers.get("Retry-After"), json.loads(body)["error"]) == (503, "5", "agent_auth_unavailable")
    assert unaffected == 401
    assert _call(base, "agent auth")[0] == 201
