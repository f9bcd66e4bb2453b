"""The SDK's own MCP client launching `bailinghub-mcp serve` over stdio, as a desktop host does."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from mcp import Client, StdioServerParameters

from tests.mcp.conftest import CLI, cli_env


@contextlib.asynccontextmanager
async def mcp_session(config_home: Path) -> AsyncIterator[Client]:
    parameters = StdioServerParameters(command=CLI, args=["serve"], env=cli_env(config_home))
    async with Client(parameters, read_timeout_seconds=30) as client:
        yield client


def text_of(result) -> str:
    return "\n".join(block.text for block in result.content if getattr(block, "type", "") == "text")
