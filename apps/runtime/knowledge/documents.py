"""What a document's readable body is in a scope, and its revision.

A document's readable body is the text of its parent chunks in the KB's active generation, in
order, separated by blank lines (children for a document without parents).

A search names each hint's document revision, a hash of the whole body. Reading and hashing a
body costs ~37 ms per MB, in every search that hits the document, so `body_digests` keeps each
body's revision in this process, keyed by a fingerprint of the document's chunk rows in the
scope (each row's id and version, `xmin`, which any write of the row changes): a search then
reads the whole body only the first time, or after the document changed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Q

from apps.core.revisions import revision_of
from apps.knowledge.models import Chunk, Document
from apps.runtime.knowledge.scope import KnowledgeScope

BODY_SEPARATOR = "\n\n"

# The chunks a body is made of: its parents with text, or, for a document without them, its
# enabled children (_fingerprints says which in SQL: `kind = 'parent' AND text <> ''`).
PARENT_SECTIONS = Q(kind=Chunk.Kind.PARENT) & ~Q(text="")
CHILD_SECTIONS = Q(kind=Chunk.Kind.CHILD, disabled=False)


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
    rows = (Chunk.objects.filter(PARENT_SECTIONS, document_id__in=ids, generation_id__in=scope.generation_ids)
            .order_by("document_id", "index").values_list("document_id", "id", "text", "chapter_path"))
    for document_id, chunk_id, text, path in rows:
        pieces.setdefault(document_id, []).append((chunk_id, text, path))
    without_parents = [pk for pk in ids if pk not in pieces]
    if without_parents:
        rows = (Chunk.objects.filter(CHILD_SECTIONS, document_id__in=without_parents,
                                     generation_id__in=scope.generation_ids)
                .order_by("document_id", "index").values_list("document_id", "id", "text", "chapter_path"))
        for document_id, chunk_id, text, path in rows:
            pieces.setdefault(document_id, []).append((chunk_id, text, path))
    return pieces


@dataclass(frozen=True)
class BodyDigest:
    """A document's body without its text: its revision, and whether its sections are its
    parent chunks (else its children), which says which rows a hit may come from."""

    revision: str
    has_parents: bool


# Revisions kept in this process: {(server start, document id, filename, rows, row digest): revision}.
DIGESTS_KEPT = 4096
_digests: OrderedDict[tuple, str] = OrderedDict()
_digests_lock = threading.Lock()


def forget_body_digests() -> None:
    with _digests_lock:
        _digests.clear()


@dataclass(frozen=True)
class _Fingerprints:
    keep: bool  # whether bodies read now may be kept
    server: str  # when the database server started: transaction ids are unique only within that
    documents: dict  # {document id: (rows, row digest, has parents)}


def _fingerprints(document_ids: list, scope: KnowledgeScope) -> _Fingerprints:
    """Every chunk row of the documents in the scope's generations, as a count and a digest of
    each row's id and xmin: a row written, added or removed changes it. A transaction id is
    unique within one server's life (a restore or a failover may hand it out again: the server's
    start time is part of the key), and a transaction that writes a row twice leaves one xmin:
    nothing is kept from inside a transaction that has written (it sees its own rows)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH f AS (SELECT document_id, count(*) AS n, sum(hashtextextended(id::text || ':' || xmin::text, 0)) "
            "AS digest, bool_or(kind = 'parent' AND text <> '') AS has_parents FROM knowledge_chunk "
            "WHERE document_id = ANY(%s::uuid[]) AND generation_id = ANY(%s::uuid[]) GROUP BY document_id) "
            "SELECT txid_current_if_assigned() IS NULL, pg_postmaster_start_time()::text, f.document_id, f.n, "
            "f.digest, f.has_parents FROM (SELECT 1) AS one LEFT JOIN f ON true",
            [document_ids, list(scope.generation_ids)],
        )
        rows = cursor.fetchall()
    return _Fingerprints(keep=rows[0][0], server=rows[0][1], documents={
        document_id: (count, int(digest), has_parents)
        for _keep, _server, document_id, count, digest, has_parents in rows if document_id is not None})


def body_digests(*, documents: dict[Any, Document], scope: KnowledgeScope) -> dict[Any, BodyDigest]:
    """{document id: its body's digest} for `documents` (id → Document with its filename), the
    whole body read only for those this process has not seen in their current state. The
    fingerprint is read before the body: a write between the two leaves the new body under the
    old fingerprint, which no later search finds again."""
    if not documents:
        return {}
    prints = _fingerprints(list(documents), scope)
    keys = {pk: (prints.server, pk, document.filename, *prints.documents.get(pk, (0, 0, False))[:2])
            for pk, document in documents.items()}
    revisions: dict[Any, str] = {}
    with _digests_lock:
        for pk, key in keys.items():
            if key in _digests:
                _digests.move_to_end(key)
                revisions[pk] = _digests[key]
    missing = [pk for pk in documents if pk not in revisions]
    if missing:
        sections = document_sections(document_ids=missing, scope=scope)
        for pk in missing:
            body = BODY_SEPARATOR.join(text for _, text, _ in sections.get(pk, []))
            revisions[pk] = document_revision(title=documents[pk].filename, body=body)
        if prints.keep:
            with _digests_lock:
                for pk in missing:
                    _digests[keys[pk]] = revisions[pk]
                while len(_digests) > DIGESTS_KEPT:
                    _digests.popitem(last=False)
    return {pk: BodyDigest(revision=revision, has_parents=prints.documents.get(pk, (0, 0, False))[2])
            for pk, revision in revisions.items()}


def piece_texts(*, sources: Iterable, digests: dict[Any, BodyDigest], scope: KnowledgeScope) -> dict[tuple, str]:
    """{(document id, chunk id): text} of those `sources` (chunk ids) that are sections of their
    document's body in the scope (document_sections' rule), read by id."""
    ids = list(sources)
    if not ids:
        return {}
    with_parents = [pk for pk, digest in digests.items() if digest.has_parents]
    without = [pk for pk, digest in digests.items() if not digest.has_parents]
    sections = (Q(document_id__in=with_parents) & PARENT_SECTIONS) | (Q(document_id__in=without) & CHILD_SECTIONS)
    rows = (Chunk.objects.filter(sections, pk__in=ids, generation_id__in=scope.generation_ids).order_by()
            .values_list("document_id", "id", "text"))
    return {(document_id, chunk_id): text for document_id, chunk_id, text in rows}


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
