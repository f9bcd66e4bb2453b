"""Fetching an external source (a document registered by its http(s) URL) — safely.

The worker fetches; an operator's URL is never trusted to point somewhere harmless:

* http and https only, no credentials in the URL, at most URL_MAX_CHARS characters;
* the host is resolved and *every* address checked (apps.core.outbound.pinned): anything that is
  not a global unicast address is refused unless settings.KNOWLEDGE_URL_ALLOWED_NETWORKS (CIDRs)
  permits it — so a cloud metadata endpoint or the hub's own database is never fetched;
* the connection goes to the address that was checked (the URL's host is sent as the Host header
  and the TLS server name), so a DNS answer that changes between the check and the connection
  (DNS rebinding) cannot redirect it;
* redirects are followed by hand, at most MAX_REDIRECTS, only to the same host, each checked again;
* a time cap over the whole fetch (KNOWLEDGE_URL_TIMEOUT_SECONDS), a size cap
  (KNOWLEDGE_URL_MAX_BYTES) enforced while reading, and a whitelist of content types that map onto
  the parsers (CONTENT_TYPES).

Each refusal is a FetchRefused with a stable code the document fails with.
"""

from __future__ import annotations

import posixpath
import time
from dataclasses import dataclass
from urllib.parse import unquote, urljoin, urlsplit

import httpx
from django.conf import settings

from apps.core import outbound
from apps.core.outbound import AddressPolicy, AddressRefused, deadline_client
from apps.core.outbound import deadline as outbound_deadline

URL_MAX_CHARS = 2000
MAX_REDIRECTS = 3
CONTENT_TYPES = {
    "text/plain": "txt",
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "application/json": "json",
    "text/csv": "csv",
    "application/pdf": "pdf",
}
EXTENSION_TYPES = {".txt": "txt", ".text": "txt", ".md": "markdown", ".markdown": "markdown", ".json": "json",
                   ".csv": "csv", ".pdf": "pdf"}


