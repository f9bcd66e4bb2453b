"""SQL for the indexes of one generation's chunks (pure strings; migrations import this too).

`knowledge_chunk.embedding` is a `vector` without a fixed dimension, because KBs of different
models share the table. HNSW needs a fixed dimension, so every index is a partial expression index
over `embedding::vector(DIM)`.

Each index generation big enough to need one gets its own (apps.knowledge.generation_indexes):

    CREATE INDEX knowledge_chunk_hnsw_g_<generation hex> ON knowledge_chunk
        USING hnsw ((embedding::vector(DIM)) vector_cosine_ops)
        WHERE generation_id = '<generation uuid>' AND kind = 'child'

A query uses it only when it repeats the cast and the predicate, literally:

    ... WHERE generation_id = '<generation uuid>' AND kind = 'child' AND <more filters>
        ORDER BY c.embedding::vector(DIM) <=> %s::vector(DIM) LIMIT k

(Django with psycopg 3 binds parameters client-side, so a `%s` for the generation id is inlined
and the planner can still match the partial predicate.) So a search of one KB walks a graph of
that KB's vectors only. Until 2026-12 each embedding model had one index for all its KBs
(`hnsw_index_*`, kept for the migrations that created and dropped them): pgvector 0.6 applies a
KB filter after the index scan, so a search walked every KB's vectors and a small KB among many
could get fewer than k rows back.

The same generations get a GIN index of their keyword terms too (keyword_index_create_sql): the
shared GIN index serves the small ones, through each chunk's generation lexeme.
"""

from __future__ import annotations

import uuid


def hnsw_index_name(model_id: uuid.UUID) -> str:
    return f"knowledge_chunk_hnsw_{uuid.UUID(str(model_id)).hex}"


def hnsw_index_create_sql(model_id: uuid.UUID, dimension: int) -> str:
    model_id = uuid.UUID(str(model_id))  # validated: only a UUID ever reaches the SQL text
    dimension = int(dimension)
    return (
        f"CREATE INDEX IF NOT EXISTS {hnsw_index_name(model_id)} ON knowledge_chunk "
        f"USING hnsw ((embedding::vector({dimension})) vector_cosine_ops) "
        f"WHERE embedding_model_id = '{model_id}'"
    )


def hnsw_index_drop_sql(model_id: uuid.UUID) -> str:
    return f"DROP INDEX IF EXISTS {hnsw_index_name(model_id)}"


VECTOR_INDEX_PREFIX = "knowledge_chunk_hnsw_g_"
KEYWORD_INDEX_PREFIX = "knowledge_chunk_gin_g_"


def _generation_index_name(prefix: str, generation_id: uuid.UUID) -> str:
    return f"{prefix}{uuid.UUID(str(generation_id)).hex}"


def _generation_index_create_sql(name: str, method: str, generation_clause: str, *, concurrently: bool,
                                 storage: str = "") -> str:
    """CREATE INDEX over one generation's children; the caller has validated the clause's id and
    built `storage` (a WITH clause's parameters) from numbers."""
    how = "CONCURRENTLY " if concurrently else ""
    with_storage = f"WITH ({storage}) " if storage else ""
    return (f"CREATE INDEX {how}IF NOT EXISTS {name} ON knowledge_chunk USING {method} "
            f"{with_storage}WHERE {generation_clause} AND kind = 'child'")


def vector_index_name(generation_id: uuid.UUID) -> str:
    return _generation_index_name(VECTOR_INDEX_PREFIX, generation_id)


def vector_index_create_sql(generation_id: uuid.UUID, dimension: int, *, concurrently: bool, m: int = 16,
                            ef_construction: int = 64) -> str:
    """The generation's HNSW index: a graph of `m` links a node, built keeping `ef_construction`
    candidates for each row it inserts (pgvector's defaults: 16 and 64)."""
    generation_id = uuid.UUID(str(generation_id))  # validated: only a UUID ever reaches the SQL text
    return _generation_index_create_sql(
        vector_index_name(generation_id), f"hnsw ((embedding::vector({int(dimension)})) vector_cosine_ops)",
        f"generation_id = '{generation_id}'", concurrently=concurrently,
        storage=f"m = {int(m)}, ef_construction = {int(ef_construction)}")


def index_drop_sql(name: str, *, concurrently: bool) -> str:
    if not name.replace("_", "").isalnum():
        raise ValueError(f"not an index name: {name!r}")
    return f"DROP INDEX {'CONCURRENTLY ' if concurrently else ''}IF EXISTS {name}"


def keyword_index_name(generation_id: uuid.UUID) -> str:
    return _generation_index_name(KEYWORD_INDEX_PREFIX, generation_id)


def keyword_index_create_sql(generation_id: uuid.UUID, *, concurrently: bool) -> str:
    """A GIN index of one generation's keyword terms. The shared one (knowledge_chunk_terms_gin)
    finds a generation's chunks by intersecting a term's postings in every KB with the
    generation's lexeme; this one holds the generation's postings alone. A query uses it when it
    repeats the predicate: WHERE generation_id::text = '<uuid>' AND kind = 'child' AND
    search_vector @@ …

    The predicate compares the id as text on purpose: no other index can serve that clause. With
    `generation_id = '<uuid>'` the (generation, document) B-tree could, and the planner took it
    whenever its statistics did not know the generation yet (a KB grown since the table's last
    ANALYZE, which on a big table is a long time): every chunk of the generation read and matched
    against each term, 255 ms instead of 0.9 ms on a KB of 11,727 chunks.

    Without GIN's pending list (`fastupdate = off`, as the shared index since migration 0013):
    rows indexed after the build go into the index as they are written, not into a list every
    search scans until a vacuum merges it."""
    generation_id = uuid.UUID(str(generation_id))  # validated: only a UUID ever reaches the SQL text
    return _generation_index_create_sql(keyword_index_name(generation_id), "gin (search_vector)",
                                        f"generation_id::text = '{generation_id}'", concurrently=concurrently,
                                        storage="fastupdate = off")
