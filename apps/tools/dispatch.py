"""Outbound business calls: build the signed HTTP request of one tool call, and send it.

``request_build`` is pure: it places every argument where the compiled tool says (path segments
percent-encoded, never a segment of their own that is empty, ``.`` or ``..``; query, headers, JSON
body) and signs the request the way
``apps.demo_business.verify`` documents for business backends::

    v1\\n{timestamp}\\n{METHOD}\\n{path?query}\\n{sha256(body) hex}
    X-Bailing-Signature: v1=<hex HMAC-SHA256(provider secret, canonical string)>

``request_send`` is the one function that talks HTTP to a business system; only the dispatcher
task reaches it (through ``apps.tools.delivery.invocation_dispatch``). It follows no redirect,
verifies TLS, keeps to the tool's ``timeout_ms`` for the whole exchange, reads at most
``max_bytes`` of the answer, and connects only to an address outside
settings.TOOL_PROVIDER_DENIED_NETWORKS (cloud metadata services and the like), the one it checked.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
from django.conf import settings

from apps.core.outbound import AddressPolicy, AddressRefused, deadline_client, pinned
from apps.core.outbound import deadline as outbound_deadline
from apps.tools.compiler import HEADER_NAME, hub_header

SIGNATURE_VERSION = "v1"
USER_AGENT = "BailingHub-Dispatcher/1"
_HEADER_SAFE = frozenset(chr(code) for code in range(0x20, 0x7F))


class ArgumentUnplaceable(Exception):
    """An argument cannot be put on the wire where the tool says (a header that is not text)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


@dataclass(frozen=True)
class OutboundRequest:
    method: str
    url: str
    target: str
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Outcome:
    """What became of one send: ``response`` (a trusted status), ``not_sent`` (proven never to
    have left: the connection was never made) or ``uncertain`` (sent, or maybe sent, and no answer)."""

    kind: str
    status: int | None = None
    body: bytes = b""
    truncated: bool = False
    reason: str = ""
    elapsed_ms: int = 0
    content_type: str = ""


def canonical_string(*, timestamp: int, method: str, target: str, body: bytes) -> str:
    return "\n".join((SIGNATURE_VERSION, str(timestamp), method.upper(), target, hashlib.sha256(body).hexdigest()))


