"""Writing chunks, cached embeddings and vectors: the database side of the pipeline.

Nothing here decides a document's state (apps.knowledge.ingest and rebuild do); these functions
are the idempotent building blocks they call inside their transactions and locks.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable

from django.db import connection

from apps.knowledge.models import Chunk, ChunkWindow, Document, EmbeddingCache, EmbeddingModel, IndexGeneration
from apps.knowledge.pipeline.chunkers import ChildPiece, ChunkedDocument
from apps.knowledge.pipeline.strategy import strategy_from_snapshot
from apps.knowledge.pipeline.terms import keyword_terms, term_frequencies
from apps.knowledge.pipeline.windows import window_spans

_CHUNK_NAMESPACE = uuid.UUID("4f6b1c1e-7a51-4d55-9a3f-1f0e8f5d2c11")


def chunk_id(*, generation_id, document_id, kind: str, index: int) -> uuid.UUID:
    """Deterministic: the same chunk position always has the same id."""
    return uuid.uuid5(_CHUNK_NAMESPACE, f"{generation_id}:{document_id}:{kind}:{index}")


def embedding_text(*, text: str, chapter_path: str | None) -> str:
    """What is embedded and keyword-indexed for a child: its breadcrumb, then its text. The
    breadcrumb lets a question about a section find the section's passages."""
    return f"{chapter_path}\n{text}" if chapter_path else text


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _child_metadata(child: ChildPiece) -> dict:
    metadata: dict = {}
    if child.start is not None:
        metadata["parent_start"] = child.start
        metadata["parent_end"] = child.end
    if child.pages:
        metadata["pages"] = list(child.pages)
    return metadata


def chunks_exist(*, generation: IndexGeneration, document: Document) -> bool:
    return Chunk.objects.filter(generation=generation, document=document).exists()


def chunks_create(*, generation: IndexGeneration, document: Document, chunked: ChunkedDocument) -> int:
    """Insert a document's chunks in a generation (the caller holds the document's lock and has
    checked there are none). Children have no vector yet. Returns the number of children."""
    parents = [
        Chunk(
            id=chunk_id(generation_id=generation.pk, document_id=document.pk, kind=Chunk.Kind.PARENT,
                        index=parent.index),
            generation=generation, document=document, kind=Chunk.Kind.PARENT, index=parent.index,
            text=parent.text, chapter_path=parent.chapter_path,
            metadata={"pages": list(parent.pages)} if parent.pages else {},
        )
        for parent in chunked.parents
    ]
    children = []
    for child in chunked.children:
        parent_id = None
        if child.parent_index is not None:
            parent_id = parents[child.parent_index].id
        children.append(Chunk(
            id=chunk_id(generation_id=generation.pk, document_id=document.pk, kind=Chunk.Kind.CHILD,
                        index=child.index),
            generation=generation, document=document, kind=Chunk.Kind.CHILD, index=child.index,
            parent_id=parent_id, text=child.text, chapter_path=child.chapter_path,
            metadata=_child_metadata(child),
            text_hash=text_hash(embedding_text(text=child.text, chapter_path=child.chapter_path)),
        ))
    Chunk.objects.bulk_create(parents, batch_size=500)
    Chunk.objects.bulk_create(children, batch_size=500)
    width = strategy_from_snapshot(generation.chunk_strategy).window_chars
    ChunkWindow.objects.bulk_create(
        [window for child in children for window in windows_cut(child, width=width)], batch_size=2000)
    return len(children)


# Sentence windows (pipeline.windows): cut when their child is created or its text changes, and
# given their vectors and keyword terms whenever the child is. They add no term statistics: a
# window's BM25 uses its generation's (measured the same within 0.001 nDCG@10 as the windows' own).


def windows_cut(chunk: Chunk, *, width: int) -> list[ChunkWindow]:
    """A child's windows (unsaved), each keyed by the hash of its text under the chapter path."""
    return [
        ChunkWindow(chunk=chunk, index=index, start=start, end=end,
                    text_hash=text_hash(embedding_text(text=chunk.text[start:end], chapter_path=chunk.chapter_path)))
        for index, (start, end) in enumerate(window_spans(chunk.text, width))
    ]


