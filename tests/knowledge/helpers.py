"""Small helpers for knowledge tests: uploads as Django would receive them, and waiting on a
document's state (polling the database; no wall-clock assertions)."""

from __future__ import annotations

import time
from pathlib import Path

from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import transaction

from apps.knowledge import ingest, services
from apps.knowledge.models import Document

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def upload(name: str, data: bytes | None = None) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data if data is not None else (FIXTURES / name).read_bytes())


def wait_for(predicate, *, timeout: float = 60.0, interval: float = 0.05, message: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        time.sleep(interval)


def wait_for_status(document_id, *statuses: str, timeout: float = 60.0) -> Document:
    return wait_for(lambda: Document.objects.filter(pk=document_id, status__in=statuses).first(),
                    timeout=timeout, message=f"document {document_id} to be {'/'.join(statuses)}")


class EmbeddingsEndpoint:
    """A real OpenAI-compatible /embeddings server on 127.0.0.1. Answers 200 with deterministic
    vectors (hashing) unless `statuses` scripts the next answers; counts the texts it embedded."""

    def __init__(self, *, dimension: int = 32, statuses: list[int] | None = None):
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from apps.knowledge.pipeline.embedders.hashing import HashingEmbedder

        self.statuses = list(statuses or [])
        self.requests: list[dict] = []
        self.texts: list[str] = []
        hashing = HashingEmbedder(name="endpoint", dimension=dimension)
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append(body)
                status = endpoint.statuses.pop(0) if endpoint.statuses else 200
                if status == 200:
                    endpoint.texts.extend(body["input"])
                    vectors = hashing.embed_documents(body["input"])
                    payload = {"data": [{"index": i, "embedding": v} for i, v in enumerate(vectors)]}
                else:
                    payload = {"error": {"message": f"scripted {status}"}}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
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


def ingest_texts(kb, files: dict[str, str]) -> dict[str, Document]:
    """Upload and ingest in-process. In one transaction, so that in a `transaction=True` test the
    upload's task reaches the broker (and any test worker of this session) only once the
    documents are completed: the worker then skips them instead of racing this process."""
    with transaction.atomic():
        documents = services.document_upload(kb=kb, files=[upload(name, text.encode())
                                                           for name, text in files.items()])
        for document in documents:
            assert ingest.document_ingest(document_id=document.pk) == "completed"
    return {document.filename: Document.objects.get(pk=document.pk) for document in documents}