class FetchRefused(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Fetched:
    data: bytes
    file_type: str
    content_type: str
    url: str


def url_parse(url: str):
    """The URL's parts, or FetchRefused `url_invalid` with the reason."""
    if not isinstance(url, str) or not url or len(url) > URL_MAX_CHARS or any(ch.isspace() for ch in url):
        raise FetchRefused("url_invalid", f"A URL of 1–{URL_MAX_CHARS} characters without spaces is required.")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise FetchRefused("url_invalid", "The URL is malformed.") from exc
    if parts.scheme not in ("http", "https"):
        raise FetchRefused("url_invalid", "Only http and https URLs can be registered.")
    if not parts.hostname:
        raise FetchRefused("url_invalid", "The URL has no host.")
    if parts.username is not None or parts.password is not None:
        raise FetchRefused("url_invalid", "A URL with credentials in it is refused; use a public URL.")
    if port == 0:
        raise FetchRefused("url_invalid", "The URL's port is invalid.")
    return parts


def _policy() -> AddressPolicy:
    return AddressPolicy(public_only=True, allowed=settings.KNOWLEDGE_URL_ALLOWED_NETWORKS)


def _refused(exc: AddressRefused) -> FetchRefused:
    if exc.code == "unresolvable":
        return FetchRefused("url_unresolvable", "The URL's host does not resolve.")
    return FetchRefused("url_address_refused", "The URL's host resolves to a private, loopback, link-local or "
                                               "otherwise non-public address, which is refused.")


def addresses_check(addresses: list[str]) -> list[str]:
    """The addresses, if every one may be fetched; FetchRefused `url_address_refused` otherwise."""
    try:
        return _policy().check(addresses)
    except AddressRefused as exc:
        raise _refused(exc) from exc


def url_check(url: str) -> None:
    """Whether `url` may be registered: well formed, and its host resolves only to addresses that
    may be fetched. The worker checks again when it fetches."""
    url_parse(url)
    try:
        outbound.url_addresses(url, _policy())
    except AddressRefused as exc:
        raise _refused(exc) from exc


def filename_for(url: str) -> str:
    """The URL's last path segment, decoded, as an upload's name is kept: without the characters
    that do not print (Django's multipart parser drops them from a file's name), which a
    percent-escape can put in it — NUL, which PostgreSQL cannot store, line breaks, bidi controls."""
    parts = urlsplit(url)
    name = "".join(char for char in posixpath.basename(unquote(parts.path.rstrip("/"))) if char.isprintable())
    return (name or parts.hostname or "document")[:255]


def file_type_guess(url: str) -> str:
    """The file type the URL's name suggests (the fetched content type decides)."""
    extension = posixpath.splitext(urlsplit(url).path.lower())[1]
    return EXTENSION_TYPES.get(extension, "txt")


def _get(client: httpx.Client, url: str, *, deadline: float, max_bytes: int) -> tuple[httpx.Response, bytes]:
    url_parse(url)
    try:
        target = outbound.pinned(url, _policy())
    except AddressRefused as exc:
        raise _refused(exc) from exc
    with client.stream("GET", target.url, headers={**target.headers, "Accept": ", ".join(CONTENT_TYPES)},
                       extensions=target.extensions) as response:
        if response.is_redirect:
            return response, b""
        if response.status_code != 200:
            raise FetchRefused("url_http_error", f"The URL answered HTTP {response.status_code}.")
        declared = response.headers.get("Content-Length")
        if declared and declared.isdigit() and int(declared) > max_bytes:
            raise FetchRefused("url_too_large", f"The URL's content is over the {max_bytes:,}-byte limit.")
        data = bytearray()
        for piece in response.iter_bytes():
            data += piece
            if len(data) > max_bytes:
                raise FetchRefused("url_too_large", f"The URL's content is over the {max_bytes:,}-byte limit.")
            if time.monotonic() > deadline:
                raise FetchRefused("url_timeout", "Fetching the URL took too long.")
        return response, bytes(data)


def url_fetch(url: str) -> Fetched:
    """The content of `url` and its file type, fetched under the rules of this module."""
    timeout = float(settings.KNOWLEDGE_URL_TIMEOUT_SECONDS)
    max_bytes = int(settings.KNOWLEDGE_URL_MAX_BYTES)
    deadline = time.monotonic() + timeout
    origin = url_parse(url).hostname
    current = url
    try:
        with outbound_deadline(deadline), deadline_client(timeout=httpx.Timeout(timeout),
                                                          follow_redirects=False) as client:
            for _hop in range(MAX_REDIRECTS + 1):
                response, data = _get(client, current, deadline=deadline, max_bytes=max_bytes)
                if not response.is_redirect:
                    break
                location = response.headers.get("Location", "")
                following = urljoin(current, location)
                parts = url_parse(following)
                if (parts.hostname or "").lower() != (origin or "").lower():
                    raise FetchRefused("url_redirect_refused", "The URL redirects to another host, which is refused.")
                current = following
            else:
                raise FetchRefused("url_redirect_refused", f"The URL redirects more than {MAX_REDIRECTS} times.")
    except httpx.TimeoutException as exc:
        raise FetchRefused("url_timeout", "Fetching the URL took too long.") from exc
    except httpx.HTTPError as exc:
        raise FetchRefused("url_unreachable", f"The URL could not be fetched ({type(exc).__name__}).") from exc
    media = response.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
    file_type = CONTENT_TYPES.get(media)
    if file_type is None:
        raise FetchRefused("url_content_type_refused",
                           f"The URL's content type {media or '(none)'} is not one of: {', '.join(CONTENT_TYPES)}.")
    if not data:
        raise FetchRefused("document_empty", "The URL's content is empty.")
    return Fetched(data=data, file_type=file_type, content_type=media, url=current)