def window_width(generation_id) -> int:
    """The window width a generation was built with (0: none)."""
    snapshot = IndexGeneration.objects.filter(pk=generation_id).values_list("chunk_strategy", flat=True).first()
    return strategy_from_snapshot(snapshot).window_chars if snapshot else 0


def windows_recut(chunk: Chunk) -> int:
    """Replace a child's windows with those of its current text (without vectors or terms: the
    caller writes them with windows_write when the child is indexed). Returns how many it has."""
    ChunkWindow.objects.filter(chunk=chunk).delete()
    return len(ChunkWindow.objects.bulk_create(windows_cut(chunk, width=window_width(chunk.generation_id))))


def _window_rows(children: Iterable[tuple]) -> list[tuple]:
    """(window id, text hash, embedded text) of the windows of `children` ((id, text, chapter_path))."""
    by_id = {chunk_id: (text, path) for chunk_id, text, path in children}
    rows = []
    for pk, chunk_id, start, end, digest in ChunkWindow.objects.filter(chunk_id__in=list(by_id)).values_list(
            "id", "chunk_id", "start", "end", "text_hash"):
        text, path = by_id[chunk_id]
        rows.append((pk, digest, embedding_text(text=text[start:end], chapter_path=path)))
    return rows


def windows_write(*, children: Iterable[tuple], model: EmbeddingModel | None) -> int:
    """Give the windows of `children` ((id, text, chapter_path)) their keyword terms and, with
    `model`, their cached vectors. Returns the windows updated."""
    rows = _window_rows(children)
    if not rows:
        return 0
    ids = [pk for pk, _, _ in rows]
    terms = [search_terms_literal(text) for _, _, text in rows]
    with connection.cursor() as cursor:
        if model is None:
            cursor.execute(
                "UPDATE knowledge_chunkwindow AS w SET search_vector = v.terms::tsvector "
                "FROM unnest(%s::bigint[], %s::text[]) AS v(id, terms) WHERE w.id = v.id",
                [ids, terms],
            )
        else:
            cursor.execute(
                "UPDATE knowledge_chunkwindow AS w SET embedding = e.embedding, search_vector = v.terms::tsvector "
                "FROM unnest(%s::bigint[], %s::text[]) AS v(id, terms), knowledge_embeddingcache AS e "
                "WHERE w.id = v.id AND e.embedding_model_id = %s AND e.text_hash = w.text_hash",
                [ids, terms, model.pk],
            )
        return cursor.rowcount


def child_texts(*, document_id, generation_ids: Iterable) -> dict[str, str]:
    """{text_hash: embedded text} of a document's children in these generations, and of their
    windows."""
    rows = list(Chunk.objects.filter(
        document_id=document_id, generation_id__in=list(generation_ids), kind=Chunk.Kind.CHILD
    ).values_list("id", "text_hash", "text", "chapter_path"))
    texts = {digest: embedding_text(text=text, chapter_path=path) for _, digest, text, path in rows}
    texts.update({digest: text for _, digest, text in _window_rows((pk, text, path) for pk, _, text, path in rows)})
    return texts


def cache_missing(*, model: EmbeddingModel, hashes: Iterable[str]) -> set[str]:
    """Which of these text hashes have no cached vector for `model`."""
    wanted = set(hashes)
    present: set[str] = set()
    pending = sorted(wanted)
    for start in range(0, len(pending), 5000):
        present.update(EmbeddingCache.objects.filter(
            embedding_model=model, text_hash__in=pending[start : start + 5000]
        ).values_list("text_hash", flat=True))
    return wanted - present


def cache_store(*, model: EmbeddingModel, vectors: dict[str, list[float]]) -> None:
    EmbeddingCache.objects.bulk_create(
        [EmbeddingCache(embedding_model=model, text_hash=digest, embedding=vector)
         for digest, vector in vectors.items()],
        ignore_conflicts=True,
    )


