"""Small helpers for knowledge tests: uploads as Django would receive them, and waiting on a
document's state (polling the database; no wall-clock assertions)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import transaction

from apps.knowledge import ingest, services
from apps.knowledge.models import Document
from tests.local_server import LocalJSONServer

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


class EmbeddingsEndpoint(LocalJSONServer):
    """A real OpenAI-compatible /embeddings server on 127.0.0.1. Answers 200 with deterministic
    vectors (hashing) unless `statuses` scripts the next answers; counts the texts it embedded."""

    def __init__(self, *, dimension: int = 32, statuses: list[int] | None = None):
        from apps.knowledge.pipeline.embedders.hashing import HashingEmbedder

        self.statuses = list(statuses or [])
        self.requests: list[dict] = []
        self.texts: list[str] = []
        self.hashing = HashingEmbedder(name="endpoint", dimension=dimension)
        super().__init__()

    def answer(self, path, body, headers):
        self.requests.append(body)
        status = self.statuses.pop(0) if self.statuses else 200
        if status == 200:
            self.texts.extend(body["input"])
            vectors = self.hashing.embed_documents(body["input"])
            payload = {"data": [{"index": i, "embedding": v} for i, v in enumerate(vectors)]}
        else:
            payload = {"error": {"message": f"scripted {status}"}}
        return status, json.dumps(payload).encode()


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
