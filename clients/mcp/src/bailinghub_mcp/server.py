"""The MCP side: a low-level `mcp` Server whose tools are the bridge's, over stdio (the default,
one MCP session per process) or Streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from bailinghub_mcp import __version__, wire
from bailinghub_mcp.auth import HubSession, SessionExpired
from bailinghub_mcp.bridge import BUILTIN_TOOLS, Bridge, BridgeError, Outcome, hub_failure
from bailinghub_mcp.envelope import JsonRpcEnvelope, line_error

log = logging.getLogger("bailinghub_mcp")

ALL_DEFINITION_KEYS = ("risk", "approval_required", "readonly", "idempotent", "scope")


def _mcp_tool(name: str, description: str, schema: dict[str, Any], *, read_only: bool,
              idempotent: bool | None = None) -> types.Tool:
    return types.Tool(name=name, description=description, input_schema=schema,
                      annotations=types.ToolAnnotations(read_only_hint=read_only, destructive_hint=not read_only,
                                                        idempotent_hint=idempotent, open_world_hint=not read_only))


def builtin_tools() -> list[types.Tool]:
    return [_mcp_tool(name, spec["description"], spec["input_schema"], read_only=spec["read_only"])
            for name, spec in BUILTIN_TOOLS.items()]


def _declared_only(name: str, arguments: dict[str, Any]) -> None:
    """A built-in tool takes the arguments its schema declares (additionalProperties: false): one
    it does not know was dropped without a word (capability_search's "limit": 3 came back 5 tools)."""
    declared = BUILTIN_TOOLS[name]["input_schema"]["properties"]
    unknown = sorted(set(arguments) - set(declared))
    if unknown:
        raise BridgeError(f"{', '.join(unknown)}: not an argument of {name}, which takes "
                          f"{', '.join(declared)}.")


def _fact(value: Any) -> str:
    # As JSON writes it (true, false, null), right under the JSON schema the model reads; a word
    # such as a scope or a risk level stays unquoted.
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def governed_tool(definition: dict[str, Any]) -> types.Tool:
    """A workspace tool as an MCP tool: its own input schema; its governance in the description."""
    facts = ", ".join(f"{key}: {_fact(definition[key])}" for key in ALL_DEFINITION_KEYS if key in definition)
    description = f"{definition.get('description') or ''}\n[BailingHub governed tool; {facts}]".strip()
    return _mcp_tool(definition["name"], description, definition["input_schema"],
                     read_only=bool(definition.get("readonly")), idempotent=bool(definition.get("idempotent")))


def _result(outcome: Outcome) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=outcome.text)],
                                structured_content=outcome.data or None, is_error=outcome.is_error)


def build_server(bridge: Bridge) -> Server[Bridge]:
    @asynccontextmanager
    async def lifespan(_: Server[Bridge]) -> AsyncIterator[Bridge]:
        try:
            yield bridge
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await anyio.to_thread.run_sync(bridge.complete)
                except Exception as exc:  # shutting down: say it, do not mask the exit
                    log.warning("could not complete the session's run: %s", exc)

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        tools = builtin_tools()
        governed = await anyio.to_thread.run_sync(bridge.listed_tools)
        tools.extend(governed_tool(definition) for definition in governed)
        return types.ListToolsResult(tools=tools)

    handlers = {
        "knowledge_search": bridge.knowledge_search,
        "knowledge_read": bridge.knowledge_read,
        "capability_search": bridge.capability_search,
        "resume_invocation": bridge.resume,
        "inspect_invocation": bridge.inspect,
    }

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        handler = handlers.get(params.name)
        try:
            if handler is not None:
                _declared_only(params.name, arguments)
                outcome = await anyio.to_thread.run_sync(handler, arguments)
            else:
                outcome = await anyio.to_thread.run_sync(bridge.invoke, params.name, arguments)
        except (wire.HubError, wire.WireError, SessionExpired, BridgeError) as exc:
            outcome = hub_failure(exc)
        if bridge.tools_changed:
            try:
                await ctx.session.send_tool_list_changed()
            except Exception as exc:  # a host that cannot hear it re-lists on its own
                log.debug("tool list change not notified: %s", exc)
        return _result(outcome)

    return _Server("bailinghub-mcp", version=__version__, title="BailingHub",
                   instructions=bridge.instructions(), lifespan=lifespan,
                   on_list_tools=list_tools, on_call_tool=call_tool)


