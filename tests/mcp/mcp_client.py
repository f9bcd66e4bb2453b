"""The SDK's own MCP client launching `bailinghub-mcp serve` over stdio, as a desktop host does."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
from mcp import Client, StdioServerParameters

from tests.mcp.conftest import CLI, cli_env

T = TypeVar("T")


@contextlib.asynccontextmanager
async def mcp_session(config_home: Path) -> AsyncIterator[Client]:
    parameters = StdioServerParameters(command=CLI, args=["serve"], env=cli_env(config_home))
    async with Client(parameters, read_timeout_seconds=30) as client:
        yield client


def text_of(result) -> str:
    return "\n".join(block.text for block in result.content if getattr(block, "type", "") == "text")


def run_async(scenario: Callable[[], Awaitable[T]]) -> T:
    """``anyio.run(scenario)`` on a thread of its own: the suite's browser tests keep Playwright's
    event loop in the main thread, and anyio refuses to start a second loop in a thread that runs one."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = anyio.run(scenario)
        except BaseException as exc:  # re-raised in the test's thread, whatever it was
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="mcp-scenario")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
