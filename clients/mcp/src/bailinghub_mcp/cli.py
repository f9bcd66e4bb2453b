"""`bailinghub-mcp login | logout | status | serve`."""

from __future__ import annotations

import argparse
import logging
import sys
import time
import webbrowser
from pathlib import Path
from urllib.parse import urlsplit

from bailinghub_mcp import __version__, auth, wire
from bailinghub_mcp.credentials import CredentialsError, TokenStore


def _hub_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.username or parts.password:
        raise argparse.ArgumentTypeError("give the hub's base URL, e.g. https://hub.example.com")
    if parts.scheme == "http" and parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise argparse.ArgumentTypeError("plain http is only for a hub on this computer; use https")
    return value.rstrip("/")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="bailinghub-mcp", description=(
        "Use a BailingHub workspace's knowledge and governed tools from any MCP host."))
    top.add_argument("--version", action="version", version=f"bailinghub-mcp {__version__}")
    top.add_argument("--config-dir", type=Path, help="where the tokens are kept (default: the user's config dir)")
    commands = top.add_subparsers(dest="command", required=True)

    login = commands.add_parser("login", help="sign in through the browser (Agent Auth v1, PKCE)")
    login.add_argument("--hub", required=True, type=_hub_url, help="the hub's base URL")
    login.add_argument("--client-app-id", required=True, help="the agent client's public app id")
    login.add_argument("--workspace", required=True, help="the workspace (route key) to use")
    login.add_argument("--no-browser", action="store_true", help="only print the address to open")

    commands.add_parser("logout", help="revoke the session on the hub and delete the local tokens")
    commands.add_parser("status", help="show the stored sign-in (never the tokens)")

    serve = commands.add_parser("serve", help="serve MCP over stdio (the default) or Streamable HTTP")
    serve.add_argument("--http", action="store_true", help="serve Streamable HTTP on 127.0.0.1 instead of stdio")
    serve.add_argument("--port", type=int, default=8765, help="the --http port (default 8765)")
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="bailinghub-mcp: %(message)s")
    store = TokenStore(args.config_dir)

    def say(text: str) -> None:  # stdout belongs to the MCP wire under `serve`; talk on stderr
        print(text, file=sys.stderr, flush=True)

    if args.command == "login":
        try:
            credentials = auth.login(hub=args.hub, client_app_id=args.client_app_id, workspace=args.workspace,
                                     store=store, open_url=None if args.no_browser else webbrowser.open,
                                     announce=say)
        except (auth.LoginError, wire.WireError, wire.HubError) as exc:
            say(f"Sign-in failed: {exc}")
            return 1
        say(f"Signed in to {credentials.hub}, workspace {credentials.workspace!r}; tokens kept in {store.path}.")
        return 0
    if args.command == "logout":
        say(auth.logout(store))
        return 0
    if args.command == "status":
        try:
            credentials = store.load()
        except CredentialsError as exc:
            say(str(exc))
            return 1
        left = int(credentials.refresh_expires_at - time.time())
        say(f"hub: {credentials.hub}\nclient_app_id: {credentials.client_app_id}\nworkspace: {credentials.workspace}\n"
            f"session_id: {credentials.session_id}\nsign-in valid for: {max(0, left) // 86400} day(s)")
        return 0

    from bailinghub_mcp.server import open_bridge, serve_http, serve_stdio

    try:
        session = auth.HubSession(store)
    except CredentialsError as exc:
        say(str(exc))
        return 1
    try:
        bridge = open_bridge(session)
    except auth.SessionExpired as exc:  # as a missing sign-in is said, before any transport starts
        session.close()
        say(str(exc))
        return 1
    try:
        if args.http:
            serve_http(bridge, port=args.port)
        else:
            serve_stdio(bridge)
    finally:
        session.close()
    return 0
