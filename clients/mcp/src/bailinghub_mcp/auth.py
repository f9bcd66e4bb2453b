"""Agent Auth v1 as a native app: PKCE (S256), a one-shot loopback listener on 127.0.0.1 with a
random port, the user's browser for the approval, the code exchanged once; then access tokens
refreshed 30 s before they expire, each refresh rotating the refresh token."""

from __future__ import annotations

import base64
import hashlib
import html
import http.server
import re
import secrets
import socket
import threading
import time
import webbrowser
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from bailinghub_mcp import wire
from bailinghub_mcp.credentials import Credentials, CredentialsError, TokenStore

REFRESH_MARGIN_SECONDS = 30
CALLBACK_PATH = "/callback"
CALLBACK_IDLE_SECONDS = 30
ROUTE_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{1,63}$")


class LoginError(Exception):
    pass


def pkce_pair() -> tuple[str, str]:
    """(verifier, S256 challenge): 43 base64url characters each."""
    verifier = base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode()
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def device_label() -> str:
    return f"bailinghub-mcp on {socket.gethostname() or 'this computer'}"[:128]


class LoopbackListener:
    """Waits for the one redirect the browser brings back. Only the first request on the callback
    path carrying this login's `state` counts; anything else is answered 400 and ignored (a page
    that guessed the port cannot finish, or break, the login)."""

    def __init__(self, state: str) -> None:
        self.state = state
        self.result: dict[str, str] | None = None
        self.done = threading.Event()
        taking = threading.Lock()
        listener = self

        class Handler(http.server.BaseHTTPRequestHandler):
            timeout = CALLBACK_IDLE_SECONDS  # a connection that sends nothing is dropped

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = {key: values[0] for key, values in parse_qs(parts.query).items() if len(values) == 1}
                with taking:
                    # Bytes: compare_digest raises on a str with non-ASCII characters.
                    if parts.path != CALLBACK_PATH or listener.result is not None or not secrets.compare_digest(
                            query.get("state", "").encode(), listener.state.encode()):
                        self._answer(400, "This is not the sign-in this program is waiting for.")
                        return
                    listener.result = query
                # The browser's page is written before the login goes on: a denied login ends the
                # program at once, which cut the page off ("connection closed", not the reason).
                try:
                    if "code" in query:
                        self._answer(200, "Signed in to BailingHub. You can close this window.")
                    else:
                        self._answer(200, "The sign-in was not approved. You can close this window.")
                finally:
                    listener.done.set()

            def _answer(self, status: int, text: str) -> None:
                body = f"<!doctype html><meta charset=utf-8><title>bailinghub-mcp</title><p>{html.escape(text)}"
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # the callback URL holds the code
                pass

        # A thread per connection: browsers open speculative connections they may never use, and one
        # connection at a time kept the callback waiting behind such an idle one.
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.redirect_uri = f"http://127.0.0.1:{self.server.server_port}{CALLBACK_PATH}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def wait(self, timeout: float) -> dict[str, str] | None:
        self.done.wait(timeout)
        return self.result

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def login(*, hub: str, client_app_id: str, workspace: str, store: TokenStore,
          open_url: Callable[[str], object] | None = webbrowser.open,
          announce: Callable[[str], None] = print, transport: httpx.BaseTransport | None = None,
          timeout: float | None = None) -> Credentials:
    """The whole authorization; stores the tokens and returns them. `open_url=None` only prints
    the URL (for a machine without a browser: open it anywhere that reaches the hub)."""
    if not ROUTE_RE.fullmatch(workspace) or workspace == "auto":
        raise LoginError(f"{workspace!r} is not a workspace route key.")
    verifier, challenge = pkce_pair()
    state = secrets.token_urlsafe(24)
    listener = LoopbackListener(state)
    try:
        with wire.new_client(hub, transport=transport) as client:
            try:
                created = wire.send(client, "POST", "/agent-auth/v1/authorizations", expect=201, json_body={
                    "client_app_id": client_app_id, "redirect_uri": listener.redirect_uri, "state": state,
                    "requested_routes": [workspace], "device_label": device_label(),
                    "code_challenge": challenge, "code_challenge_method": "S256",
                }).body or {}
            except wire.HubError as exc:
                raise LoginError(f"The hub refused the sign-in request: {exc.code} {exc.message}") from None
            url = created.get("authorization_url")
            expires_in = created.get("expires_in")
            if not isinstance(url, str) or not url.startswith(("https://", "http://")) or not isinstance(
                    expires_in, int):
                raise LoginError("The hub's authorization answer has no usable authorization_url.")
            announce(f"Open this address to approve bailinghub-mcp for workspace {workspace!r}:\n{url}")
            if open_url is not None:
                try:
                    open_url(url)
                except Exception as exc:  # no browser is fine: the URL was printed
                    announce(f"(could not open a browser: {type(exc).__name__})")
            received = listener.wait(timeout if timeout is not None else float(expires_in))
            if received is None:
                raise LoginError("No approval arrived before the authorization expired.")
            if "code" not in received:
                raise LoginError(f"The sign-in was not approved ({received.get('error', 'no code')}).")
            try:
                tokens = wire.send(client, "POST", "/agent-auth/v1/token", json_body={
                    "grant_type": "authorization_code", "client_app_id": client_app_id, "code": received["code"],
                    "redirect_uri": listener.redirect_uri, "code_verifier": verifier,
                }).body or {}
            except wire.HubError as exc:
                raise LoginError(f"The hub refused the code: {exc.code} {exc.message}") from None
    finally:
        listener.close()
    credentials = _credentials_from(tokens, hub=hub, client_app_id=client_app_id, workspace=workspace)
    store.save(credentials)
    return credentials


