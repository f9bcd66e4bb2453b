"""What a document's readable body is in a scope, and its revision.

A document's readable body is the text of its parent chunks in the KB's active generation, in
order, separated by blank lines (children for a document without parents)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from apps.core.revisions import revision_of
from apps.knowledge.models import Chunk, Document
from apps.runtime.knowledge.scope import KnowledgeScope

BODY_SEPARATOR = "\n\n"


def document_revision(*, title: str, body: str) -> str:
    return revision_of({"title": title, "body": body})


def document_pieces(*, document_ids: Iterable, scope: KnowledgeScope) -> dict[Any, list[tuple[Any, str]]]:
    """{document id: [(chunk id, text)]} in reading order: the parents of each document in its KB's
    active generation, or its children when it has no parents. A parent's text leaves out what
    only disabled children held (apps.knowledge.chunk_overrides), so a section whose children are
    all disabled is empty and skipped; a disabled child is never read."""
    ids = list(document_ids)
    pieces: dict[Any, list[tuple[Any, str]]] = {}
    rows = (Chunk.objects.filter(document_id__in=ids, generation_id__in=scope.generation_ids, kind=Chunk.Kind.PARENT)
            .exclude(text="").order_by("document_id", "index").values_list("document_id", "id", "text"))
    for document_id, chunk_id, text in rows:
        pieces.setdefault(document_id, []).append((chunk_id, text))
    without_parents = [pk for pk in ids if pk not in pieces]
    if without_parents:
        rows = (Chunk.objects.filter(document_id__in=without_parents, generation_id__in=scope.generation_ids,
                                     kind=Chunk.Kind.CHILD, disabled=False)
                .order_by("document_id", "index").values_list("document_id", "id", "text"))
        for document_id, chunk_id, text in rows:
            pieces.setdefault(document_id, []).append((chunk_id, text))
    return pieces


def documents_ready(*, document_ids: Iterable, scope: KnowledgeScope) -> dict[Any, Document]:
    """The documents among `document_ids` this scope may read now: in a bound KB, completed."""
    return {
        document.pk: document
        for document in Document.objects.filter(
            pk__in=list(document_ids), knowledge_base_id__in=scope.knowledge_base_ids,
            status=Document.Status.COMPLETED,
        ).only("id", "filename", "knowledge_base_id")
    }