class _Server(Server):
    """Declares `tools.listChanged: true` on every transport (Streamable HTTP builds its options
    itself): the server sends `notifications/tools/list_changed` when a capability search or a
    new capability revision changes the tool list, and a host that follows the declared
    capability only listens for it when it is declared."""

    def create_initialization_options(self, notification_options: NotificationOptions | None = None,
                                      experimental_capabilities: dict[str, dict[str, Any]] | None = None,
                                      extensions: dict[str, dict[str, Any]] | None = None) -> InitializationOptions:
        return super().create_initialization_options(notification_options or NotificationOptions(tools_changed=True),
                                                     experimental_capabilities, extensions)


async def _checked_lines(lines: AsyncIterable[str],
                         answers: MemoryObjectSendStream[SessionMessage]) -> AsyncIterator[str]:
    """stdin's lines for the SDK; one that is no JSON-RPC message MCP accepts gets its JSON-RPC
    error here instead (the SDK drops it without a word), a blank one is skipped."""
    async for line in lines:
        if not line.strip():
            continue
        error = line_error(line)
        if error is None:
            yield line
        else:
            await answers.send(SessionMessage(types.JSONRPCError.model_validate(error)))


async def _forward(answers: MemoryObjectReceiveStream[SessionMessage], write_stream: Any) -> None:
    async with answers:
        async for message in answers:
            await write_stream.send(message)


def serve_stdio(bridge: Bridge) -> None:
    server = build_server(bridge)

    async def run() -> None:
        answers, to_forward = anyio.create_memory_object_stream[SessionMessage](math.inf)
        # UTF-8 from a descriptor of our own; undecodable bytes are kept as surrogates, so that
        # line_error refuses the line (the SDK replaced them with U+FFFD and sent that to the hub).
        stdin = anyio.wrap_file(open(os.dup(0), encoding="utf-8", errors="surrogateescape"))  # noqa: SIM115
        lines = cast("anyio.AsyncFile[str]", _checked_lines(stdin, answers))
        async with stdio_server(stdin=lines) as (read_stream, write_stream), anyio.create_task_group() as errors:
            errors.start_soon(_forward, to_forward, write_stream)
            await server.run(read_stream, write_stream, server.create_initialization_options())
            errors.cancel_scope.cancel()

    anyio.run(run)


def serve_http(bridge: Bridge, *, port: int) -> None:
    """Streamable HTTP on 127.0.0.1 only (DNS-rebinding protection on): the tokens behind it are
    the user's, so the port is never offered to the network. One run for the whole process."""
    import uvicorn

    server = build_server(bridge)
    app = server.streamable_http_app(host="127.0.0.1")  # its lifespan enters the server's: the run completes
    uvicorn.run(JsonRpcEnvelope(app), host="127.0.0.1", port=port, log_level="warning")


def open_bridge(session: HubSession) -> Bridge:
    """The bridge, with the workspace's profile read once for the server's instructions (a hub
    that cannot be reached now is tried again on the first tool list). A sign-in the hub has
    ended raises SessionExpired: its tokens are deleted by then, and a server started on them
    could only answer every request with it."""
    bridge = Bridge(session)
    try:
        bridge.refresh_profile()
    except (wire.HubError, wire.WireError) as exc:
        log.warning("workspace profile not read at start: %s", exc)
    return bridge


__all__ = ["BridgeError", "build_server", "open_bridge", "serve_http", "serve_stdio"]