def _credentials_from(tokens: dict[str, Any], *, hub: str, client_app_id: str, workspace: str,
                      session_id: str | None = None) -> Credentials:
    """Token answers as the wire rules state them, or an error: `Bearer`, integer lifetimes, the
    same session and client on a refresh."""
    access, refresh = tokens.get("access_token"), tokens.get("refresh_token")
    expires_in, refresh_expires_in = tokens.get("expires_in"), tokens.get("refresh_expires_in")
    if (tokens.get("token_type") != "Bearer" or not isinstance(access, str) or not isinstance(refresh, str)
            or type(expires_in) is not int or type(refresh_expires_in) is not int
            or not isinstance(tokens.get("session_id"), str) or tokens.get("client_app_id") != client_app_id):
        raise wire.WireError("malformed_token_answer", "The hub's token answer does not have the contract's shape.")
    if session_id is not None and tokens["session_id"] != session_id:
        raise wire.WireError("malformed_token_answer", "A refresh answered for another session.")
    now = time.time()
    return Credentials(hub=hub, client_app_id=client_app_id, workspace=workspace,
                       session_id=tokens["session_id"], access_token=access, access_expires_at=now + expires_in,
                       refresh_token=refresh, refresh_expires_at=now + refresh_expires_in)


class SessionExpired(Exception):
    """The hub no longer accepts this sign-in: `bailinghub-mcp login` again."""