# Keyword index. A child's search_vector holds its distinct keyword terms plus one lexeme naming
# its generation ('#g' + hex id; '#' never occurs in a term), so a keyword query intersects a
# term's posting list with its generations' inside the GIN index. Each term's one position is
# its frequency in the chunk (pipeline.terms.term_frequencies; a tsvector position holds up to
# 16,383), so a search reads a candidate's frequencies from the row instead of recounting its
# text; the generation lexeme has none. Per-generation document
# frequencies live in KeywordTermStat and change in the same statement as the vectors:
# a chunk is counted when its search_vector goes from NULL to set, and uncounted when deleted.
_STATS_FROM = """
    counts AS (
        SELECT generation_id, term, count(*)::bigint AS df
          FROM {rows}, unnest(tsvector_to_array(search_vector)) AS term
         WHERE left(term, 1) <> '#'
         GROUP BY 1, 2
        UNION ALL
        SELECT generation_id, '#n', count(*)::bigint FROM {rows} GROUP BY 1
        UNION ALL
        SELECT generation_id, '#len', sum(length(search_vector) - 1)::bigint FROM {rows} GROUP BY 1
    )"""


def stats_counts_sql(rows: str) -> str:
    """The `counts` CTE (generation_id, term, df) over a CTE `rows` of (generation_id, search_vector)."""
    return _STATS_FROM.format(rows=rows).strip()


# Adds the `counts` CTE's figures to the stored ones (here, in stats_add, and in chunk_overrides).
STATS_ADD_SQL = """INSERT INTO knowledge_keywordtermstat (generation_id, term, df)
    SELECT generation_id, term, df FROM counts ORDER BY generation_id, term
    ON CONFLICT (generation_id, term) DO UPDATE SET df = knowledge_keywordtermstat.df + EXCLUDED.df"""


def stats_add(*, rows_sql: str, params: list) -> None:
    """Count the search vectors `rows_sql` selects (generation_id, search_vector) into the term
    statistics, for chunks written by SQL of the caller's own (bench_retrieval's distractors)."""
    with connection.cursor() as cursor:
        cursor.execute(f"WITH rows AS ({rows_sql}), {stats_counts_sql('rows')} {STATS_ADD_SQL}", params)


def generation_lexeme(generation_id) -> str:
    return "#g" + uuid.UUID(str(generation_id)).hex


_MAX_POSITION = 16_383


def search_terms_literal(text: str) -> str:
    """`text`'s distinct keyword terms as tsvector input, each with its frequency as its position:
    "'国家':2 '家':3 …"."""
    terms = list(dict.fromkeys(keyword_terms(text)))
    tf = term_frequencies(text, terms)
    return " ".join(
        "'" + term.replace("\\", "\\\\").replace("'", "''") + f"':{min(_MAX_POSITION, max(1, tf[term]))}"
        for term in terms
    )


def search_terms(rows: Iterable[tuple[str, str | None]]) -> list[str]:
    """Each (text, chapter_path)'s search_terms_literal, over what is embedded."""
    return [search_terms_literal(embedding_text(text=text, chapter_path=path)) for text, path in rows]


# A chunk `c`'s search_vector from `v.terms` (one of search_terms' literals) and its generation's
# lexeme, in the UPDATEs here and in chunk_overrides.
SEARCH_VECTOR_SQL = ("(v.terms::tsvector "
                  "|| array_to_tsvector(ARRAY['#g' || replace(c.generation_id::text, '-', '')]))")


