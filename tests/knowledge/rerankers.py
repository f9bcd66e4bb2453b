"""A real HTTP rerank API on 127.0.0.1 for tests: `POST /v1/rerank` answering
`{results: [{index, relevance_score}]}` — by default the documents in reverse order — unless a
scripted behaviour says otherwise (a status, a delay, a malformed body)."""

from __future__ import annotations

import json
import time

from tests.local_server import LocalJSONServer


class RerankEndpoint(LocalJSONServer):
    def __init__(self, *, status: int = 200, delay: float = 0.0, body: bytes | None = None):
        self.status, self.delay, self.body = status, delay, body
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        super().__init__()

    def answer(self, path, payload, headers):
        self.requests.append({"path": path, **payload})
        self.headers.append(headers)
        if self.delay:
            time.sleep(self.delay)
        if self.body is not None:
            return self.status, self.body
        count = len(payload["documents"])
        return self.status, json.dumps({"results": [{"index": i, "relevance_score": (i + 1) / count}
                                                    for i in reversed(range(count))],
                                        "usage": {"total_tokens": 7 * count}}).encode()
