"""A real OpenAI-compatible chat completions server on 127.0.0.1 for generator tests: it answers
each request with the next scripted reply (content, HTTP status, or a delay) and keeps what it was
sent."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from tests.local_server import LocalJSONServer


@dataclass
class Reply:
    content: str = ""
    status: int = 200
    delay: float = 0.0


class ChatServer(LocalJSONServer):
    def __init__(self, replies: list[Reply]):
        self.replies = list(replies)
        self.requests: list[dict] = []
        super().__init__()

    def answer(self, path, body, headers):
        self.requests.append({"path": path, "body": body, "authorization": headers.get("Authorization")})
        reply = self.replies.pop(0) if self.replies else Reply(status=500)
        if reply.delay:
            time.sleep(reply.delay)
        if reply.status == 200:
            payload = {"id": "c1", "object": "chat.completion", "model": body.get("model"),
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": reply.content},
                                    "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
        else:
            payload = {"error": {"message": f"scripted {reply.status}"}}
        return reply.status, json.dumps(payload).encode()


def reply_json(answer: str, citations: list[int], missing: list[str] | None = None) -> Reply:
    return Reply(content=json.dumps({"answer": answer, "citations": citations, "missing_points": missing or []},
                                    ensure_ascii=False))
