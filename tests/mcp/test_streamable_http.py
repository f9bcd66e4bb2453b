"""`bailinghub-mcp serve --http`: Streamable HTTP on 127.0.0.1, against a scripted hub; the run is
completed when the server stops."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

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


def test_streamable_http_serves_the_workspace_tools_and_completes_the_run_on_stop(hub, tmp_path):
    store = signed_in_store(tmp_path / "config", hub)
    port = free_port()
    env = {**os.environ, "BAILINGHUB_MCP_CONFIG_DIR": str(store.directory)}
    process = subprocess.Popen([CLI, "serve", "--http", "--port", str(port)], env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_listening(port, process)

        async def scenario():
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                return [tool.name for tool in (await client.list_tools()).tools]

        names = run_async(scenario)
        foreign = httpx.post(f"http://127.0.0.1:{port}/mcp", headers={"Host": "evil.example", "Content-Type":
                             "application/json"}, content=b"{}", timeout=5)
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)

    assert {"knowledge_search", "capability_search", "lookup_product", "issue_refund"} <= set(names)
    assert foreign.status_code in (400, 403, 421)  # DNS-rebinding protection: only a loopback Host
    (completion,) = hub.sent("POST", f"/agent-api/v1/runs/{RUN_ID}/complete")
    assert completion["status"] == "completed" and completion["runtime"] == "bailinghub-mcp"
