"""What a document's readable body is in a scope, and its revision.

A document's readable body is the text of its parent chunks in the KB's active generation, in
order, separated by blank lines (children for a document without parents).

A search names each hint's document revision, a hash of the whole body. Reading and hashing a
body costs ~37 ms per MB, in every search that hits the document, so `readable_digests` keeps each
body's revision in this process, keyed by the version of the document's chunk rows in the scope
(models.ChunkSetVersion: triggers give it a new number in any statement that writes one of the
rows): a search then reads the whole body only the first time, or after the document changed.
Reading the version is one row whatever the document's size; until 2026-12 it was a digest of
every row's id and xmin, ~170 ms for a document of 100,000 chunks on every search that hit it.
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


@dataclass(frozen=True)
class Sections:
    """A document's body in reading order, [(chunk id, text, chapter path)], and whether these
    are its parent chunks (else its children)."""

    pieces: list[tuple[Any, str, str | None]]
    from_parents: bool


def document_sections(*, document_ids: Iterable, scope: KnowledgeScope) -> dict[Any, Sections]:
    """{document id: its sections} in reading order: the parents of each document in its KB's
    active generation, or its children when it has no parents. A parent's text leaves out what
    only disabled children held (apps.knowledge.chunk_overrides), so a section whose children are
    all disabled is empty and skipped; a disabled child is never read."""
    ids = list(document_ids)
    pieces: dict[Any, list[tuple[Any, str, str | None]]] = {}
    rows = (Chunk.objects.filter(PARENT_SECTIONS, document_id__in=ids, generation_id__in=scope.generation_ids)
            .order_by("document_id", "index").values_list("document_id", "id", "text", "chapter_path"))
    for document_id, chunk_id, text, path in rows:
        pieces.setdefault(document_id, []).append((chunk_id, text, path))
    with_parents = set(pieces)
    without_parents = [pk for pk in ids if pk not in with_parents]
    if without_parents:
        rows = (Chunk.objects.filter(CHILD_SECTIONS, document_id__in=without_parents,
                                     generation_id__in=scope.generation_ids)
                .order_by("document_id", "index").values_list("document_id", "id", "text", "chapter_path"))
        for document_id, chunk_id, text, path in rows:
            pieces.setdefault(document_id, []).append((chunk_id, text, path))
    return {pk: Sections(pieces=found, from_parents=pk in with_parents) for pk, found in pieces.items()}


@dataclass(frozen=True)
class BodyDigest:
    """A document's body without its text: its revision, and whether its sections are its
    parent chunks (else its children), which says which rows a hit may come from."""

    revision: str
    has_parents: bool


# Digests kept in this process: {(server start, document id, filename, versions): BodyDigest}.
DIGESTS_KEPT = 4096
_digests: OrderedDict[tuple, BodyDigest] = OrderedDict()
_digests_lock = threading.Lock()


def forget_body_digests() -> None:
    with _digests_lock:
        _digests.clear()


@dataclass(frozen=True)
class _Versions:
    keep: bool  # whether bodies read now may be kept
    server: str  # when the database server started: a restored database may hand a version out again
    documents: dict  # {document id: (its chunk rows' versions in the scope's generations)}


def _document_loaded(**values: Any) -> Document:
    """A Document as `.only(*values)` loads it: the other fields deferred."""
    # from_db takes the loaded values in the model's field order.
    ordered = [(field.attname, values[field.attname]) for field in Document._meta.concrete_fields
               if field.attname in values]
    return Document.from_db(connection.alias, [name for name, _ in ordered], [value for _, value in ordered])


def _ready_with_versions(document_ids: list, scope: KnowledgeScope) -> tuple[dict[Any, Document], _Versions]:
    """The documents among `document_ids` this scope may read now (in a bound KB, completed), and
    the version of each one's chunk rows in the scope's generations (one per generation that holds
    rows of it), with the server's start. One statement.

    Versions come from a sequence, so one is never handed out twice within a server's life; a
    transaction that has written sees versions no one else may ever see, and nothing is kept from
    inside one."""
    if not document_ids:
        return {}, _Versions(keep=False, server="", documents={})
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT txid_current_if_assigned() IS NULL, pg_postmaster_start_time()::text, "
            "d.id, d.filename, d.knowledge_base_id, v.version "
            "FROM (SELECT 1) AS one LEFT JOIN ("
            " knowledge_document d LEFT JOIN knowledge_chunksetversion v"
            " ON v.document_id = d.id AND v.generation_id = ANY(%s::uuid[])"
            ") ON d.id = ANY(%s::uuid[]) AND d.knowledge_base_id = ANY(%s::uuid[]) AND d.status = %s "
            "ORDER BY d.id, v.generation_id",
            [list(scope.generation_ids), document_ids, scope.knowledge_base_ids, Document.Status.COMPLETED.value],
        )
        rows = cursor.fetchall()
    documents: dict[Any, Document] = {}
    versions: dict[Any, tuple] = {}
    for _keep, _server, document_id, filename, knowledge_base_id, version in rows:
        if document_id is None:
            continue
        if document_id not in documents:
            documents[document_id] = _document_loaded(id=document_id, filename=filename,
                                                      knowledge_base_id=knowledge_base_id)
        if version is not None:
            versions[document_id] = (*versions.get(document_id, ()), version)
    return documents, _Versions(keep=rows[0][0], server=rows[0][1], documents=versions)


def readable_digests(*, document_ids: Iterable, scope: KnowledgeScope
                     ) -> tuple[dict[Any, Document], dict[Any, BodyDigest]]:
    """({document id: Document with its filename}, {document id: its body's digest}) for the
    documents among `document_ids` this scope may read now; the whole body read only for those
    this process has not seen in their current version. The version is read before the body: a
    write between the two leaves the new body under the old version, which no later search finds
    again."""
    documents, versions = _ready_with_versions(list(document_ids), scope)
    keys = {pk: (versions.server, pk, document.filename, versions.documents.get(pk, ()))
            for pk, document in documents.items()}
    digests: dict[Any, BodyDigest] = {}
    with _digests_lock:
        for pk, key in keys.items():
            if key in _digests:
                _digests.move_to_end(key)
                digests[pk] = _digests[key]
    missing = [pk for pk in documents if pk not in digests]
    if missing:
        sections = document_sections(document_ids=missing, scope=scope)
        for pk in missing:
            found = sections.get(pk, Sections(pieces=[], from_parents=False))
            body = BODY_SEPARATOR.join(text for _, text, _ in found.pieces)
            digests[pk] = BodyDigest(revision=document_revision(title=documents[pk].filename, body=body),
                                     has_parents=found.from_parents)
        if versions.keep:
            with _digests_lock:
                for pk in missing:
                    _digests[keys[pk]] = digests[pk]
                while len(_digests) > DIGESTS_KEPT:
                    _digests.popitem(last=False)
    return documents, digests


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
    return _ready_with_versions(list(document_ids), scope)[0]
