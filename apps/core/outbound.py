"""Outbound HTTP that keeps to a deadline as a whole.

httpx's timeouts are per operation: each read may take the whole timeout, so a peer that sends its
status line (or its body) a byte at a time, each byte within the timeout, holds the caller for as
long as it trickles. A client from `deadline_client` connects through streams that cut every
connect, read and write to what is left of the deadline set with `deadline(...)` on this thread;
past it, an operation fails at once, unattempted, as httpx's own timeout (ConnectTimeout,
ReadTimeout, WriteTimeout), so each caller's handling of a timeout serves unchanged.

Where an operator names the host (a URL source, a reranker, a tool provider), `pinned` checks every
address the host resolves to against an AddressPolicy and aims the request at one of them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import SplitResult, urlsplit, urlunsplit

import httpcore
import httpx

_local = threading.local()


@contextlib.contextmanager
def deadline(at: float) -> Iterator[None]:
    """Every socket operation of a `deadline_client` on this thread, inside the block, ends by `at`
    (time.monotonic() seconds); an enclosing deadline that is sooner stays."""
    previous: float | None = getattr(_local, "deadline", None)
    _local.deadline = at if previous is None else min(previous, at)
    try:
        yield
    finally:
        _local.deadline = previous


def _within_deadline(timeout: float | None, expired: type[Exception]) -> float | None:
    """An operation's timeout cut to what is left of the deadline; past it, `expired` (httpcore's
    timeout for the operation) without trying: a read given even a millisecond returns what is
    already buffered, so a peer sending faster than that was never cut."""
    at: float | None = getattr(_local, "deadline", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise expired("the outbound deadline has passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _within_deadline(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _within_deadline(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname,
                                                      _within_deadline(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._backend.connect_tcp(
            host, port, _within_deadline(timeout, httpcore.ConnectTimeout), local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._backend.connect_unix_socket(
            path, _within_deadline(timeout, httpcore.ConnectTimeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def url_unrequestable(url: str) -> str | None:
    """Why httpx could make no request to `url`, or None. httpx refuses some URLs only when it sends
    (a host with an empty or over-long label fails the socket's IDNA encoding: UnicodeError), and
    others with InvalidURL: neither is one of its HTTPError, which is all a caller handles."""
    try:
        httpx.URL(url).raw_host.decode("ascii").encode("idna")
    except (httpx.InvalidURL, UnicodeError) as exc:
        return str(exc)[:200]
    return None


def deadline_client(**options: Any) -> httpx.Client:
    """An httpx.Client (TLS verified, no proxies or settings from the environment) whose connections
    keep to this thread's `deadline`. `options` are httpx.Client's (timeout, follow_redirects…)."""
    transport = httpx.HTTPTransport(verify=True, trust_env=False)
    # httpx takes no network backend of the caller's choosing: its pool (httpx 0.28, pinned) is
    # replaced by one with httpx's default limits whose connections keep to the deadline.
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=5.0)
    transport._pool = httpcore.ConnectionPool(
        ssl_context=httpx.create_ssl_context(verify=True, trust_env=False),
        max_connections=limits.max_connections, max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry, network_backend=_DeadlineBackend())
    return httpx.Client(transport=transport, trust_env=False, **options)


class AnswerTooLarge(Exception):
    """An answer's body past the caller's limit; reading stopped there."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(f"The answer is over {max_bytes:,} bytes.")
        self.max_bytes = max_bytes


def post_within(url: str, *, content: bytes, headers: dict[str, str], timeout: float,
                max_bytes: int) -> tuple[httpx.Response, bytes]:
    """POST `content` to `url`, the whole exchange within `timeout` seconds, no redirect followed:
    the (closed) response, for its status and headers, and its body — AnswerTooLarge when that
    passes `max_bytes`, read no further. httpx.HTTPError (its timeouts included) as httpx raises it."""
    with deadline(time.monotonic() + timeout), deadline_client(timeout=timeout, follow_redirects=False) as client, \
            client.stream("POST", url, content=content, headers=headers) as response:
        data = bytearray()
        for piece in response.iter_bytes():
            data += piece
            if len(data) > max_bytes:
                raise AnswerTooLarge(max_bytes)
        return response, bytes(data)


class AddressRefused(Exception):
    """A host the hub will not connect to: `code` "address_refused" (an address its policy refuses)
    or "unresolvable"."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def networks_parse(cidrs: Sequence[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """A deployment's networks (CIDRs); ValueError names the one that is not a network."""
    networks = []
    for cidr in cidrs:
        try:
            networks.append(ipaddress.ip_network(cidr, strict=False))
        except ValueError as exc:
            raise ValueError(f"{cidr!r} is not a network (CIDR, e.g. 10.1.0.0/16).") from exc
    return networks


@dataclasses.dataclass(frozen=True)
class AddressPolicy:
    """Where an operator's URL may lead. `public_only`: global unicast addresses, and those inside
    `allowed` (CIDRs) — anything else (private, loopback, link-local, carrier-grade NAT, multicast,
    reserved, unspecified) is refused, so a cloud metadata endpoint or the hub's own database is
    never reached on an operator's say-so. Otherwise any address outside `denied`. IPv4 mapped into
    IPv6 is judged as IPv4."""

    public_only: bool
    allowed: Sequence[str] = ()
    denied: Sequence[str] = ()

    def check(self, addresses: Sequence[str]) -> list[str]:
        """The addresses, if the policy takes every one; AddressRefused otherwise."""
        allowed, denied = networks_parse(self.allowed), networks_parse(self.denied)
        if not addresses:
            raise AddressRefused("unresolvable", "The host does not resolve.")
        for text in addresses:
            address = ipaddress.ip_address(text.split("%", 1)[0])
            if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
                address = address.ipv4_mapped
            if any(address in network for network in denied):
                raise AddressRefused("address_refused", "The host resolves to an address that is refused (a cloud "
                                                        "metadata service, link-local, multicast or unspecified).")
            if not self.public_only or (address.is_global and not address.is_multicast) or any(
                    address in network for network in allowed):
                continue
            raise AddressRefused("address_refused", "The host resolves to a private, loopback, link-local or "
                                                    "otherwise non-public address, which is refused.")
        return list(addresses)


def host_resolve(host: str, port: int, policy: AddressPolicy) -> list[str]:
    """Every address of `host`, each checked against `policy`."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise AddressRefused("unresolvable", "The host does not resolve.") from exc
    return policy.check(list(dict.fromkeys(str(info[4][0]) for info in infos)))


@dataclasses.dataclass(frozen=True)
class Pinned:
    """A request aimed at an address that was checked: `url` names the address itself, `headers`
    carry the URL's own host and `extensions` its TLS server name (httpx's), so a DNS answer that
    changes between the check and the connection (DNS rebinding) cannot send it elsewhere."""

    url: str
    headers: dict[str, str]
    extensions: dict[str, Any]


def url_addresses(url: str, policy: AddressPolicy) -> list[str]:
    """Every address of the host of `url` (http or https), each checked against `policy`
    (host_resolve); AddressRefused otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AddressRefused("unresolvable", "The URL has no http(s) host.")
    return host_resolve(parts.hostname, _port(parts), policy)


def url_refused(url: str, policy: AddressPolicy) -> bool:
    """Whether the host of `url` resolves now to an address `policy` refuses: what an operator's
    form checks when saving. A host that does not resolve from here now is not refused: the call
    says so when it is made."""
    try:
        url_addresses(url, policy)
    except AddressRefused as exc:
        return exc.code == "address_refused"
    return False


def _port(parts: SplitResult) -> int:
    return parts.port or (443 if parts.scheme == "https" else 80)


def pinned(url: str, policy: AddressPolicy) -> Pinned:
    """`url` (http or https, with a host) aimed at its host's first address, every address of which
    `policy` takes (url_addresses); AddressRefused otherwise."""
    address = url_addresses(url, policy)[0]
    parts = urlsplit(url)
    literal = f"[{address}]" if ":" in address else address
    return Pinned(url=urlunsplit((parts.scheme, f"{literal}:{_port(parts)}", parts.path or "/", parts.query, "")),
                  headers={"Host": parts.netloc.rsplit("@", 1)[-1]},
                  extensions={"sni_hostname": parts.hostname} if parts.scheme == "https" else {})
