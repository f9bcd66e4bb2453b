"""A live hub (pytest-django's live_server, the demo shop mounted) with one workspace that has
knowledge and the demo shop's tools, an agent client, and `bailinghub-mcp` signed in to it by a
scripted login: the real CLI in a subprocess, approved through the authorization API with the
client token, its callback followed as a browser would."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from apps.demo_business.spec import demo_spec_bytes
from apps.knowledge import services as knowledge_services
from apps.routes.models import Route
from apps.tools.route_tools import SourceSpec, route_tools_set
from apps.tools.services import provider_create
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL
from tests.demo_business.conftest import TEST_SECRET, mount
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts
from tests.projects.factories import ProjectFactory
from tests.routes.factories import RouteFactory
from tests.runtime.knowledge_helpers import DELIVERY, REFUND, WARRANTY

CLI = str(Path(sys.executable).parent / "bailinghub-mcp")
WORKSPACE = "store-assistant"
WRITE_TOOLS = ["adjust_stock", "issue_refund", "add_customer_note"]


@pytest.fixture
def demo_mounted(settings):
    original = settings.DEMO_BUSINESS_ENABLED
    settings.DEMO_BUSINESS_SIGNING_SECRET = TEST_SECRET
    mount(settings, enabled=True)
    yield
    mount(settings, enabled=original)


@pytest.fixture
def hub_url(live_server, demo_mounted) -> str:
    return live_server.url


@pytest.fixture
def workspace(transactional_db, hub_url) -> Route:
    """`store-assistant`: three short policy documents (hashing embedder, ingested in-process) and
    the demo shop's five tools, the three writes allowed for agents."""
    project = ProjectFactory()
    route = RouteFactory(project=project, key=WORKSPACE, name="门店助手", knowledge_enabled=True,
                         system_prompt="你是百灵门店的店员助手。")
    kb = KnowledgeBaseFactory(project=project, name="门店政策")
    knowledge_services.route_knowledge_bind(route=route, knowledge_base=kb)
    ingest_texts(kb, {"退款.md": f"# 退款\n\n{REFUND}", "配送.md": f"# 配送\n\n{DELIVERY}",
                      "保修.md": f"# 保修\n\n{WARRANTY}"})
    provider = provider_create(project=project, name="demo-shop", base_url=f"{hub_url}/demo-business",
                               secret=TEST_SECRET, spec=demo_spec_bytes(), spec_filename="openapi.json").provider
    names = sorted(provider.tools.values_list("name", flat=True))
    route_tools_set(route=route, sources=[SourceSpec(provider=provider, allowed_tools=names)],
                    tools_direct_enabled=True, write_tools=WRITE_TOOLS)
    route.refresh_from_db()
    return route


@pytest.fixture
def agent_client(workspace):
    return AgentClientFactory(project=workspace.project, allowed_routes=[WORKSPACE])


@pytest.fixture
def config_home(tmp_path) -> Path:
    home = tmp_path / "config"
    home.mkdir()
    return home


def cli_env(config_home: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("BAILINGHUB_MCP_")}
    env["XDG_CONFIG_HOME"] = str(config_home)
    return env


def http_json(method: str, url: str, body: dict | None = None, token: str | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                     method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


class Lines:
    """A subprocess's stderr, line by line, with a deadline (a stuck CLI fails the test, not the run).
    Only the pump thread reads the stream: what it has not handed over yet is in no one else's reach."""

    def __init__(self, stream) -> None:
        self.queue: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.pump = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self.pump.start()

    def _pump(self, stream) -> None:
        for line in stream:
            self.queue.put(line)

    def wait_for(self, predicate, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.queue.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no matching line; got {self.seen!r}") from None
            self.seen.append(line)
            if predicate(line):
                return line

    def rest(self, timeout: float = 30.0) -> str:
        """The lines not taken by wait_for, once the stream has ended (the process exited)."""
        self.pump.join(timeout)
        assert not self.pump.is_alive(), f"the stream did not end in {timeout} s; got {self.seen!r}"
        return "".join(iter_queue(self.queue))


@dataclass
class Login:
    process: subprocess.Popen
    lines: Lines
    authorization_id: str


def start_login(hub_url: str, client, config_home: Path) -> Login:
    process = subprocess.Popen(
        [CLI, "login", "--hub", hub_url, "--client-app-id", client.app_id, "--workspace", WORKSPACE, "--no-browser"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(config_home))
    lines = Lines(process.stderr)
    url = lines.wait_for(lambda line: line.startswith("https://")).strip()
    assert url.startswith(client.agent_authorize_url + "?authorization_id=")
    return Login(process, lines, parse_qs(urlsplit(url).query)["authorization_id"][0])


def decide(hub_url: str, client, login: Login, *, approve: bool = True) -> str:
    """The business backend decides with its client token; the browser then follows the
    redirect to the CLI's loopback listener. Returns the redirect it followed."""
    base = f"{hub_url}/agent-auth/v1/authorizations/{login.authorization_id}"
    if approve:
        status, decided = http_json("POST", f"{base}/approve", {
            "principal": dict(PRINCIPAL), "on_behalf_of": "ada@example.com", "allowed_routes": [WORKSPACE]},
            token=client.token)
    else:
        status, decided = http_json("POST", f"{base}/deny", {}, token=client.token)
    assert status == 200, decided
    with urllib.request.urlopen(decided["redirect_uri"], timeout=15) as callback:
        assert callback.status == 200
    return decided["redirect_uri"]


def finish(login: Login) -> tuple[int, str]:
    returncode = login.process.wait(timeout=30)
    # Not stderr.read() here beside the pump: a line the pump had read but not yet queued was in
    # neither the queue nor what read() found (the denied login's "not approved" went missing).
    output = "".join(login.lines.seen) + login.lines.rest()
    stdout = login.process.stdout.read() if login.process.stdout else ""
    return returncode, output + stdout


def iter_queue(q: queue.Queue[str]):
    while True:
        try:
            yield q.get_nowait()
        except queue.Empty:
            return


@pytest.fixture
def signed_in(hub_url, agent_client, config_home) -> Path:
    """`bailinghub-mcp login` completed; returns the XDG config home holding the tokens."""
    login = start_login(hub_url, agent_client, config_home)
    decide(hub_url, agent_client, login)
    returncode, output = finish(login)
    assert returncode == 0, output
    return config_home


def stored_tokens(config_home: Path) -> dict:
    return json.loads((config_home / "bailinghub-mcp" / "credentials.json").read_text())