def signature(*, secret: str, timestamp: int, method: str, target: str, body: bytes) -> str:
    canonical = canonical_string(timestamp=timestamp, method=method, target=target, body=body)
    return f"{SIGNATURE_VERSION}=" + hmac.new(secret.encode("utf-8"), canonical.encode("utf-8"),
                                              hashlib.sha256).hexdigest()


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, int | float | str):
        return str(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _header_value(value: str, *, percent_escaped: bool = False) -> str:
    """Header values travel as ASCII; anything else (a name in Chinese) is percent-encoded, never
    dropped. With `percent_escaped` (the hub's own X-Bailing-On-Behalf-Of and -Tool-Scope) a "%"
    is encoded too, so a backend decodes every value the same way
    (apps.demo_business.verify.bailing_headers): an ASCII value with a "%" went raw while a name in
    Arabic went encoded, and the two could not be told apart."""
    if all(char in _HEADER_SAFE for char in value) and not (percent_escaped and "%" in value):
        return value
    return quote(value, safe=" !#$&'()*+,/:;=?@[]~")


_DOT_SEGMENTS = frozenset({"", ".", ".."})
_SEPARATORS = re.compile(r"[/\\]")


def _path_filled(template: str, values: dict[str, tuple[str, str]]) -> str:
    """The tool's path with each ``{name}`` replaced by its argument's text, percent-encoded
    (`values`: name → (argument, text)). A "/" in a value is encoded, so a value stays inside its
    segment for httpx; but a segment that a value leaves empty, ``.`` or ``..`` is resolved (by
    httpx, a proxy, the business system's router) into another path — ``..`` in
    ``/accounts/{id}/statement`` reached ``/statement``, signed as the tool — and so is a value
    whose own pieces between "/" or "\\" are ``.`` or ``..`` wherever "%2F" is decoded before the
    path is resolved (nginx does; IIS takes "\\" for "/"): both are refused."""
    segments = []
    for segment in template.split("/"):
        filled, raw, placed = segment, segment, []
        for name, (argument, text) in values.items():
            if "{" + name + "}" in filled:
                filled = filled.replace("{" + name + "}", quote(text, safe=""))
                raw = raw.replace("{" + name + "}", text)
                placed.append(argument)
        if placed and (filled in _DOT_SEGMENTS or any(piece in (".", "..") for piece in _SEPARATORS.split(raw))):
            shown = filled if filled in _DOT_SEGMENTS else raw[:60]
            raise ArgumentUnplaceable(placed[0], f"a path parameter cannot be {shown!r}: that path segment would "
                                                 "name another path than the tool's.")
        segments.append(filled)
    return "/".join(segments)


@dataclass(frozen=True)
class _Placed:
    path: str
    query: list[tuple[str, str]]
    headers: dict[str, str]
    body: bytes


def _arguments_placed(compiled: dict[str, Any], arguments: dict[str, Any], *, body_built: bool = True) -> _Placed:
    """Every argument where the compiled tool says, or ArgumentUnplaceable. Without `body_built`
    the JSON body is not written (nothing in it is refused, and it may be a mebibyte)."""
    path_values: dict[str, tuple[str, str]] = {}
    query: list[tuple[str, str]] = []
    headers: dict[str, str] = {}
    body_fields: dict[str, Any] = {}
    whole_body: Any = None
    has_body = False
    for location in compiled.get("parameter_locations") or []:
        argument, where, name = location["argument"], location["in"], location["name"]
        if argument not in arguments:
            continue
        value = arguments[argument]
        if where == "path":
            path_values[name] = (argument, _scalar_text(value))
        elif where == "query":
            items = value if isinstance(value, list) else [value]
            query.extend((name, _scalar_text(item)) for item in items)
        elif where == "header":
            if hub_header(name):
                continue  # compiled before the compiler left the hub's headers out: never the agent's to set
            if not HEADER_NAME.fullmatch(name):  # compiled before the compiler refused it: nothing is sent
                raise ArgumentUnplaceable(argument, f"{name!r} is not a name a header can have.")
            text = _scalar_text(value)
            if "\r" in text or "\n" in text or "\x00" in text:
                raise ArgumentUnplaceable(argument, "a header value cannot hold line breaks or NUL.")
            headers[name] = _header_value(text)
        elif where == "body":
            has_body = True
            if name:
                body_fields[name] = value
            else:
                whole_body = value
    body = b""
    if body_built and (has_body or compiled.get("content_type")):
        payload = whole_body if whole_body is not None else body_fields
        if has_body or compiled.get("method", "GET") not in ("GET", "HEAD", "DELETE"):
            body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            headers["Content-Type"] = "application/json"
    return _Placed(path=_path_filled(str(compiled["path"]), path_values), query=query, headers=headers, body=body)


def arguments_unplaceable(*, compiled: dict[str, Any], arguments: dict[str, Any]) -> ArgumentUnplaceable | None:
    """Why `arguments` cannot be put on the wire as the tool says, or None: asked when the call is
    made, so that it is refused then, not after an approval, when the dispatcher builds it."""
    try:
        _arguments_placed(compiled, arguments, body_built=False)
    except ArgumentUnplaceable as exc:
        return exc
    return None


def request_build(*, base_url: str, compiled: dict[str, Any], arguments: dict[str, Any], secret: str,
                  job_id: str, idempotency_key: str, on_behalf_of: str, timestamp: int) -> OutboundRequest:
    placed = _arguments_placed(compiled, arguments)
    headers, body = dict(placed.headers), placed.body
    query_text = "&".join(f"{quote(key, safe='')}={quote(value, safe='')}" for key, value in placed.query)
    url = httpx.URL(base_url.rstrip("/") + placed.path + (f"?{query_text}" if query_text else ""))
    target = url.raw_path.decode("ascii")
    method = str(compiled.get("method", "GET")).upper()
    headers.update({
        "User-Agent": USER_AGENT,
        "X-Bailing-Timestamp": str(timestamp),
        "X-Bailing-Signature": signature(secret=secret, timestamp=timestamp, method=method, target=target, body=body),
        "X-Bailing-Tool-Scope": _header_value(str(compiled.get("scope", "")), percent_escaped=True),
        "X-Bailing-Job-Id": job_id,
        "X-Bailing-On-Behalf-Of": _header_value(on_behalf_of, percent_escaped=True),
        "X-Bailing-Idempotency-Key": idempotency_key,
    })
    return OutboundRequest(method=method, url=str(url), target=target, headers=headers, body=body)


_local = threading.local()


def address_policy() -> AddressPolicy:
    """Where a business call may go: anywhere but settings.TOOL_PROVIDER_DENIED_NETWORKS."""
    return AddressPolicy(public_only=False, denied=settings.TOOL_PROVIDER_DENIED_NETWORKS)


def _client(origin: str) -> httpx.Client:
    """This thread's pooled client for one origin (scheme, host name, port): connections to a
    business system are reused across calls. Requests name the address they checked, so a pool
    shared by every origin would hand a TLS connection made (and verified) for one host name to
    another host served at the same address."""
    clients: dict[str, httpx.Client] = _local.__dict__.setdefault("clients", {})
    client = clients.get(origin)
    if client is None:
        client = clients[origin] = deadline_client(follow_redirects=False)
    return client


def request_send(request: OutboundRequest, *, timeout_ms: int, max_bytes: int) -> Outcome:
    """Send once; never retried here. A connection that was never made is ``not_sent``; a timeout,
    reset or garbage after the request may have left is ``uncertain``. A status line received is a
    trusted answer, even if its body is cut at ``max_bytes`` or stops before the deadline."""
    started = time.monotonic()
    deadline = started + timeout_ms / 1000
    timeout = httpx.Timeout(timeout_ms / 1000)

    def elapsed() -> int:
        return int((time.monotonic() - started) * 1000)

    with outbound_deadline(deadline):  # every connect, read and write of the exchange keeps to it
        return _send(request, timeout=timeout, deadline=deadline, max_bytes=max_bytes, elapsed=elapsed)


def _send(request: OutboundRequest, *, timeout: httpx.Timeout, deadline: float, max_bytes: int,
          elapsed: Callable[[], int]) -> Outcome:
    try:
        target = pinned(request.url, address_policy())
    except AddressRefused as exc:
        return Outcome(kind="not_sent", reason=exc.code, elapsed_ms=elapsed())
    parts = urlsplit(request.url)
    client = _client(f"{parts.scheme}://{parts.netloc.lower()}")
    try:
        with client.stream(request.method, target.url, headers={**request.headers, **target.headers},
                           content=request.body, timeout=timeout, extensions=target.extensions) as response:
            chunks: list[bytes] = []
            size = 0
            truncated = False
            reason = ""
            try:
                for chunk in response.iter_bytes():
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > max_bytes:
                        truncated, reason = True, "response_too_large"
                        break
                    if time.monotonic() > deadline:
                        truncated, reason = True, "response_incomplete"
                        break
            except (httpx.TimeoutException, httpx.TransportError):
                truncated, reason = True, "response_incomplete"
            body = b"".join(chunks)[:max_bytes]
            return Outcome(kind="response", status=response.status_code, body=body, truncated=truncated,
                           reason=reason, elapsed_ms=elapsed(),
                           content_type=response.headers.get("content-type", ""))
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol) as exc:
        return Outcome(kind="not_sent", reason=type(exc).__name__, elapsed_ms=elapsed())
    except httpx.TimeoutException as exc:
        return Outcome(kind="uncertain", reason=f"timeout ({type(exc).__name__})", elapsed_ms=elapsed())
    except httpx.TransportError as exc:
        return Outcome(kind="uncertain", reason=f"connection lost ({type(exc).__name__})", elapsed_ms=elapsed())