class HubSession:
    """Bearer calls to the agent API for one stored sign-in. Refreshes 30 s before expiry; on a
    401 refreshes once and sends the same request again (the hub's idempotency keys make that
    safe, POSTs included)."""

    def __init__(self, store: TokenStore, *, transport: httpx.BaseTransport | None = None) -> None:
        self.store = store
        self.credentials = store.load()
        self.client = wire.new_client(self.credentials.hub, transport=transport)
        self.lock = threading.Lock()

    @property
    def workspace(self) -> str:
        return self.credentials.workspace

    def close(self) -> None:
        self.client.close()

    def call(self, method: str, path: str, *, json_body: Any = None, expect: int = 200, schema: str | None = None,
             headers: dict[str, str] | None = None) -> wire.Answer:
        token = self._token()
        try:
            return wire.send(self.client, method, path, json_body=json_body, token=token, expect=expect,
                             schema=schema, headers=headers)
        except wire.HubError as exc:
            if exc.status != 401:
                raise
        token = self._token(force_refresh_of=token)
        try:
            return wire.send(self.client, method, path, json_body=json_body, token=token, expect=expect,
                             schema=schema, headers=headers)
        except wire.HubError as exc:
            if exc.status == 401:
                raise SessionExpired("The hub refused the refreshed token; run `bailinghub-mcp login` again.") from None
            raise

    def _token(self, *, force_refresh_of: str | None = None) -> str:
        """The access token for a call. A refresh that fails is reported as not sent: the call itself
        never ran (it was not made, or refused as unauthorized), whatever became of the refresh."""
        try:
            return self.access_token(force_refresh_of=force_refresh_of)
        except wire.HubError as exc:
            detail = f"the hub answered {exc.status} {exc.code}"
        except wire.WireError as exc:
            detail = exc.message
        raise wire.WireError("refresh_failed", f"The access token could not be refreshed ({detail}); the request "
                             "was not run.") from None

    def access_token(self, *, force_refresh_of: str | None = None) -> str:
        with self.lock:
            current = self.credentials
            if force_refresh_of is None and time.time() < current.access_expires_at - REFRESH_MARGIN_SECONDS:
                return current.access_token
            with self.store.locked():
                try:
                    stored = self.store.load()
                except CredentialsError:
                    raise SessionExpired("Signed out: run `bailinghub-mcp login` again.") from None
                # Another process may have rotated already: its tokens are ours too.
                fresh = stored.access_token != (force_refresh_of or current.access_token)
                if stored.session_id == current.session_id and fresh and (
                        time.time() < stored.access_expires_at - REFRESH_MARGIN_SECONDS):
                    self.credentials = stored
                    return stored.access_token
                self.credentials = self._refresh(stored)
                return self.credentials.access_token

    def _refresh(self, stored: Credentials) -> Credentials:
        if time.time() >= stored.refresh_expires_at:
            raise SessionExpired("The sign-in has expired; run `bailinghub-mcp login` again.")
        try:
            tokens = wire.send(self.client, "POST", "/agent-auth/v1/token", json_body={
                "grant_type": "refresh_token", "client_app_id": stored.client_app_id,
                "refresh_token": stored.refresh_token}).body or {}
        except wire.HubError as exc:
            if exc.status in (400, 401):
                # The stored refresh token is dead (revoked, or its session ended): forget the sign-in,
                # so `status` says so instead of "valid for 29 days". The store is locked (access_token).
                self.store.delete()
                raise SessionExpired(f"The hub ended this sign-in ({exc.code}); run `bailinghub-mcp login` "
                                     "again.") from None
            raise
        refreshed = _credentials_from(tokens, hub=stored.hub, client_app_id=stored.client_app_id,
                                      workspace=stored.workspace, session_id=stored.session_id)
        self.store.save(refreshed)  # atomically, before the new access token is used
        return refreshed


def logout(store: TokenStore, *, transport: httpx.BaseTransport | None = None) -> str:
    """Revokes the session on the hub (by refresh token, which works even when the access token
    has expired), then deletes the stored tokens whatever the hub said. Under the store's lock: a
    server's refresh under way saves its rotated pair first, and none saves one after the delete."""
    if not store.path.exists():  # nothing to lock for (the lock would create the directory)
        return "Not signed in."
    with store.locked():
        try:
            credentials = store.load()
        except CredentialsError:
            return "Not signed in."
        outcome = "revoked on the hub"
        try:
            with wire.new_client(credentials.hub, transport=transport) as client:
                answer = wire.send(client, "POST", "/agent-auth/v1/revoke", json_body={
                    "client_app_id": credentials.client_app_id, "refresh_token": credentials.refresh_token})
                if (answer.body or {}).get("revoked") is not True:
                    outcome = "the hub did not confirm the revocation"
        except wire.HubError as exc:
            outcome = f"the hub refused the revocation ({exc.code}); it may have ended already"
        except wire.WireError as exc:
            outcome = f"the hub could not be reached ({exc.reason}); the session ends when it expires"
        store.delete()
    return f"Signed out: {outcome}; local tokens deleted."
