"""A real HTTP rerank API on 127.0.0.1 for tests: `POST /v1/rerank` answering
`{results: [{index, relevance_score}]}` — by default the documents in reverse order — unless a
scripted behaviour says otherwise (a status, a delay, a malformed body)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class RerankEndpoint:
    def __init__(self, *, status: int = 200, delay: float = 0.0, body: bytes | None = None):
        self.status, self.delay, self.body = status, delay, body
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append({"path": self.path, **payload})
                endpoint.headers.append(dict(self.headers))
                if endpoint.delay:
                    time.sleep(endpoint.delay)
                if endpoint.body is not None:
                    data = endpoint.body
                else:
                    count = len(payload["documents"])
                    data = json.dumps({"results": [{"index": i, "relevance_score": (i + 1) / count}
                                                   for i in reversed(range(count))],
                                       "usage": {"total_tokens": 7 * count}}).encode()
                try:
                    self.send_response(endpoint.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (a timeout test)
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
