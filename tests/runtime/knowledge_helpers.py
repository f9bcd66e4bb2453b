"""Requests and shortcuts of the agent knowledge tests: documents ingested in-process through the
real pipeline (hashing embedder), and the three endpoints as an agent host calls them. The
fixtures are in knowledge_fixtures (load it with `pytest_plugins`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection, transaction

from apps.knowledge.models import Chunk, Document, DocumentContent, IndexGeneration, KeywordTermStat
from apps.ledger.models import Conversation, MemoryNote, Message, Run
from apps.runtime import knowledge
from apps.runtime.knowledge.documents import readable_body
from apps.runtime.knowledge.references import ref_decode
from tests.agent_auth.helpers import bearer
from tests.knowledge.helpers import ingest_texts as ingest_texts  # re-exported for the agent knowledge tests
from tests.ledger.helpers import post_json

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z

REFUND = ("退款政策：自签收之日起七天内可以无理由退货，商品须保持完好，包装齐全。"
          "超过七天的退货申请需要店长审批，并说明原因。退款会在三个工作日内原路退回。")
DELIVERY = "配送说明：同城订单当天送达，外地订单三到五天送达，偏远地区可能延迟。"
WARRANTY = "保修条款：电器类商品保修一年，人为损坏不在保修范围内，保修需出示发票。"


def _sections(document: Document) -> list[tuple[Any, str, str | None]]:
    """[(chunk id, text, chapter path)] of the readable body's sections as the protocol defines
    them, straight from the rows."""
    generation = IndexGeneration.objects.get(knowledge_base_id=document.knowledge_base_id, status="active")
    parents = Chunk.objects.filter(document=document, generation=generation, kind="parent").order_by("index")
    return list(parents.values_list("id", "text", "chapter_path")) or list(
        Chunk.objects.filter(document=document, generation=generation, kind="child").order_by("index")
        .values_list("id", "text", "chapter_path"))


def document_body(document: Document) -> str:
    """The readable body as the protocol defines it (the sections' texts, each new section under
    its heading lines), from the rows."""
    return readable_body(_sections(document))


def chain_body(document: Document, ref: str) -> str:
    """What the reading chain of `ref` covers: the body from the start of the section the
    reference names (its hit's, its heading lines included) to the end."""
    section_id = ref_decode(ref, at=0)[0].section_id
    sections = _sections(document)
    first = [chunk_id for chunk_id, _, _ in sections].index(section_id)
    body = readable_body(sections)
    before = readable_body(sections[:first])
    return body[len(before) + 2:] if first else body


def capabilities_url(route_key: str) -> str:
    return f"/agent-api/v1/workspaces/{route_key}/knowledge/capabilities"


def search_url(route_key: str) -> str:
    return f"/agent-api/v1/workspaces/{route_key}/knowledge/search"


def read_url(route_key: str) -> str:
    return f"/agent-api/v1/workspaces/{route_key}/knowledge/read"


def get_capabilities(client, token: str, route_key: str, **extra):
    return client.get(capabilities_url(route_key), **bearer(token), **extra)


def search(client, token: str, route_key: str, query: str = "退款政策 七天", **fields: Any):
    return post_json(client, search_url(route_key), {"query": query, **fields}, token)


def read(client, token: str, route_key: str, ref: str, **fields: Any):
    return post_json(client, read_url(route_key), {"ref": ref, **fields}, token)


def first_ref(client, token: str, route_key: str, query: str = "退款政策 七天", **fields: Any) -> str:
    response = search(client, token, route_key, query, **fields)
    assert response.status_code == 200, response.content
    return response.json()["hints"][0]["ref"]


def read_chain(client, token: str, route_key: str, ref: str, **fields: Any) -> list[dict]:
    """Every page of `ref`, following next_cursor; each response checked against its budget."""
    pages, cursor = [], None
    while True:
        body = dict(fields)
        if cursor is not None:
            body["cursor"] = cursor
        response = read(client, token, route_key, ref, **body)
        assert response.status_code == 200, response.content
        assert len(response.content) <= fields.get("max_bytes", knowledge.READ_DEFAULT_BYTES)
        page = response.json()
        pages.append(page)
        cursor = page["next_cursor"]
        if cursor is None:
            return pages


def row_counts() -> dict[str, int]:
    """Rows a knowledge request must never write."""
    models = (Conversation, Message, Run, MemoryNote, Document, DocumentContent, Chunk, IndexGeneration,
              KeywordTermStat)
    return {model.__name__: model.objects.count() for model in models}


@contextmanager
def chunks_locked() -> Iterator[None]:
    """Another connection holds an exclusive lock on the chunk table, as a stuck migration or
    maintenance job would."""
    locked, release = threading.Event(), threading.Event()

    def hold():
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("LOCK TABLE knowledge_chunk IN ACCESS EXCLUSIVE MODE")
                locked.set()
                release.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=hold)
    thread.start()
    assert locked.wait(10)
    try:
        yield
    finally:
        release.set()
        thread.join()
