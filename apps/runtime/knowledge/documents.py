"""What a document's readable body is in a scope, and its revision.

A document's readable body is the text of its parent chunks in the KB's active generation, in
order, separated by blank lines (children for a document without parents), each section whose
chapter path is not the one before it opened by its heading lines (`section_heading`): a page
that runs from one section into the next shows where the next begins and under which name, as
the document did.

A search names each hint's document revision, a hash of the whole body. Reading and hashing a
body costs ~37 ms per MB, in every search that hits the document, so `readable_digests` keeps each
body's revision in this process, keyed by the version of the document's chunk rows in the scope
(models.ChunkSetVersion: triggers give it a new number in any statement that writes one of the
rows): a search then reads the whole body only the first time, or after the document changed.
Reading the version is one row whatever the document's size; until 2026-12 it was a digest of
every row's id and xmin, ~170 ms for a document of 100,000 chunks on every search that hit it.

A page read (`body_window`) takes the revision from the same kept digest and reads only the
sections the page overlaps, checking in the same statement that the document's versions are still
the digest's; until 2026-12 every page rebuilt and hashed the whole body (bench/README.md, "Pages
of a large document").
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Q

from apps.core.revisions import revision_of
from apps.knowledge.models import Chunk, Document
from apps.knowledge.pipeline.parsers.base import CHAPTER_SEPARATOR
from apps.runtime.knowledge.scope import KnowledgeScope

BODY_SEPARATOR = "\n\n"

# The chunks a body is made of: its parents with text, or, for a document without them, its
# enabled children (_ready_with_versions' callers tell which; _PARENT_SQL and _CHILD_SQL say the
# same in SQL for body_window: the two must stay in step).
PARENT_SECTIONS = Q(kind=Chunk.Kind.PARENT) & ~Q(text="")
CHILD_SECTIONS = Q(kind=Chunk.Kind.CHILD, disabled=False)


def document_revision(*, title: str, body: str) -> str:
    return revision_of({"title": title, "body": body})


HEADING_MARK = "#"


def section_heading(path: str | None, previous: str | None) -> str | None:
    """The heading lines that open a section of chapter path `path` in the readable body, after
    a section of path `previous` (None first): None when the path is the same (a section cut into
    several parents) or there is none; else one Markdown heading line per level the path does
    not share with `previous` ("## 退款时效" after "退货与退款政策 / 七天无理由退货"; "# 退货与退款政策",
    "## 七天无理由退货" first), and its last level alone when it shares them all (text back under
    an outer heading). Lines are separated by a blank line, as Markdown writes them.
    _WINDOW_SQL says the same in SQL: the two must stay in step."""
    levels = path.split(CHAPTER_SEPARATOR) if path else []
    before = previous.split(CHAPTER_SEPARATOR) if previous else []
    if not levels or levels == before:
        return None
    common = 0
    while common < min(len(levels), len(before)) and levels[common] == before[common]:
        common += 1
    first = min(common, len(levels) - 1)
    return BODY_SEPARATOR.join(f"{HEADING_MARK * (depth + 1)} {levels[depth]}" for depth in range(first, len(levels)))


def readable_body(pieces: Iterable[tuple[Any, str, str | None]]) -> str:
    """The readable body of a document's sections [(chunk id, text, chapter path)] in order."""
    return _body_and_headings(pieces)[0]


def _body_and_headings(pieces: Iterable[tuple[Any, str, str | None]]) -> tuple[str, array]:
    """readable_body, and the bytes each section's heading lines add before its text (its heading
    and the separator after it; 0 for none), in order: body_window's offsets."""
    parts: list[str] = []
    heading_bytes = array("I")
    previous: str | None = None
    separator = len(BODY_SEPARATOR.encode("utf-8"))
    for _chunk_id, text, path in pieces:
        heading = section_heading(path, previous)
        parts.append(text if heading is None else heading + BODY_SEPARATOR + text)
        heading_bytes.append(0 if heading is None else len(heading.encode("utf-8")) + separator)
        previous = path
    return BODY_SEPARATOR.join(parts), heading_bytes


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
    # The bytes each section's heading lines add (_body_and_headings), in order: a page's offsets
    # without working the headings out in SQL for every section (27 ms at 3,178 sections). 4 bytes
    # a section.
    heading_bytes: array


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
    """The documents among `document_ids` this scope may read now (in a bound KB, completed, on), and
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
            ") ON d.id = ANY(%s::uuid[]) AND d.knowledge_base_id = ANY(%s::uuid[]) AND d.status = %s AND d.enabled "
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
    documents, digests, _versions = _digests_with_versions(list(document_ids), scope)
    return documents, digests


def _digests_with_versions(document_ids: list, scope: KnowledgeScope
                           ) -> tuple[dict[Any, Document], dict[Any, BodyDigest], _Versions]:
    """readable_digests, with the chunk-set versions the digests were taken at."""
    documents, versions = _ready_with_versions(document_ids, scope)
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
            body, heading_bytes = _body_and_headings(found.pieces)
            digests[pk] = BodyDigest(revision=document_revision(title=documents[pk].filename, body=body),
                                     has_parents=found.from_parents, heading_bytes=heading_bytes)
        if versions.keep:
            with _digests_lock:
                for pk in missing:
                    _digests[keys[pk]] = digests[pk]
                while len(_digests) > DIGESTS_KEPT:
                    _digests.popitem(last=False)
    return documents, digests, versions


@dataclass(frozen=True)
class BodyWindow:
    """Bytes `offset` to `offset + length` of a readable document's body (fewer at its end), with
    what a page of it names: the document, the body's revision and size in bytes, and the chapter
    path of the section byte `offset` falls in: the first section whose text ends after it (its
    heading lines are its own, and an offset on a separator belongs to the section after it), the
    last one at the body's end."""

    document: Document
    revision: str
    total_bytes: int
    chapter_path: str | None
    data: bytes
    offset: int  # where `data` starts in the body: the `offset` asked for, or the section's start


