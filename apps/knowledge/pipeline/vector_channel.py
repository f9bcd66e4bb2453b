"""The vector channel (pipeline.retrieve has the design): pgvector cosine over the searched
generations' child chunks, through a generation's own HNSW index where it has one, else by an exact
scan; and the cosines of chunks the channel did not bring (to complete the keyword candidates)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection, transaction

from apps.core import dblimits
from apps.knowledge.models import EmbeddingModel
from apps.knowledge.pipeline import parallel
from apps.knowledge.pipeline.candidates import PLACEMENT_COLUMNS, vector_literal, withheld_filter
from apps.knowledge.pipeline.keyword_channel import term_stats
from apps.knowledge.pipeline.retrieval_settings import retrieval_settings

# pgvector's largest hnsw.ef_search: a walk that wide finds every row of a smaller generation.
EF_SEARCH_MAX = 1000


def _vector_query(dim: int, *, vector: str, generations: Any, limit: int,
                  extra_columns: tuple[str, list], withheld: Sequence = ()) -> tuple[str, list]:
    """The vector channel's SQL and parameters: (id, cosine, parent id, document id, *extra)
    best first, over one generation through its own HNSW index (`generations` one id), or over
    several by an exact scan (`generations` a list), none of the documents in `withheld`."""
    distance = f"(embedding::vector({dim}) <=> %s::vector({dim}))"
    extra, extra_params = extra_columns
    extra = f", {extra}" if extra else ""
    skip, filter_params = withheld_filter(withheld)
    filters = f"kind = 'child' AND embedding IS NOT NULL AND NOT disabled{skip}"
    if not isinstance(generations, list):
        # One generation, named literally: the planner matches its partial HNSW index. The walk
        # stops at the limit, so the extra columns are computed for the returned rows only.
        return (f"SELECT c.id, 1 - {distance}, {PLACEMENT_COLUMNS}{extra} FROM knowledge_chunk c "  # noqa: S608 -- the columns are the engine's own
                f"WHERE generation_id = %s AND {filters} ORDER BY {distance} LIMIT %s",
                [vector, *extra_params, generations, *filter_params, vector, limit])
    # An exact scan: "+ 0" hides the ordering from any HNSW index; equal distances go by id, so
    # the same rows make the cut every time. It sorts every row it reads, so the extra columns (a
    # search vector unpacked and filtered) are read after the limit, by id.
    return (f"SELECT c.id, 1 - v.distance, {PLACEMENT_COLUMNS}{extra} FROM ("  # noqa: S608 -- the columns are the engine's own
            f"SELECT id, {distance} AS distance FROM knowledge_chunk WHERE generation_id = ANY(%s::uuid[]) "
            f"AND {filters} ORDER BY {distance} + 0, id LIMIT %s) v JOIN knowledge_chunk c ON c.id = v.id "
            f"ORDER BY v.distance, c.id",
            [*extra_params, vector, generations, *filter_params, vector, limit])


def vector_candidates(*, model: EmbeddingModel, generation_ids: Sequence, query_vector: Sequence[float],
                      limit: int, indexed: Iterable = (), filtered_rows: int | None = None,
                      need: int | None = None, extra_columns: tuple[str, list] = ("", []),
                      ef_search: int | None = None, withheld: Sequence = ()) -> list[tuple]:
    """[(chunk id, cosine similarity, parent id, document id, *extra)] best first: up to `limit`
    candidates, and never fewer than `need` (the caller's top-k) while the generations have them.
    A generation in `indexed` is searched through its own HNSW index, the others exactly;
    `filtered_rows` is how many child chunks the generations hold together (read when needed if
    not given: only an index answer short of the limit asks). `extra_columns`:
    more SQL columns over alias c (the keyword scorer's, in hybrid search) and their parameters,
    read only for the rows returned. `ef_search`: the HNSW walk's floor (vector_ef_search unless
    given; hybrid search gives hybrid_vector_ef_search), never below twice the limit. `withheld`:
    documents (turned off) whose chunks are skipped, as disabled chunks are."""
    dim = model.dimension
    vector = vector_literal(query_vector)
    knobs = retrieval_settings()
    ef_search = knobs.vector_ef_search if ef_search is None else ef_search
    indexed = set(indexed)
    rows: list[tuple] = []
    # Make the planner walk an index rather than sort a generation's rows: these settings, in one
    # statement (a round trip is ~0.1-0.7 ms on the search's critical path). The search worker's
    # connection keeps them for its session, and sorting on again for an exact scan, each set only
    # when it changes; any other connection sets them in a transaction around the walk.
    walk = {"hnsw.ef_search": str(int(min(EF_SEARCH_MAX, max(ef_search, 2 * limit)))), "enable_sort": "off"}
    own_session = parallel.on_worker() and not connection.in_atomic_block

    def walk_with(values: dict[str, str]) -> None:
        if own_session:
            parallel.session_settings(values)
        else:
            dblimits.set_settings(values, local=True)

    def before_a_scan() -> None:
        if own_session:
            parallel.session_settings({**walk, "enable_sort": "on"})

    with connection.cursor() as cursor:
        scanned = [g for g in generation_ids if g not in indexed]
        if scanned:
            before_a_scan()
            cursor.execute(*_vector_query(dim, vector=vector, generations=scanned, limit=limit,
                                          extra_columns=extra_columns, withheld=withheld))
            rows += cursor.fetchall()
        walked = [g for g in generation_ids if g in indexed]
        if walked:
            # The index may return fewer rows than asked (disabled chunks, documents off: the walk
            # drops them after it found them). A shortfall below what the caller will show, or one
            # below the candidate limit while the generations are small enough to scan (20,000
            # rows, ~100 ms), is walked again as wide as pgvector allows (EF_SEARCH_MAX), unless
            # the walk was already as wide as the generations' rows (it has seen every one); if
            # still short of a walk that could not see them all, an exact scan. (Before, a large
            # document turned off near the query made an exact scan of the whole generation.)
            shown = limit if need is None else need
            short = []
            with contextlib.nullcontext() if own_session else transaction.atomic():
                walk_with(walk)
                for generation_id in walked:
                    query = _vector_query(dim, vector=vector, generations=generation_id, limit=limit,
                                          extra_columns=extra_columns, withheld=withheld)
                    cursor.execute(*query)
                    found = cursor.fetchall()
                    if len(found) < max(limit, shown):  # only then can the generations' size matter
                        if filtered_rows is None:
                            filtered_rows = term_stats(generation_ids, []).get("#n", 0)
                        wanted = limit if filtered_rows <= knobs.vector_exact_fallback_max else shown
                        # A walk as wide as the generations' rows has seen all of them.
                        width = int(walk["hnsw.ef_search"])
                        if len(found) < wanted and width < min(filtered_rows, EF_SEARCH_MAX):
                            width = EF_SEARCH_MAX
                            walk_with({**walk, "hnsw.ef_search": str(width)})
                            cursor.execute(*query)
                            found = cursor.fetchall()
                            walk_with(walk)
                        if len(found) < wanted and filtered_rows > width:
                            short.append(generation_id)
                            continue
                    rows += found
            if short:
                before_a_scan()
                cursor.execute(*_vector_query(dim, vector=vector, generations=short, limit=limit,
                                              extra_columns=extra_columns, withheld=withheld))
                rows += cursor.fetchall()
    if len(generation_ids) > 1:
        rows.sort(key=lambda row: (-row[1], str(row[0])))
    return rows[:limit]


def vector_scores(*, model: EmbeddingModel, ids: Sequence, query_vector: Sequence[float]) -> dict[Any, float]:
    if not ids:
        return {}
    dim = model.dimension
    vector = vector_literal(query_vector)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, 1 - (embedding::vector({dim}) <=> %s::vector({dim})) FROM knowledge_chunk "  # noqa: S608 -- an int dimension
            f"WHERE id = ANY(%s::uuid[]) AND embedding IS NOT NULL AND NOT disabled",
            [vector, list(ids)],
        )
        return dict(cursor.fetchall())
