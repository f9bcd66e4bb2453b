"""A hub played by a script over real HTTP, for what the live hub cannot be made to do on cue:
lose an answer, time out, answer 401 to a valid token. Answers the bootstrap, the knowledge
capabilities, a turn and token refreshes by itself; `script[(method, path)]` lists the next
answers of any path as (status, body) or (delay_seconds, status, body)."""

from __future__ import annotations

import http.server
import json
import threading
import time
from pathlib import Path
from typing import Any

from bailinghub_mcp.credentials import Credentials, TokenStore

from tests.local_server import SHUTDOWN_POLL_SECONDS

REVISION = "a" * 64
RUN_ID = "6f1c1b7e-5d2a-4c1e-9a53-0d1f6f3f2b10"
LOOKUP = {"name": "lookup_product", "description": "Find a product.", "scope": "shop.catalog.read", "risk": "low",
          "approval_required": False, "readonly": True, "idempotent": True,
          "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}
REFUND = {**LOOKUP, "name": "issue_refund", "description": "Refund an order.", "risk": "high",
          "approval_required": True, "readonly": False,
          "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}}}


class ScriptedHub:
    def __init__(self) -> None:
        self.script: dict[tuple[str, str], list[tuple]] = {}
        self.requests: list[tuple[str, str, dict[str, Any] | None, str]] = []
        self.refreshes = 0
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw) if raw else None
                hub.requests.append((self.command, self.path, body, self.headers.get("Authorization", "")))
                answer = hub.answer(self.command, self.path, body)
                delay, status, payload = answer if len(answer) == 3 else (0, *answer)
                time.sleep(delay)
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_POST = _handle

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS},
                         daemon=True).start()

    def answer(self, method: str, path: str, body: Any) -> tuple:
        queued = self.script.get((method, path))
        if queued:
            return queued.pop(0)
        if path == "/agent-auth/v1/token":
            self.refreshes += 1
            return 200, {"token_type": "Bearer", "access_token": f"bha_refreshed{self.refreshes}", "expires_in": 900,
                         "refresh_token": f"bhr_refreshed{self.refreshes}", "refresh_expires_in": 86400,
                         "session_id": "s-1", "client_app_id": "app-1"}
        if path.endswith("/bootstrap"):
            return 200, {"schema_version": "bailing.agent-runtime-profile.v1",
                         "workspace": {"route": "shop", "name": "Shop", "description": ""},
                         "profile": {"instructions": "Be brief."}, "capabilities": {"revision": REVISION}}
        if path.endswith("/knowledge/capabilities"):
            return 200, {"schema_version": "bailing.agent-knowledge-capabilities.v1", "supported": True,
                         "delivery_modes": ["inline", "on_demand"]}
        if path.endswith("/turns"):
            return 200, {"schema_version": "bailing.agent-turn-context.v1", "run_id": RUN_ID,
                         "capability_revision": REVISION, "active_tools": [LOOKUP, REFUND]}
        if path.startswith("/agent-api/v1/runs/"):
            return 200, {"schema_version": "bailing.agent-run-completion.v1", "run_id": RUN_ID, "status": "completed"}
        return 404, {"error": "not_found", "message": "not scripted"}

    def sent(self, method: str, path: str) -> list[dict[str, Any] | None]:
        return [body for m, p, body, _ in self.requests if (m, p) == (method, path)]

    def wait_for(self, method: str, path: str, *, timeout: float = 30) -> None:
        """Until the hub has received a request to (method, path): a client that holds a lock while
        it waits for the answer holds it from then on, however late its thread was scheduled."""
        deadline = time.monotonic() + timeout
        while not self.sent(method, path):
            assert time.monotonic() < deadline, f"no {method} {path} reached the hub in {timeout} s"
            time.sleep(0.01)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def signed_in_store(directory: Path, hub: ScriptedHub) -> TokenStore:
    store = TokenStore(directory)
    store.save(Credentials(hub=hub.url, client_app_id="app-1", workspace="shop", session_id="s-1",
                           access_token="bha_first", access_expires_at=time.time() + 900,
                           refresh_token="bhr_first", refresh_expires_at=time.time() + 86400))
    return store