# The sections a window of a body overlaps, in one statement: each section's end in the body's
# bytes from the lengths of those before it (octet_length reads a stored text's size without
# reading the text) and of the heading lines that open it (the digest's heading_bytes, by the
# section's place), the text of the overlapping ones alone with the chapter path of the section
# before each (its heading: section_heading), the body's size, its last section's chapter path,
# the document's chunk-set versions and whether it is still on (the statement's own snapshot:
# turning a document off changes no version).
_WINDOW_SQL = """
    WITH c AS (
        SELECT id, chapter_path, index, octet_length(text) AS text_len,
               row_number() OVER (ORDER BY index) AS n
          FROM knowledge_chunk
         WHERE generation_id = %(generation)s AND document_id = %(document)s AND {sections}
    ), s AS (
        SELECT id, chapter_path, lag(chapter_path) OVER w AS before, len, n,
               sum(len) OVER w + %(separator)s * (n - 1) AS stop
          FROM (SELECT id, chapter_path, index, n,
                       text_len + coalesce((%(headings)s::int[])[n], 0) AS len FROM c) AS t
        WINDOW w AS (ORDER BY index)
    ), at AS (
        SELECT coalesce((SELECT stop - len FROM s WHERE id = %(section)s::uuid), %(offset)s) AS offset
    ), whole AS (
        SELECT count(*) AS sections, coalesce(max(stop), 0) AS total,
               (SELECT chapter_path FROM s ORDER BY n DESC LIMIT 1) AS last_path,
               (SELECT coalesce(array_agg(v.version ORDER BY v.generation_id), '{{}}')
                  FROM knowledge_chunksetversion v
                 WHERE v.document_id = %(document)s AND v.generation_id = ANY(%(generations)s::uuid[])) AS versions,
               coalesce((SELECT d.enabled FROM knowledge_document d WHERE d.id = %(document)s), false) AS enabled
          FROM s
    )
    SELECT whole.versions, whole.sections, whole.total, whole.last_path, whole.enabled, at.offset,
           p.n, p.stop - p.len, p.before, c.text, p.chapter_path
      FROM whole CROSS JOIN at LEFT JOIN (s p JOIN knowledge_chunk c ON c.id = p.id)
        ON p.stop > at.offset AND p.stop - p.len - %(separator)s < at.offset + %(length)s
     ORDER BY p.n
"""
_PARENT_SQL = "kind = 'parent' AND text <> ''"  # PARENT_SECTIONS
_CHILD_SQL = "kind = 'child' AND NOT disabled"  # CHILD_SECTIONS


def body_window(*, document_id: Any, scope: KnowledgeScope, offset: int, length: int,
                section_id: Any = None) -> BodyWindow | None:
    """Bytes `offset` to `offset + length` (length > 0) of the document's readable body in the
    scope — from the start of section `section_id` instead, when given and still one of the body's
    sections (a rebuild that left the body as it was gives its sections new ids: then `offset`);
    None when the document is not readable now (not ready, off, no sections) or changed since its
    digest's version.

    The revision is the digest this process keeps (readable_digests): when it has none for the
    document's current version (its first read here, after eviction, or inside a transaction that
    has written) the whole body is read and hashed first, as a search does. Then one statement
    reads every section's length and chapter path (not its text) and the text of the sections the
    window overlaps, with the document's versions: that they equal the digest's is what makes the
    page the revision's, so this trusts the chunk-set version triggers as searches do (a write that
    bypasses them, with triggers disabled, would go unseen)."""
    if length <= 0:
        raise ValueError("a window has at least one byte")
    documents, digests, versions = _digests_with_versions([document_id], scope)
    if document_id not in documents:
        return None
    # Its KB's active generation: the position index (generation, document, kind, index) then
    # hands the sections over in order.
    knowledge_base_id = documents[document_id].knowledge_base_id
    generation = next((kb.active_generation_id for kb in scope.knowledge_bases if kb.pk == knowledge_base_id), None)
    if generation is None:
        return None
    digest = digests[document_id]
    separator = BODY_SEPARATOR.encode("utf-8")
    with connection.cursor() as cursor:
        cursor.execute(
            _WINDOW_SQL.format(sections=_PARENT_SQL if digest.has_parents else _CHILD_SQL),
            {"separator": len(separator), "document": document_id, "generation": generation,
             "generations": list(scope.generation_ids), "offset": offset, "length": length,
             "section": section_id, "headings": list(digest.heading_bytes)},
        )
        rows = cursor.fetchall()
    found_versions, sections, total, last_path, enabled, offset = rows[0][:6]
    if (not enabled or not sections or tuple(found_versions) != versions.documents.get(document_id, ())
            or sections != len(digest.heading_bytes)):
        return None  # turned off since, no sections, or rows written since the digest's version
    pieces, base, path = [], None, last_path
    for *_whole, n, start, before, text, chapter_path in rows:
        if n is None:
            break
        if base is None:
            # The first overlapping section holds `offset` (or follows the separator it is on).
            base, path = (start - len(separator) if n > 1 else start), chapter_path
        if n > 1:
            pieces.append(separator)
        heading = section_heading(chapter_path, before)
        if heading is not None:
            pieces.append(heading.encode("utf-8") + separator)
        pieces.append(text.encode("utf-8"))
    data = b"".join(pieces)[offset - base:][:length] if base is not None else b""
    return BodyWindow(document=documents[document_id], revision=digest.revision, total_bytes=total,
                      chapter_path=path, data=data, offset=offset)


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
