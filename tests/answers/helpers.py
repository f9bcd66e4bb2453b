"""A real OpenAI-compatible chat completions server on 127.0.0.1 for generator tests: it answers
each request with the next scripted reply (content, HTTP status, or a delay) and keeps what it was
sent."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Reply:
    content: str = ""
    status: int = 200
    delay: float = 0.0


class ChatServer:
    def __init__(self, replies: list[Reply]):
        self.replies = list(replies)
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "body": body,
                                        "authorization": self.headers.get("Authorization")})
                reply = server.replies.pop(0) if server.replies else Reply(status=500)
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.status == 200:
                    payload = {"id": "c1", "object": "chat.completion", "model": body.get("model"),
                               "choices": [{"index": 0, "message": {"role": "assistant", "content": reply.content},
                                            "finish_reason": "stop"}],
                               "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
                else:
                    payload = {"error": {"message": f"scripted {reply.status}"}}
                data = json.dumps(payload).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
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


def reply_json(answer: str, citations: list[int], missing: list[str] | None = None) -> Reply:
    return Reply(content=json.dumps({"answer": answer, "citations": citations, "missing_points": missing or []},
                                    ensure_ascii=False))
