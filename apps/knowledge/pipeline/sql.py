"""SQL for the per-model vector indexes (pure strings; migrations import this too).

`knowledge_chunk.embedding` is a `vector` without a fixed dimension, because KBs of different
models share the table. HNSW needs a fixed dimension, so each embedding model gets a partial
expression index:

    CREATE INDEX knowledge_chunk_hnsw_<model hex> ON knowledge_chunk
        USING hnsw ((embedding::vector(DIM)) vector_cosine_ops)
        WHERE embedding_model_id = '<model uuid>'

A query uses it only when it repeats both the cast and the predicate, literally:

    ... WHERE c.embedding_model_id = '<model uuid>' AND <more filters>
        ORDER BY c.embedding::vector(DIM) <=> %s::vector(DIM) LIMIT k

(Django with psycopg 3 binds parameters client-side, so a `%s` for the model id is inlined and
the planner can still match the partial predicate.) On pgvector 0.6, further filters (generation,
KB) are applied after the index scan: a small KB among many can get fewer than k rows back —
see NOTES.md; the reader must compensate (larger ef_search, or an exact scan for small sets).
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
