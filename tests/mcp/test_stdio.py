"""`bailinghub-mcp serve` over stdio, as a host's raw JSON-RPC lines meet it: a line that is not a
JSON-RPC message MCP accepts gets JSON-RPC's own error, and the session goes on."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading

import pytest

from tests.mcp.conftest import CLI
from tests.mcp.scripted_hub import ScriptedHub, signed_in_store

INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "host", "version": "1"}}}


@pytest.fixture
def hub():
    scripted = ScriptedHub()
    yield scripted
    scripted.close()


class StdioServer:
    """The real CLI in a subprocess; its stdout read line by line on a thread."""

    def __init__(self, hub: ScriptedHub, tmp_path) -> None:
        store = signed_in_store(tmp_path / "config", hub)
        env = {**os.environ, "BAILINGHUB_MCP_CONFIG_DIR": str(store.directory)}
        self.process = subprocess.Popen([CLI, "serve"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True, encoding="utf-8")
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line)

    def send(self, line: str) -> None:
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def answer(self) -> dict:
        return json.loads(self.lines.get(timeout=15))

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


@pytest.fixture
def server(hub, tmp_path):
    started = StdioServer(hub, tmp_path)
    started.send(json.dumps(INITIALIZE))
    assert started.answer()["id"] == 0
    started.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    yield started
    started.close()


LINES = {
    "not json": ("{bad json", -32700, None),
    "a batch": ('[{"jsonrpc": "2.0", "id": 5, "method": "ping"}]', -32600, None),
    "params not an object": ('{"jsonrpc": "2.0", "id": 6, "method": "tools/list", "params": [1]}', -32600, 6),
    "no jsonrpc": ('{"id": "seven", "method": "ping"}', -32600, "seven"),
    "a null id": ('{"jsonrpc": "2.0", "id": null, "method": "ping"}', -32600, None),
    # JSON.stringify writes a lone surrogate so; the SDK's parser dropped the line in silence.
    "a lone surrogate in arguments": ('{"jsonrpc": "2.0", "id": "s1", "method": "tools/call", "params": {"name": '
                                      '"knowledge_search", "arguments": {"query": "abc\\ud800def"}}}', -32700, "s1"),
    "a lone surrogate in the id": ('{"jsonrpc": "2.0", "id": "\\ud800", "method": "ping"}', -32700, None),
    "a lone surrogate in the method": ('{"jsonrpc": "2.0", "id": "s3", "method": "x\\udc00"}', -32700, "s3"),
}


@pytest.mark.parametrize("name", LINES)
def test_a_line_that_is_no_json_rpc_message_gets_its_error_and_the_session_goes_on(server, name):
    """The SDK dropped such a line in silence: a host waited for ever for the answer to its id."""
    line, code, request_id = LINES[name]

    server.send(line)
    error = server.answer()
    server.send(json.dumps({"jsonrpc": "2.0", "id": "after", "method": "ping"}))
    after = server.answer()

    assert (error["jsonrpc"], error["id"], error["error"]["code"]) == ("2.0", request_id, code)
    assert len(error["error"]["message"]) < 200
    assert after == {"jsonrpc": "2.0", "id": "after", "result": {}}


def test_a_line_that_is_not_utf8_gets_a_parse_error_and_reaches_no_hub(server, hub):
    # It was decoded with U+FFFD in place of the bad bytes and searched for on the hub.
    server.process.stdin.buffer.write(b'{"jsonrpc": "2.0", "id": "u8", "method": "tools/call", "params": {"name": '
                                      b'"knowledge_search", "arguments": {"query": "\xff\xfe abc"}}}\n')
    server.process.stdin.flush()
    error = server.answer()
    assert (error["id"], error["error"]["code"]) == ("u8", -32700)
    server.send(json.dumps({"jsonrpc": "2.0", "id": "after", "method": "ping"}))
    assert server.answer() == {"jsonrpc": "2.0", "id": "after", "result": {}}
    assert [path for _, path, _, _ in hub.requests if path.endswith("/knowledge/search")] == []