def vectors_write(*, document_id, generation_ids: list, model: EmbeddingModel) -> int:
    """Copy cached vectors onto the document's children in these generations and write their
    keyword tsvector and term statistics, in one statement (so in the caller's transaction); and
    their windows' vectors and keyword terms (windows_write).
    Running it twice changes nothing the second time. Returns rows updated."""
    rows = list(Chunk.objects.filter(
        document_id=document_id, generation_id__in=generation_ids, kind=Chunk.Kind.CHILD
    ).values_list("id", "text", "chapter_path"))
    if not rows:
        return 0
    ids = [row[0] for row in rows]
    terms = search_terms((text, path) for _, text, path in rows)
    windows_write(children=rows, model=model)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH old AS (
                -- The statement's snapshot: values before `upd` (callers hold the document's lock).
                SELECT id, search_vector IS NOT NULL AS had FROM knowledge_chunk WHERE id = ANY(%s::uuid[])
            ), upd AS (
                UPDATE knowledge_chunk AS c
                   SET embedding = e.embedding,
                       embedding_model_id = e.embedding_model_id,
                       search_vector = {SEARCH_VECTOR_SQL}
                  FROM unnest(%s::uuid[], %s::text[]) AS v(id, terms), knowledge_embeddingcache AS e
                 WHERE c.id = v.id AND e.embedding_model_id = %s AND e.text_hash = c.text_hash
             RETURNING c.id, c.generation_id, c.search_vector
            ), fresh AS (
                SELECT u.generation_id, u.search_vector FROM upd u JOIN old o ON o.id = u.id WHERE NOT o.had
            ), {stats_counts_sql("fresh")}, ins AS (
                {STATS_ADD_SQL}
            )
            SELECT count(*) FROM upd
            """,  # noqa: S608 -- fixed SQL, values bound
            [ids, ids, terms, model.pk],
        )
        return cursor.fetchone()[0]


def keywords_rewrite(*, generation_id, batch: int = 2_000) -> int:
    """Re-tokenise every indexed child of a generation (and its windows) with the current analyzer
    and recount its term statistics. The caller holds the generation's lock and a transaction, so searches see the
    old index until it commits. Returns the chunks rewritten."""
    done = 0
    chunks = (Chunk.objects.filter(generation_id=generation_id, kind=Chunk.Kind.CHILD, search_vector__isnull=False)
              .order_by("id").values_list("id", "text", "chapter_path"))
    last = None
    with connection.cursor() as cursor:
        while True:
            page = list((chunks.filter(id__gt=last) if last else chunks)[:batch])
            if not page:
                break
            last = page[-1][0]
            cursor.execute(
                f"UPDATE knowledge_chunk AS c SET search_vector = {SEARCH_VECTOR_SQL} "  # noqa: S608 -- fixed SQL
                "FROM unnest(%s::uuid[], %s::text[]) AS v(id, terms) WHERE c.id = v.id",
                [[row[0] for row in page], search_terms((text, path) for _, text, path in page)],
            )
            windows_write(children=page, model=None)
            done += len(page)
        cursor.execute("DELETE FROM knowledge_keywordtermstat WHERE generation_id = %s", [generation_id])
    stats_add(rows_sql="SELECT generation_id, search_vector FROM knowledge_chunk "
                       "WHERE generation_id = %s AND search_vector IS NOT NULL", params=[generation_id])
    return done


def chunks_delete(*, document_id=None, generation_id=None) -> int:
    """Delete chunks and their windows in one statement (parents and children together; Django's
    per-row cascade would load them all) and uncount their keyword terms. Foreign keys are checked
    at commit."""
    column, value = ("document_id", document_id) if document_id is not None else ("generation_id", generation_id)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH windows AS (
                DELETE FROM knowledge_chunkwindow
                 WHERE chunk_id IN (SELECT id FROM knowledge_chunk WHERE {column} = %s)
            ), gone AS (
                DELETE FROM knowledge_chunk WHERE {column} = %s RETURNING generation_id, search_vector
            ), indexed AS (
                SELECT generation_id, search_vector FROM gone WHERE search_vector IS NOT NULL
            ), {stats_counts_sql("indexed")}, locked AS (
                SELECT s.generation_id, s.term FROM knowledge_keywordtermstat s
                  JOIN counts c ON c.generation_id = s.generation_id AND c.term = s.term
                 ORDER BY 1, 2 FOR UPDATE OF s
            ), upd AS (
                UPDATE knowledge_keywordtermstat s SET df = s.df - c.df
                  FROM counts c, (SELECT count(*) FROM locked) AS l
                 WHERE s.generation_id = c.generation_id AND s.term = c.term
            )
            SELECT count(*) FROM gone
            """,  # noqa: S608 -- fixed column names, values bound
            [value, value],
        )
        return cursor.fetchone()[0]


def vectors_missing(*, document_id, generation_ids: list) -> int:
    """How many of the document's children in these generations, and of their windows, have no vector."""
    children = Chunk.objects.filter(document_id=document_id, generation_id__in=generation_ids, kind=Chunk.Kind.CHILD)
    return (children.filter(embedding__isnull=True).count()
            + ChunkWindow.objects.filter(chunk__in=children, embedding__isnull=True).count())
