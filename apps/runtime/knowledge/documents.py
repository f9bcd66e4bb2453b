"""What a document's readable body is in a scope, and its revision.

A document's readable body is the text of its parent chunks in the KB's active generation, in
order, separated by blank lines (children for a document without parents).

A search names each hint's document revision, a hash of the whole body. Reading and hashing a
body costs ~37 ms per MB, in every search that hits the document, so `body_digests` keeps each
body's revision and piece ids in this process, keyed by a fingerprint of the document's chunk
rows in the scope (each row's id and version, `xmin`, which any write of the row changes): a
search then reads the whole body only the first time, or after the document changed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import connection

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


@dataclass(frozen=True)
class BodyDigest:
    """A document's body without its text: its revision and the ids of its pieces (sections)."""

    revision: str
    piece_ids: frozenset


DIGESTS_KEPT = 4096
_digests: OrderedDict[tuple, BodyDigest] = OrderedDict()
_digests_lock = threading.Lock()


def forget_body_digests() -> None:
    with _digests_lock:
        _digests.clear()


def _fingerprints(document_ids: list, scope: KnowledgeScope) -> tuple[dict[Any, tuple[int, int]], bool]:
    """({document id: (rows, digest)} over every chunk row of the document in the scope's
    generations, whether the bodies read now may be kept). A row written, added or removed
    changes the digest, except when one transaction writes a row twice: so nothing is kept from
    inside a transaction that has written (it may see its own uncommitted rows)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT document_id, count(*), sum(hashtextextended(id::text || ':' || xmin::text, 0)), "
            "txid_current_if_assigned() IS NULL "
            "FROM knowledge_chunk WHERE document_id = ANY(%s::uuid[]) AND generation_id = ANY(%s::uuid[]) "
            "GROUP BY document_id",
            [document_ids, list(scope.generation_ids)],
        )
        rows = cursor.fetchall()
    return {document_id: (count, int(digest)) for document_id, count, digest, _ in rows}, all(row[3] for row in rows)


def body_digests(*, documents: dict[Any, Document], scope: KnowledgeScope) -> dict[Any, BodyDigest]:
    """{document id: its body's digest} for `documents` (id → Document with its filename), the
    whole body read only for those this process has not seen in their current state. The
    fingerprint is read before the body: a write between the two leaves the new body under the
    old fingerprint, which no later search finds again."""
    if not documents:
        return {}
    fingerprints, keep = _fingerprints(list(documents), scope)
    keys = {pk: (pk, document.filename, fingerprints.get(pk)) for pk, document in documents.items()}
    found: dict[Any, BodyDigest] = {}
    with _digests_lock:
        for pk, key in keys.items():
            if key in _digests:
                _digests.move_to_end(key)
                found[pk] = _digests[key]
    missing = [pk for pk in documents if pk not in found]
    if missing:
        sections = document_sections(document_ids=missing, scope=scope)
        for pk in missing:
            pieces = sections.get(pk, [])
            body = BODY_SEPARATOR.join(text for _, text, _ in pieces)
            found[pk] = BodyDigest(revision=document_revision(title=documents[pk].filename, body=body),
                                   piece_ids=frozenset(chunk_id for chunk_id, _, _ in pieces))
        if keep:
            with _digests_lock:
                for pk in missing:
                    _digests[keys[pk]] = found[pk]
                while len(_digests) > DIGESTS_KEPT:
                    _digests.popitem(last=False)
    return found


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
