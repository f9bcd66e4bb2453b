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


def document_sections(*, document_ids: Iterable, scope: KnowledgeScope
                      ) -> dict[Any, list[tuple[Any, str, str | None]]]:
    """{document id: [(chunk id, text, chapter path)]} in reading order: the parents of each
    document in its KB's active generation, or its children when it has no parents. A parent's
    text leaves out what only disabled children held (apps.knowledge.chunk_overrides), so a
    section whose children are all disabled is empty and skipped; a disabled child is never read."""
    ids = list(document_ids)
    pieces: dict[Any, list[tuple[Any, str, str | None]]] = {}
    rows = (Chunk.objects.filter(document_id__in=ids, generation_id__in=scope.generation_ids, kind=Chunk.Kind.PARENT)
            .exclude(text="").order_by("document_id", "index")
            .values_list("document_id", "id", "text", "chapter_path"))
    for document_id, chunk_id, text, path in rows:
        pieces.setdefault(document_id, []).append((chunk_id, text, path))
    without_parents = [pk for pk in ids if pk not in pieces]
    if without_parents:
        rows = (Chunk.objects.filter(document_id__in=without_parents, generation_id__in=scope.generation_ids,
                                     kind=Chunk.Kind.CHILD, disabled=False)
                .order_by("document_id", "index").values_list("document_id", "id", "text", "chapter_path"))
        for document_id, chunk_id, text, path in rows:
            pieces.setdefault(document_id, []).append((chunk_id, text, path))
    return pieces


def document_pieces(*, document_ids: Iterable, scope: KnowledgeScope) -> dict[Any, list[tuple[Any, str]]]:
    """{document id: [(chunk id, text)]}: document_sections without the chapter paths."""
    return {document_id: [(chunk_id, text) for chunk_id, text, _ in sections]
            for document_id, sections in document_sections(document_ids=document_ids, scope=scope).items()}


def chapter_path_at(sections: list[tuple[Any, str, str | None]], offset: int) -> str | None:
    """The chapter path of the section in which byte `offset` of the document's body (its sections'
    texts joined by BODY_SEPARATOR) falls; an offset on a separator belongs to the next section,
    the end of the body to the last one."""
    start = 0
    separator = len(BODY_SEPARATOR.encode("utf-8"))
    for _, text, path in sections:
        end = start + len(text.encode("utf-8"))
        if offset < end:
            return path
        start = end + separator
    return sections[-1][2] if sections else None


def documents_ready(*, document_ids: Iterable, scope: KnowledgeScope) -> dict[Any, Document]:
    """The documents among `document_ids` this scope may read now: in a bound KB, completed."""
    return {
        document.pk: document
        for document in Document.objects.filter(
            pk__in=list(document_ids), knowledge_base_id__in=scope.knowledge_base_ids,
            status=Document.Status.COMPLETED,
        ).only("id", "filename", "knowledge_base_id")
    }
