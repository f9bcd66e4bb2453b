"""`bailinghub-mcp serve --http`: Streamable HTTP on 127.0.0.1, against a scripted hub; the run is
completed when the server stops."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest
from mcp import Client

from tests.mcp.conftest import CLI
from tests.mcp.mcp_client import run_async
from tests.mcp.scripted_hub import RUN_ID, ScriptedHub, signed_in_store


@pytest.fixture
def hub():
    scripted = ScriptedHub()
    yield scripted
    scripted.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_listening(port: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("the server did not start listening")


@contextlib.contextmanager
def serving(hub, tmp_path) -> Iterator[str]:
    """`bailinghub-mcp serve --http` signed in to `hub`: yields its /mcp URL, stops it (SIGINT) on exit."""
    store = signed_in_store(tmp_path / "config", hub)
    port = free_port()
    env = {**os.environ, "BAILINGHUB_MCP_CONFIG_DIR": str(store.directory)}
    process = subprocess.Popen([CLI, "serve", "--http", "--port", str(port)], env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_listening(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)


def test_streamable_http_serves_the_workspace_tools_and_completes_the_run_on_stop(hub, tmp_path):
    with serving(hub, tmp_path) as url:

        async def scenario():
            async with Client(url) as client:
                return [tool.name for tool in (await client.list_tools()).tools]

        names = run_async(scenario)
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        foreign_host = httpx.post(url, headers={**headers, "Host": "evil.example"}, json=ping, timeout=5)
        foreign_origin = httpx.post(url, headers={**headers, "Origin": "http://evil.example"}, json=ping, timeout=5)

    assert {"knowledge_search", "capability_search", "lookup_product", "issue_refund"} <= set(names)
    # DNS-rebinding protection, before anything reads the body: only a loopback Host and Origin
    assert (foreign_host.status_code, foreign_origin.status_code) == (421, 403)
    (completion,) = hub.sent("POST", f"/agent-api/v1/runs/{RUN_ID}/complete")
    assert completion["status"] == "completed" and completion["runtime"] == "bailinghub-mcp"

ENVELOPES = {
    "a batch": ([{"jsonrpc": "2.0", "id": 1, "method": "ping"}], "Batches are not supported"),
    "no jsonrpc": ({"id": 1, "method": "ping"}, 'jsonrpc must be "2.0"'),
    "a null id": ({"jsonrpc": "2.0", "id": None, "method": "ping"}, "id must be a string or an integer"),
    "params not an object": ({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": [1]},
                             "params must be an object"),
    "a number": (5, "A JSON-RPC message is a JSON object"),
}


def test_malformed_envelopes_get_json_rpc_invalid_request_and_big_bodies_a_json_rpc_413(hub, tmp_path):
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    with serving(hub, tmp_path) as url:
        answers = {name: httpx.post(url, headers=headers, json=body, timeout=10)
                   for name, (body, _) in ENVELOPES.items()}
        big = httpx.post(url, headers=headers, content=b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "x": "'
                         + b"x" * (5 * 1024 * 1024) + b'"}', timeout=30)

    for name, (_, says) in ENVELOPES.items():
        answer = answers[name]
        error = answer.json()["error"]
        assert (name, answer.status_code, error["code"]) == (name, 400, -32600)
        assert error["message"].startswith(f"Invalid Request: {says}") and len(error["message"]) < 200, error
    assert answers["params not an object"].json()["id"] == 7
    assert (big.status_code, big.headers["content-type"], big.json()["error"]["code"]) == (413, "application/json",
                                                                                         -32600)


@pytest.mark.parametrize("body", [b"[" * 100_000 + b"]" * 100_000,
                                  b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"a": '
                                  + b"[" * 5000 + b"]" * 5000 + b"}}"], ids=["top", "in_params"])
def test_a_body_nested_past_the_parsers_stack_is_a_json_rpc_parse_error(hub, tmp_path, body):
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    with serving(hub, tmp_path) as url:
        answer = httpx.post(url, headers=headers, content=body, timeout=30)

    # The SDK's own parse error (it says the recursion limit was exceeded), not a plain-text 500.
    assert (answer.status_code, answer.headers["content-type"], answer.json()["error"]["code"]) == (
        400, "application/json", -32700)


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
def test_the_handshake_declares_the_tool_list_changes_it_sends(hub, tmp_path, version):
    """The server sends notifications/tools/list_changed when a capability search or a new revision
    changes the tool list; a host that follows the declared capability only listens when it is said."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "host", "version": "1"}}}
    with serving(hub, tmp_path) as url:
        answer = httpx.post(url, headers=headers, json=initialize, timeout=10)

    assert answer.status_code == 200, answer.text
    assert _json_rpc(answer)["result"]["capabilities"]["tools"] == {"listChanged": True}


def _json_rpc(answer: httpx.Response) -> dict:
    """The one JSON-RPC message of an answer, sent as JSON or as a server-sent event."""
    if answer.headers["content-type"].startswith("application/json"):
        return answer.json()
    (data,) = [line[len("data:"):] for line in answer.text.splitlines() if line.startswith("data:")]
    return json.loads(data)


def test_a_host_or_origin_the_sdk_refuses_is_refused_before_the_body_is_checked(hub, tmp_path):
    """The envelope took any Host or Origin naming a loopback host for one the SDK admits, so these
    bodies got its 400 (read in full) where the SDK's DNS-rebinding refusal belongs: the SDK admits
    an explicit port only, and an Origin only over http."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "ping"}]
    foreign = [("Origin", "http://localhost"), ("Origin", "https://127.0.0.1:8765"), ("Host", "localhost")]
    with serving(hub, tmp_path) as url:
        statuses = [httpx.post(url, headers={**headers, name: value}, json=batch, timeout=5).status_code
                    for name, value in foreign]

    assert statuses == [403, 403, 421]
