"""HTTP to the hub under the wire rules every agent host keeps: no redirects followed, an exact
success status, a JSON object body, answers over 1 MiB refused, 15 s to answer, and the schema
marker of each answer checked. A rule broken by the hub is an error here, never guessed around."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from bailinghub_mcp import __version__

MAX_ANSWER_BYTES = 1024 * 1024
TIMEOUT_SECONDS = 15.0
USER_AGENT = f"bailinghub-mcp/{__version__}"


class WireError(Exception):
    """The hub broke a wire rule, or could not be reached. `sent` tells whether the request may
    have reached the hub (a write whose answer was lost must be inspected, never re-sent)."""

    def __init__(self, reason: str, message: str, *, sent: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.sent = sent


class HubError(Exception):
    """The hub answered with its error model: `{"error": code, "message": ...}` and a status."""

    def __init__(self, status: int, code: str, message: str, body: dict[str, Any]) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.body = body


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any] | None
    headers: httpx.Headers


def new_client(base_url: str, *, transport: httpx.BaseTransport | None = None) -> httpx.Client:
    return httpx.Client(base_url=base_url.rstrip("/"), follow_redirects=False, timeout=TIMEOUT_SECONDS,
                        headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
                        transport=transport, trust_env=False)


def send(client: httpx.Client, method: str, path: str, *, json_body: Any = None, token: str | None = None,
         expect: int = 200, schema: str | None = None, headers: dict[str, str] | None = None) -> Answer:
    """One request, one answer, every rule checked. 304 is accepted only for a conditional GET."""
    sent_headers = dict(headers or {})
    content = None
    if json_body is not None:
        content = json.dumps(json_body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        sent_headers["Content-Type"] = "application/json"
    if token:
        sent_headers["Authorization"] = f"Bearer {token}"
    deadline = time.monotonic() + TIMEOUT_SECONDS
    request = client.build_request(method, path, content=content, headers=sent_headers)
    try:
        response = client.send(request, stream=True)
    except httpx.TimeoutException as exc:
        raise WireError("timeout", f"The hub did not answer {method} {path} within {TIMEOUT_SECONDS:.0f} s.",
                        sent=not isinstance(exc, httpx.ConnectTimeout)) from None
    except httpx.ConnectError:
        raise WireError("unreachable", f"Could not connect to the hub for {method} {path}.") from None
    except httpx.TransportError as exc:
        raise WireError("connection_lost", f"The connection to the hub failed during {method} {path}: "
                        f"{type(exc).__name__}.", sent=True) from None
    try:
        raw = _read_bounded(response, deadline, f"{method} {path}")
    finally:
        response.close()
    status = response.status_code
    if 300 <= status < 400 and status != 304:
        raise WireError("redirect_refused", f"The hub answered {method} {path} with a redirect ({status}); "
                        "agent hosts never follow redirects.", sent=True)
    if status == 304:
        if "If-None-Match" not in sent_headers:
            raise WireError("unexpected_status", f"304 to {method} {path} without If-None-Match.", sent=True)
        return Answer(status, None, response.headers)
    body = _json_object(raw, f"{method} {path}", status)
    if status >= 400:
        code = body.get("error")
        if not isinstance(code, str) or not code:
            raise WireError("malformed_error", f"The hub's {status} to {method} {path} has no error code.",
                            sent=True)
        message = body.get("message")
        raise HubError(status, code, message if isinstance(message, str) else "", body)
    if status != expect:
        raise WireError("unexpected_status", f"The hub answered {method} {path} with {status}, not {expect}.",
                        sent=True)
    if schema is not None and body.get("schema_version") != schema:
        raise WireError("schema_mismatch", f"{method} {path} answered schema_version "
                        f"{body.get('schema_version')!r}, not {schema!r}.", sent=True)
    return Answer(status, body, response.headers)


def _read_bounded(response: httpx.Response, deadline: float, what: str) -> bytes:
    length = response.headers.get("Content-Length")
    if length is not None and length.isdigit() and int(length) > MAX_ANSWER_BYTES:
        raise WireError("answer_too_large", f"The answer to {what} is {length} bytes; over the 1 MiB limit.",
                        sent=True)
    chunks: list[bytes] = []
    total = 0
    try:
        for chunk in response.iter_bytes():
            total += len(chunk)
            if total > MAX_ANSWER_BYTES:
                raise WireError("answer_too_large", f"The answer to {what} is over the 1 MiB limit.", sent=True)
            if time.monotonic() > deadline:
                raise WireError("timeout", f"The answer to {what} took over {TIMEOUT_SECONDS:.0f} s.", sent=True)
            chunks.append(chunk)
    except httpx.TimeoutException:
        raise WireError("timeout", f"The answer to {what} took over {TIMEOUT_SECONDS:.0f} s.", sent=True) from None
    except httpx.DecodingError:
        encoding = response.headers.get("Content-Encoding", "")[:40]
        raise WireError("undecodable", f"The answer to {what} could not be decoded as its Content-Encoding "
                        f"{encoding!r} says.", sent=True) from None
    except httpx.TransportError as exc:
        raise WireError("connection_lost", f"The answer to {what} was cut off: {type(exc).__name__}.",
                        sent=True) from None
    return b"".join(chunks)


def _json_object(raw: bytes, what: str, status: int) -> dict[str, Any]:
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # RecursionError: nested past json's stack
        raise WireError("not_json", f"The hub's {status} to {what} is not JSON.", sent=True) from None
    if not isinstance(body, dict):
        raise WireError("not_json", f"The hub's {status} to {what} is not a JSON object.", sent=True)
    return body
