"""JSON-RPC envelopes checked before the MCP SDK reads them (Streamable HTTP, and stdio's lines).

The SDK answers an envelope it cannot validate with -32602 (invalid params) and a multi-kilobyte
dump of its validation errors, takes `"id": null` for a notification (202, no answer), and refuses
a big body with a plain-text 413. A host deserves JSON-RPC's own answer in each case: -32600
(invalid request) with one sentence, and the 413 as a JSON-RPC error too. Anything that passes goes
to the SDK unchanged; a body that is not JSON at all (or nests deeper than `json` can recurse) is
left to the SDK's -32700. A request whose Host or Origin is not loopback goes to the SDK unread,
so its DNS-rebinding refusal (421, 403) comes first, as it would without this layer.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
# The SDK's own limit for a message; refused here first so the answer is JSON-RPC.
MAX_BODY_BYTES = 4 * 1024 * 1024


# What the SDK admits when it serves 127.0.0.1 (its DNS-rebinding protection): a loopback Host with
# an explicit port, and an Origin, when there is one, of http:// on such a host.
LOOPBACK_HOSTS = ("127.0.0.1:", "localhost:", "[::1]:")
LOOPBACK_ORIGINS = tuple(f"http://{host}" for host in LOOPBACK_HOSTS)


def _loopback(scope: Scope) -> bool:
    """Host, and Origin when there is one, are ones the SDK admits."""
    headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope.get("headers") or []}
    origin = headers.get("origin")
    return headers.get("host", "").startswith(LOOPBACK_HOSTS) and (not origin or origin.startswith(LOOPBACK_ORIGINS))


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def envelope_problem(message: Any) -> str | None:
    """Why `message` is not a JSON-RPC 2.0 message MCP accepts, or None when it is one."""
    if isinstance(message, list):
        return "Batches are not supported: send one JSON-RPC message per request."
    if not isinstance(message, dict):
        return "A JSON-RPC message is a JSON object."
    if message.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0".'
    if "id" in message and not _valid_id(message["id"]):
        if message["id"] is None:
            return "id must be a string or an integer; MCP does not allow null."
        return "id must be a string or an integer."
    if "method" in message:
        if not isinstance(message["method"], str) or not message["method"]:
            return "method must be a non-empty string."
        if "params" in message and not isinstance(message["params"], dict):
            return "params must be an object."
        return None
    if "id" not in message or ("result" in message) == ("error" in message):
        return "A message without a method is a response: it needs an id and either a result or an error."
    return None


def _utf8(value: Any) -> bool:
    """Whether `value` (parsed JSON) can be written as UTF-8."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    except RecursionError:  # nested as deep as json.loads takes: left to the envelope's own checks
        return True
    return True


def error_message(code: int, message: str, request_id: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id if _valid_id(request_id) else None,
            "error": {"code": code, "message": message}}


def line_error(line: str) -> dict[str, Any] | None:
    """The JSON-RPC error that answers one line of stdio, or None when the line is a message MCP
    accepts. (Over stdio the SDK drops any other line in silence: a host waits for ever for the
    answer to a request it got wrong, and a parse error is never said.)"""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError) as exc:
        return error_message(PARSE_ERROR, f"Parse error: {str(exc)[:120]}")
    if not _utf8(message):
        # A lone surrogate (JSON.stringify writes "\ud800") or bytes that were not UTF-8 (stdin
        # keeps them as surrogates): json.loads takes them, the SDK's parser refused the line in silence.
        request_id = message.get("id") if isinstance(message, dict) and _utf8(message.get("id")) else None
        return error_message(PARSE_ERROR, "Parse error: the message holds a lone UTF-16 surrogate (such as \\ud800) "
                                          "or bytes that are not UTF-8, which no UTF-8 text can carry.", request_id)
    problem = envelope_problem(message)
    if problem is None:
        return None
    return error_message(INVALID_REQUEST, f"Invalid Request: {problem}",
                         message.get("id") if isinstance(message, dict) else None)


async def _answer(send: Send, status: int, message: str, request_id: Any = None) -> None:
    body = json.dumps(error_message(INVALID_REQUEST, message, request_id)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class _Gone(Exception):
    """The client went away before its body was read."""


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None once it passes `limit` bytes (the rest is not read)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        event = await receive()
        if event["type"] == "http.disconnect":
            raise _Gone()
        chunk = event.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not event.get("more_body", False):
            return b"".join(chunks)


class JsonRpcEnvelope:
    """ASGI middleware: POSTs to `path` pass only as JSON-RPC messages MCP accepts."""

    def __init__(self, app: App, *, path: str = "/mcp", max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.path = path
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["method"] != "POST" or scope["path"].rstrip("/") != self.path
                or not _loopback(scope)):
            await self.app(scope, receive, send)
            return
        too_large = f"The request body is over {self.max_body_bytes} bytes."
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            await _answer(send, 413, too_large)
            return
        try:
            body = await _read_body(receive, self.max_body_bytes)
        except _Gone:
            return  # no one to answer
        if body is None:
            await _answer(send, 413, too_large)
            return
        try:
            message = json.loads(body)
        except (ValueError, RecursionError):
            message = None  # not JSON, or nested past json's stack: the SDK's parse error says where
        else:
            problem = envelope_problem(message)
            if problem is not None:
                await _answer(send, 400, f"Invalid Request: {problem}",
                              message.get("id") if isinstance(message, dict) else None)
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


__all__ = ["JsonRpcEnvelope", "envelope_problem", "line_error"]
