"""Retrieval: the one search engine behind every caller (builder search, admin playground, turns,
agent knowledge search, benchmarks).

Channels, each with its own candidate limit, over the child chunks of the KBs' active generations
(never a chunk an operator disabled: every channel and the roll-up skip them):

* vector — pgvector cosine. A generation with more than 2,000 child vectors has an HNSW index of
  its own (apps.knowledge.generation_indexes) and is searched through it; smaller ones are scanned
  exactly (about 5 µs a row). So a search never walks another KB's vectors, and never starves: a
  filter applied after a shared index (pgvector 0.6) could leave a small KB with fewer than k rows.
* keyword — BM25 (k1=0.9, b=0.4) over CJK unigrams+bigrams and stemmed words, Traditional
  Chinese folded onto Simplified (pipeline.terms). Phase 1
  takes every query term when all their postings fit the posting budget (small KBs), else the
  query's rarest terms (df/N <= KEYWORD_RARE_FRACTION, within the posting budget) and
  reads their posting lists, summing idf: from a generation's own GIN index when it has one
  (over 2,000 children, like the HNSW index), else from the shared one, intersected with the
  generations' lexemes; phase 2 scores the best KEYWORD_PHASE1_LIMIT of those exactly with
  every query term, reading each one's term frequencies from its search vector (pipeline.index;
  when a searched generation was indexed before analyzer 3, the candidates' text is recounted
  instead, with the same result, for every generation of that search). Measured on
  dureader-robust-a, this equals exhaustive BM25 (0.825 vs 0.824 nDCG@10) while touching a few
  percent of the postings.

Fusion (hybrid): both candidate lists are completed — keyword-only candidates get their cosine,
vector-only candidates their BM25 — then combined convexly: w × min-max-normalised cosine +
(1 − w) × BM25 / best BM25, with the dense weight w set per query from its script (Simplified
or Traditional Chinese, or none), its length and the channels' top-1 margins
(adaptive_dense_weight). Measured (see bench/README.md), this kept hybrid at
or above the better channel where RRF(k=60) lost to it. Each candidate's best sentence window
(pipeline.windows) is blended into both parts first, read in one query for the best
`hybrid_window_pool` candidates of the fusion without them (window_scores; `hybrid_window_*` in
retrieval_settings): a question matches one sentence of a long child, and the child's own scores
dilute it. A KB (KnowledgeBase.fusion) or one search
(SearchOptions.fusion) may choose `rrf` instead: each candidate scores the sum, over the channels
that ranked it, of 1 / (60 + its rank there).

A KB with a reranker (pipeline.rerank) has its fused candidates reordered by it; a failing
reranker leaves the fused order, and the result's trace says so.

In hybrid mode outside a transaction, the query's embedding and then the vector channel run on a
second connection's thread while this thread runs the keyword channel (pipeline.parallel); inside
one, they run one after the other. So a hybrid search's timings overlap: query_embedding_ms and
vector_ms beside keyword_ms, not after it.

KBs with different embedding models are searched separately (each with its own query vector) and
their rankings merged by rank, never by raw scores across models. Child hits then roll up to
their parent sections: hits of one parent merge, and a result's content is the parent text cut to
the byte budget around the hits.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from concurrent import futures
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction

from apps.knowledge.models import Chunk, Document, EmbeddingModel, IndexGeneration, KnowledgeBase
from apps.knowledge.pipeline import parallel
from apps.knowledge.pipeline.embedders import embedder_for
from apps.knowledge.pipeline.han import is_traditional
from apps.knowledge.pipeline.index import embedding_text, generation_lexeme
from apps.knowledge.pipeline.rerank import RerankConfig, rerank
from apps.knowledge.pipeline.retrieval_settings import retrieval_settings
from apps.knowledge.pipeline.terms import ANALYZER as KEYWORD_ANALYZER
from apps.knowledge.pipeline.terms import has_cjk, is_cjk_term, keyword_terms, term_frequencies

K1 = 0.9
B = 0.4
RRF_K = 60
MODES = ("vector", "keyword", "hybrid")
FUSIONS = ("convex", "rrf")


@dataclass(frozen=True)
class SearchOptions:
    top_k: int = 4
    mode: str = "hybrid"
    score_threshold: float | None = None
    explain: bool = False
    # None: each KB's own setting (KnowledgeBase.fusion); a value overrides it for this search.
    fusion: str | None = None
    dense_weight: float | None = None
    candidate_k: int | None = None
    budget_bytes: int | None = None
    max_docs: int | None = None
    rollup: bool = True
    # The KBs' rerankers run unless a caller (a benchmark of fusion alone) turns them off.
    rerank: bool = True
    # Whom the search is for, written on the cost records of paid calls it makes.
    route_id: Any = None
    # Hybrid: embed the query on the second connection's thread, beside the keyword channel. A
    # benchmark timing the engine without the query embedding turns it off: overlapped, the
    # embedding's time is partly hidden, and the total minus it is not the engine's time.
    embed_beside: bool = True

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        if self.fusion is not None and self.fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {FUSIONS}")


@dataclass
class Candidate:
    chunk_id: Any
    vector_rank: int | None = None
    vector_score: float | None = None
    keyword_rank: int | None = None
    keyword_score: float | None = None
    score: float = 0.0
    matched_terms: list[str] = field(default_factory=list)
    dense_weight: float | None = None
    fusion: str | None = None
    rerank_score: float | None = None
    # (parent id, document id), read with the channel's row; None for a candidate made elsewhere.
    placement: tuple | None = None
    # Its best sentence window's cosine and BM25 (window_scores); None when it has no windows or
    # they were not read (outside hybrid_window_pool).
    window_cosine: float | None = None
    window_keyword: float | None = None
    # What convex fusion blended in as its window: "best window", "own scores" (its windows were
    # not read, or it has none: its own cosine and BM25 stood in), None when no window was blended.
    window_blend: str | None = None


# Columns every channel reads beside its own (over alias c): where a candidate sits, for the roll-up.
PLACEMENT_COLUMNS = "c.parent_id, c.document_id"


@dataclass(frozen=True)
class Hit:
    chunk_id: Any
    document_id: Any
    knowledge_base_id: Any
    chunk_index: int
    content: str
    score: float
    chapter_path: str | None
    metadata: dict
    title: str
    parent_id: Any = None
    explain: dict | None = None


@dataclass
class SearchResult:
    hits: list[Hit]
    timings_ms: dict[str, float] = field(default_factory=dict)
    # Steps worth telling a caller about (a rerank, and whether it fell back to the fused order).
    trace: list[dict] = field(default_factory=list)
    # The fusion each searched group used (hybrid mode), sorted.
    fusions: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ActiveGeneration:
    """A searched KB's active generation, as the engine needs it."""

    pk: Any
    knowledge_base_id: Any
    vector_indexed: bool
    keyword_indexed: bool
    keyword_analyzer: int
    # Built with sentence windows (ChunkStrategy.window_chars > 0).
    windowed: bool


def _active_generations(kb_ids: list) -> list[ActiveGeneration]:
    """The active generation of each of the KBs that has one. Plain SQL, as every read on a
    search's path: building the ORM's query cost more than running it (~2.4 ms against 0.4)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, knowledge_base_id, vector_indexed, keyword_indexed, keyword_analyzer, "
            "coalesce((chunk_strategy->>'window_chars')::int, 0) > 0 FROM knowledge_indexgeneration "
            "WHERE knowledge_base_id = ANY(%s::uuid[]) AND status = %s",
            [kb_ids, IndexGeneration.Status.ACTIVE.value],
        )
        return [ActiveGeneration(*row) for row in cursor.fetchall()]


@dataclass(frozen=True)
class GenerationIndexes:
    """What the searched generations have of their own: an HNSW index (`vector`), a GIN index
    (`keyword`; apps.knowledge.generation_indexes), term frequencies in their keyword index
    (`stored_tf`: indexed with the current analyzer), sentence windows (`windowed`). Sets of
    generation ids."""

    vector: frozenset = frozenset()
    keyword: frozenset = frozenset()
    stored_tf: frozenset = frozenset()
    windowed: frozenset = frozenset()

    @classmethod
    def of(cls, generations: Iterable[ActiveGeneration]) -> GenerationIndexes:
        items = list(generations)
        return cls(
            vector=frozenset(g.pk for g in items if g.vector_indexed),
            keyword=frozenset(g.pk for g in items if g.keyword_indexed),
            stored_tf=frozenset(g.pk for g in items if g.keyword_analyzer == KEYWORD_ANALYZER),
            windowed=frozenset(g.pk for g in items if g.windowed),
        )


# Keyword channel


def _tsquery_lexeme(term: str) -> str:
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"


def _term_stats(generation_ids: Sequence, terms: Sequence[str]) -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT term, sum(df)::bigint FROM knowledge_keywordtermstat "
            "WHERE generation_id = ANY(%s::uuid[]) AND term = ANY(%s::text[]) GROUP BY term",
            [list(generation_ids), [*terms, "#n", "#len"]],
        )
        return {term: int(df) for term, df in cursor.fetchall()}


def bm25_idf(df: int, n: int) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def bm25(*, tf: Counter, idf: dict[str, float], length: int, avg_length: float) -> float:
    norm = K1 * (1 - B + B * length / avg_length) if avg_length else K1
    return sum(idf[t] * n * (K1 + 1) / (n + norm) for t, n in tf.items() if t in idf)


# A filtered search vector's text: "'国家':2A 'claim':1A" (a lexeme, its frequency, a weight).
_STORED_TF = re.compile(r"'((?:[^']|'')*)':(\d+)")


def stored_frequencies(filtered: str) -> Counter:
    """{term: frequency} from the text of a search vector cut to the query's terms."""
    return Counter({
        term.replace("''", "'").replace("\\\\", "\\"): int(n) for term, n in _STORED_TF.findall(filtered)
    })


@dataclass
class KeywordScorer:
    """BM25 for one query over one set of generations. `stored_tf`: every generation was indexed
    with term frequencies (pipeline.terms.ANALYZER 3), so rows carry them instead of text."""

    terms: list[str]
    df: dict[str, int]
    idf: dict[str, float]
    avg_length: float
    n: int
    stored_tf: bool = False
    # Postings phase 1 may read; None: keyword_posting_budget (hybrid search sets its own).
    posting_budget: int | None = None

    def row_columns(self) -> tuple[str, list]:
        """SQL columns (over alias c) for score_rows, and their parameters."""
        return keyword_row_columns(list(self.idf), stored_tf=self.stored_tf)

    def score_rows(self, rows: Iterable[tuple]) -> dict[Any, tuple[float, list[str]]]:
        """rows as row_columns selects them → {id: (bm25, matched terms)}."""
        out = {}
        for chunk_id, stored, chapter_path, length in rows:
            if self.stored_tf:
                tf = stored_frequencies(stored or "")
            else:
                tf = term_frequencies(embedding_text(text=stored, chapter_path=chapter_path), self.idf)
            out[chunk_id] = (bm25(tf=tf, idf=self.idf, length=length, avg_length=self.avg_length), sorted(tf))
        return out


def keyword_row_columns(terms: Sequence[str], *, stored_tf: bool) -> tuple[str, list]:
    """SQL columns (over alias c) from which KeywordScorer.score_rows scores a row, and their
    parameters. A term no row has changes nothing, so the query's terms serve before their
    statistics are read (the vector channel starts with them)."""
    if stored_tf:
        # The row's vector cut to the query's terms: setweight marks them, ts_filter keeps them.
        return ("c.id, ts_filter(setweight(c.search_vector, 'A', %s::text[]), '{a}')::text, NULL, "
                "greatest(length(c.search_vector) - 1, 0)", [list(terms)])
    return "c.id, c.text, c.chapter_path, greatest(length(c.search_vector) - 1, 0)", []


def query_terms(query: str) -> list[str]:
    """The query's keyword terms, each once, in order."""
    return list(dict.fromkeys(keyword_terms(query)))


def keyword_scorer(*, generation_ids: Sequence, query: str, stored_tf: bool = False,
                   posting_budget: int | None = None) -> KeywordScorer | None:
    """None when the query has no terms or the generations no indexed chunk. `stored_tf` only
    when every generation is at the current analyzer (the search engine checks)."""
    terms = query_terms(query)
    if not terms or not generation_ids:
        return None
    stats = _term_stats(generation_ids, terms)
    n = stats.pop("#n", 0)
    total = stats.pop("#len", 0)
    if n <= 0:
        return None
    df = {t: d for t, d in stats.items() if d > 0}
    return KeywordScorer(terms=terms, df=df, idf={t: bm25_idf(d, n) for t, d in df.items()}, avg_length=total / n, n=n,
                         stored_tf=stored_tf, posting_budget=posting_budget)


SMALL_POSTINGS = 2_000


def _phase1_terms(scorer: KeywordScorer) -> list[str]:
    """The query terms whose postings phase 1 reads, rarest first."""
    knobs = retrieval_settings()
    rare_fraction = knobs.keyword_rare_fraction
    posting_budget = knobs.keyword_posting_budget if scorer.posting_budget is None else scorer.posting_budget
    max_terms = knobs.keyword_phase1_terms
    df = scorer.df
    ordered = sorted(df, key=lambda t: (df[t], t))
    if sum(df.values()) <= SMALL_POSTINGS:
        # A small KB: read every posting, so the channel ranks every chunk with a query term. The
        # rare-term cut below would keep only the rarest term there, where each term is in a
        # large share of the chunks. Not up to the whole budget: common terms (的, the) of a
        # mid-size KB made this one query 100+ ms.
        return ordered
    chosen: list[str] = []
    spent = 0
    for term in ordered:
        if chosen and (df[term] / scorer.n > rare_fraction or spent + df[term] > posting_budget
                       or len(chosen) >= max_terms):
            break
        chosen.append(term)
        spent += df[term]
    return chosen


def _keyword_phase1(generation_ids: Sequence, scorer: KeywordScorer, limit: int,
                    own_index: Iterable = (), cosine: tuple[int, str] | None = None) -> list[tuple]:
    """The best `limit` chunks by summed idf of the phase-1 terms they hold, as the scorer's
    row_columns gives them followed by PLACEMENT_COLUMNS (one round trip: the ranking, the rows
    phase 2 scores and where they sit), then, with `cosine` (dimension, query vector literal),
    each row's cosine similarity to the query (None without an embedding). A
    generation in `own_index` is read through its own GIN index, the others through the shared
    one, each term's postings intersected with their lexemes.

    The terms are rows of an array, each joined laterally to its postings: one scan per index
    in the plan whatever the number of terms. (A branch per term, UNION ALL, made the planner
    test every partial index of knowledge_chunk once per term: 18 ms of planning beside 100
    generations with indexes of their own, 122 ms beside 400.)"""
    chosen = _phase1_terms(scorer)
    if not chosen:
        return []
    owned = set(own_index)
    branches: list[str] = []
    params: list[Any] = [[_tsquery_lexeme(term) for term in chosen], [scorer.idf[term] for term in chosen]]
    for generation_id in generation_ids:
        if generation_id in owned:
            # The generation named with its index's predicate (pipeline.sql.keyword_index_create_sql):
            # the planner matches the partial index, and no other index serves the clause.
            branches.append("SELECT id FROM knowledge_chunk WHERE generation_id::text = %s AND kind = 'child' "
                            "AND search_vector @@ t.term::tsquery AND NOT disabled")
            params.append(str(generation_id))
    shared = [g for g in generation_ids if g not in owned]
    if shared:
        branches.append("SELECT id FROM knowledge_chunk "
                        "WHERE search_vector @@ (%s::tsquery && t.term::tsquery) AND NOT disabled")
        params.append(" | ".join(_tsquery_lexeme(generation_lexeme(g)) for g in shared))
    columns, column_params = scorer.row_columns()
    similarity, similarity_params = "", []
    if cosine is not None:
        dim, vector = int(cosine[0]), cosine[1]
        similarity, similarity_params = f", 1 - (c.embedding::vector({dim}) <=> %s::vector({dim}))", [vector]
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH best AS (SELECT h.id FROM unnest(%s::text[], %s::float8[]) AS t(term, w) "  # noqa: S608 -- fixed SQL
            f"CROSS JOIN LATERAL ({' UNION ALL '.join(branches)}) AS h "
            "GROUP BY h.id ORDER BY sum(t.w) DESC, h.id LIMIT %s) "
            f"SELECT {columns}, {PLACEMENT_COLUMNS}{similarity} FROM best JOIN knowledge_chunk c ON c.id = best.id",
            [*params, limit, *column_params, *similarity_params],
        )
        return cursor.fetchall()


def _chunk_rows(scorer: KeywordScorer, ids: Sequence) -> list[tuple]:
    """The rows of `ids` as the scorer's row_columns gives them."""
    columns, column_params = scorer.row_columns()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns} FROM knowledge_chunk c WHERE c.id = ANY(%s::uuid[]) AND NOT c.disabled",  # noqa: S608
            [*column_params, list(ids)],
        )
        return cursor.fetchall()


# (chunk id, BM25, matched terms, (parent id, document id), cosine similarity or None)
KeywordHits = list[tuple[Any, float, list[str], tuple, float | None]]


def keyword_candidates(*, generation_ids: Sequence, query: str, limit: int, scorer: KeywordScorer | None = None,
                       stored_tf: bool = False, own_index: Iterable = (), model: EmbeddingModel | None = None,
                       query_vector: Sequence[float] | None = None) -> tuple[KeywordHits, KeywordScorer | None]:
    """[(chunk id, BM25, matched terms, placement, cosine)] best first. `own_index`: the
    generations with a GIN index of their own. With `model` and `query_vector` each candidate's
    cosine similarity is read with it (hybrid fusion needs it; a read of its own cost ~4 ms at
    1M chunks), else it is None."""
    scorer = scorer or keyword_scorer(generation_ids=generation_ids, query=query, stored_tf=stored_tf)
    if scorer is None or not scorer.idf:
        return [], scorer
    phase1_limit = max(limit, retrieval_settings().keyword_phase1_limit)
    cosine = None
    if model is not None and query_vector is not None:
        cosine = (model.dimension, _vector_literal(query_vector))
    rows = _keyword_phase1(generation_ids, scorer, phase1_limit, own_index, cosine=cosine)
    width = len(rows[0]) - (3 if cosine else 2) if rows else 0  # the scorer's columns
    placement = {row[0]: (row[width], row[width + 1]) for row in rows}
    similarity = {row[0]: row[-1] for row in rows} if cosine else {}
    scored = scorer.score_rows(row[:width] for row in rows)
    ranked = sorted(scored.items(), key=lambda item: (-item[1][0], str(item[0])))
    return [(cid, s, terms, placement[cid], similarity.get(cid)) for cid, (s, terms) in ranked if s > 0][:limit], scorer


# Vector channel


def _vector_literal(query_vector: Sequence[float]) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in query_vector) + "]"


def _vector_query(dim: int, *, vector: str, generations: Any, limit: int,
                  extra_columns: tuple[str, list]) -> tuple[str, list]:
    """The vector channel's SQL and parameters: (id, cosine, parent id, document id, *extra)
    best first, over one generation through its own HNSW index (`generations` one id), or over
    several by an exact scan (`generations` a list)."""
    distance = f"(embedding::vector({dim}) <=> %s::vector({dim}))"
    extra, extra_params = extra_columns
    extra = f", {extra}" if extra else ""
    filters = "kind = 'child' AND embedding IS NOT NULL AND NOT disabled"
    if not isinstance(generations, list):
        # One generation, named literally: the planner matches its partial HNSW index. The walk
        # stops at the limit, so the extra columns are computed for the returned rows only.
        return (f"SELECT c.id, 1 - {distance}, {PLACEMENT_COLUMNS}{extra} FROM knowledge_chunk c "  # noqa: S608 -- the columns are the engine's own
                f"WHERE generation_id = %s AND {filters} ORDER BY {distance} LIMIT %s",
                [vector, *extra_params, generations, vector, limit])
    # An exact scan: "+ 0" hides the ordering from any HNSW index; equal distances go by id, so
    # the same rows make the cut every time. It sorts every row it reads, so the extra columns (a
    # search vector unpacked and filtered) are read after the limit, by id.
    return (f"SELECT c.id, 1 - v.distance, {PLACEMENT_COLUMNS}{extra} FROM ("  # noqa: S608 -- the columns are the engine's own
            f"SELECT id, {distance} AS distance FROM knowledge_chunk WHERE generation_id = ANY(%s::uuid[]) "
            f"AND {filters} ORDER BY {distance} + 0, id LIMIT %s) v JOIN knowledge_chunk c ON c.id = v.id "
            f"ORDER BY v.distance, c.id",
            [*extra_params, vector, generations, vector, limit])


def vector_candidates(*, model: EmbeddingModel, generation_ids: Sequence, query_vector: Sequence[float],
                      limit: int, indexed: Iterable = (), filtered_rows: int | None = None,
                      need: int | None = None, extra_columns: tuple[str, list] = ("", []),
                      ef_search: int | None = None) -> list[tuple]:
    """[(chunk id, cosine similarity, parent id, document id, *extra)] best first: up to `limit`
    candidates, and never fewer than `need` (the caller's top-k) while the generations have them.
    A generation in `indexed` is searched through its own HNSW index, the others exactly;
    `filtered_rows` is how many child chunks the generations hold together (read when needed if
    not given: only an index answer short of the limit asks). `extra_columns`:
    more SQL columns over alias c (the keyword scorer's, in hybrid search) and their parameters,
    read only for the rows returned. `ef_search`: the HNSW walk's floor (vector_ef_search unless
    given; hybrid search gives hybrid_vector_ef_search), never below twice the limit."""
    dim = model.dimension
    vector = _vector_literal(query_vector)
    knobs = retrieval_settings()
    ef_search = knobs.vector_ef_search if ef_search is None else ef_search
    indexed = set(indexed)
    rows: list[tuple] = []
    with connection.cursor() as cursor:
        scanned = [g for g in generation_ids if g not in indexed]
        if scanned:
            cursor.execute(*_vector_query(dim, vector=vector, generations=scanned, limit=limit,
                                          extra_columns=extra_columns))
            rows += cursor.fetchall()
        walked = [g for g in generation_ids if g in indexed]
        if walked:
            # The index may return fewer rows than asked (disabled chunks): a shortfall below what
            # the caller will show always gets an exact scan; one below the candidate limit too,
            # while the generations are small enough to scan (20,000 rows, ~100 ms).
            shown = limit if need is None else need
            short = []
            with transaction.atomic():
                # Make the planner walk the index rather than sort the generation's rows. One
                # statement for both: a round trip is ~0.1-0.7 ms on the search's critical path.
                cursor.execute("SELECT set_config('hnsw.ef_search', %s, true), set_config('enable_sort', 'off', true)",
                               [str(int(min(1000, max(ef_search, 2 * limit))))])
                for generation_id in walked:
                    cursor.execute(*_vector_query(dim, vector=vector, generations=generation_id, limit=limit,
                                                  extra_columns=extra_columns))
                    found = cursor.fetchall()
                    if len(found) < max(limit, shown):  # only then can the generations' size matter
                        if filtered_rows is None:
                            filtered_rows = _term_stats(generation_ids, []).get("#n", 0)
                        wanted = limit if filtered_rows <= knobs.vector_exact_fallback_max else shown
                        if len(found) < wanted:
                            short.append(generation_id)
                            continue
                    rows += found
            if short:
                cursor.execute(*_vector_query(dim, vector=vector, generations=short, limit=limit,
                                              extra_columns=extra_columns))
                rows += cursor.fetchall()
    if len(generation_ids) > 1:
        rows.sort(key=lambda row: (-row[1], str(row[0])))
    return rows[:limit]


def _vector_scores(*, model: EmbeddingModel, ids: Sequence, query_vector: Sequence[float]) -> dict[Any, float]:
    if not ids:
        return {}
    dim = model.dimension
    vector = _vector_literal(query_vector)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, 1 - (embedding::vector({dim}) <=> %s::vector({dim})) FROM knowledge_chunk "  # noqa: S608 -- an int dimension
            f"WHERE id = ANY(%s::uuid[]) AND embedding IS NOT NULL AND NOT disabled",
            [vector, list(ids)],
        )
        return dict(cursor.fetchall())


# Sentence windows


# Each candidate's best window, in one statement: the windows' cosines and, over their search
# vectors cut to the query's terms (a term's one position is its frequency), their BM25 with the
# generation's idf and the windows' own average length (K1, B as the engine's).
_WINDOW_SCORES_SQL = """
    WITH w AS (
        SELECT w.id, w.chunk_id, 1 - (w.embedding::vector({dim}) <=> %s::vector({dim})) AS cosine,
               ts_filter(setweight(w.search_vector, 'A', %s::text[]), '{{a}}') AS matched,
               length(w.search_vector) AS len
          FROM knowledge_chunkwindow w
         WHERE w.chunk_id = ANY(%s::uuid[]) AND w.embedding IS NOT NULL
    ), average AS (
        SELECT avg(len)::float8 AS len FROM w
    ), keyword AS (
        -- One join of every window's matched terms (a per-window subquery cost 0.02 ms a window).
        SELECT w.id, sum(q.idf * m.positions[1] * ({k1} + 1)
                         / (m.positions[1] + {k1} * (1 - {b} + {b} * w.len / nullif(a.len, 0)))) AS bm25
          FROM w CROSS JOIN average a CROSS JOIN LATERAL unnest(w.matched) AS m
          JOIN unnest(%s::text[], %s::float8[]) AS q(term, idf) ON q.term = m.lexeme
         GROUP BY w.id
    )
    SELECT w.chunk_id, max(w.cosine), max(coalesce(k.bm25, 0)), count(*)
      FROM w LEFT JOIN keyword k ON k.id = w.id
     GROUP BY w.chunk_id
"""


def window_scores(candidates: dict[Any, Candidate], *, model: EmbeddingModel, query_vector: Sequence[float],
                  scorer: KeywordScorer | None) -> int:
    """Give each candidate that has windows its best window's cosine and BM25, in one read.
    Returns the windows read."""
    if not candidates:
        return 0
    terms = list(scorer.idf) if scorer is not None else []
    idf = [scorer.idf[term] for term in terms] if scorer is not None else []
    with connection.cursor() as cursor:
        cursor.execute(
            _WINDOW_SCORES_SQL.format(dim=int(model.dimension), k1=float(K1), b=float(B)),
            [_vector_literal(query_vector), terms, list(candidates), terms, idf],
        )
        rows = cursor.fetchall()
    for chunk_id, cosine, keyword, _count in rows:
        candidates[chunk_id].window_cosine, candidates[chunk_id].window_keyword = float(cosine), float(keyword)
    return sum(count for *_, count in rows)


# Fusion


def _margin(scores: list[float], reference_rank: int | None = None) -> float:
    """How far the best score stands out: (s1 - s2) over s1, or over s1 - s_ref when a reference
    rank is given. 1 for a single candidate, 0 for none."""
    if not scores:
        return 0.0
    if len(scores) == 1:
        return 1.0
    ordered = sorted(scores, reverse=True)
    base = ordered[0] if reference_rank is None else ordered[0] - ordered[min(reference_rank, len(ordered)) - 1]
    return (ordered[0] - ordered[1]) / base if base > 0 else 0.0


def query_units(query: str) -> int:
    """Length of a query in CJK characters plus words (a Chinese character counts as a word)."""
    return sum(1 for t in keyword_terms(query) if not is_cjk_term(t) or len(t) == 1)


def adaptive_dense_weight(candidates: Iterable[Candidate], *, query: str) -> float:
    """The dense weight for one query (measured on the dev sets with multilingual-e5-small; see
    bench/README.md for the tables). The names below are keys of KNOWLEDGE_RETRIEVAL.

    - Chinese in Simplified script: short search-style queries want the dense channel (dureader:
      best near 0.85), long questions that share many terms with their passage want the keyword
      channel (cmrc: best near 0.45), and no fixed weight serves both. So the base weight falls
      linearly from hybrid_dense_weight_short (0.85) at hybrid_short_units (10) query units to
      hybrid_dense_weight_long (0.35) at hybrid_long_units (16).
    - A query with Traditional-only characters: hybrid_dense_weight_traditional (0.35)
      at any length. e5-small is weak on Traditional Chinese (dense 0.82 on drcd against 0.97 on
      cmrc, the same task in Simplified), and at every length drcd is best near 0.35; folding the
      text to Simplified before embedding made the dense channel worse (0.81), so the weight moves.
    - A query without CJK characters (English and other Western languages):
      hybrid_dense_weight_western (0.6) at any length (scifact: best at 0.6, and the
      length schedule, calibrated on Chinese characters, does not transfer).

    Then the weight moves towards the channel whose best hit stands out more: minus
    hybrid_margin_slope (0.6) times the difference of the channels' top-1 margins.
    """
    items = list(candidates)
    knobs = retrieval_settings()
    if is_traditional(query):
        base = knobs.hybrid_dense_weight_traditional
    elif not has_cjk(query):
        base = knobs.hybrid_dense_weight_western
    else:
        short_units, long_units = knobs.hybrid_short_units, knobs.hybrid_long_units
        short_weight, long_weight = knobs.hybrid_dense_weight_short, knobs.hybrid_dense_weight_long
        progress = min(1.0, max(0.0, (query_units(query) - short_units) / max(1, long_units - short_units)))
        base = short_weight - (short_weight - long_weight) * progress
    slope = knobs.hybrid_margin_slope
    keyword = _margin([c.keyword_score for c in items if c.keyword_rank is not None and c.keyword_score is not None])
    dense = _margin([c.vector_score for c in items if c.vector_rank is not None and c.vector_score is not None],
                    reference_rank=20)
    return min(0.9, max(0.3, base - slope * (keyword - dense)))


def _minmax(values: dict[Any, float]) -> dict[Any, float]:
    """Each value scaled to 0–1 over them all (all 1 when they are equal)."""
    if not values:
        return {}
    low, high = min(values.values()), max(values.values())
    return {key: (value - low) / (high - low) if high > low else 1.0 for key, value in values.items()}


def _over_best(values: dict[Any, float]) -> dict[Any, float]:
    best = max(values.values(), default=0.0)
    return {key: value / best if best > 0 else 0.0 for key, value in values.items()}


def fuse(candidates: dict[Any, Candidate], *, fusion: str, dense_weight: float, window_dense: float = 0.0,
         window_keyword: float = 0.0) -> list[Candidate]:
    """Give every candidate its fused score (0–1 for convex; for rrf, the sum over the channels
    that ranked it of 1 / (60 + its 1-based rank there)) and return them best first, ties by id.

    Convex: dense_weight × dense + (1 − dense_weight) × keyword, where dense is the candidate's
    cosine min-max scaled over the candidates and keyword its BM25 over the best; with windows
    read, each is blended with the same figure of the candidate's best window (`window_dense`,
    `window_keyword` the windows' shares). A candidate whose windows were not read (it has none,
    or it was outside `hybrid_window_pool`) is its own window: its cosine and BM25 are scaled with
    the windows'."""
    items = list(candidates.values())
    if not items:
        return []
    if fusion == "rrf":
        for c in items:
            c.score = sum(1.0 / (RRF_K + rank) for rank in (c.vector_rank, c.keyword_rank) if rank is not None)
            c.fusion = fusion
    else:
        dense = _minmax({c.chunk_id: c.vector_score for c in items if c.vector_score is not None})
        keyword = _over_best({c.chunk_id: c.keyword_score or 0.0 for c in items})
        dense_windows: dict[Any, float] = {}
        keyword_windows: dict[Any, float] = {}
        if window_dense or window_keyword:
            own_window = {c.chunk_id: c.window_cosine if c.window_cosine is not None else c.vector_score
                          for c in items}
            dense_windows = _minmax({key: value for key, value in own_window.items() if value is not None})
            keyword_windows = _over_best({c.chunk_id: c.window_keyword if c.window_keyword is not None
                                          else c.keyword_score or 0.0 for c in items})
        # Without a window read (none in the KB, or none among the candidates) the blend changes nothing.
        blended = bool(window_dense or window_keyword) and any(c.window_cosine is not None for c in items)
        for c in items:
            d = dense.get(c.chunk_id, 0.0)
            k = keyword[c.chunk_id]
            d = (1 - window_dense) * d + window_dense * dense_windows.get(c.chunk_id, d)
            k = (1 - window_keyword) * k + window_keyword * keyword_windows.get(c.chunk_id, k)
            c.score = dense_weight * d + (1 - dense_weight) * k
            c.dense_weight = dense_weight
            c.fusion = fusion
            c.window_blend = None if not blended else "best window" if c.window_cosine is not None else "own scores"
    return sorted(items, key=lambda c: (-c.score, str(c.chunk_id)))


@dataclass
class VectorChannel:
    """What the vector channel brings back: the query's vector and how long embedding it took
    (0 when it was given), vector_candidates' rows, the BM25 of those rows when keyword columns
    were asked for ({id: (score, matched terms)}), and the channel's own time."""

    query_vector: list[float]
    embedding_ms: float
    rows: list[tuple]
    keyword_scores: dict
    ms: float


def _vector_channel(*, model: EmbeddingModel, query: str = "", query_vector: list[float] | None = None,
                    keyword_columns: tuple[str, list] | None = None, scorer: Future | None = None,
                    embedded: Future | None = None, **channel_args: Any) -> VectorChannel:
    """The vector channel, embedding the query first unless its vector is given. `embedded`
    receives the vector as soon as it exists (the keyword thread completes its own candidates
    with it while this one searches). With `keyword_columns` (keyword_row_columns), each row's
    keyword columns are read in the same query, and scored by the KeywordScorer (or None) that
    `scorer` resolves to: convex fusion needs the BM25 of every vector candidate the keyword
    channel did not bring. The caller reads the scorer's statistics while this walks."""
    started = time.perf_counter()
    try:
        if query_vector is None:
            query_vector = embedder_for(model).embed_query(query)
    except BaseException as error:
        if embedded is not None:
            embedded.set_exception(error)
        raise
    if embedded is not None:
        embedded.set_result(query_vector)
    embedded_at = time.perf_counter()
    rows = vector_candidates(model=model, query_vector=query_vector, extra_columns=keyword_columns or ("", []),
                             **channel_args)
    keyword = scorer.result() if keyword_columns is not None and scorer is not None else None
    keyword_scores = keyword.score_rows(row[4:] for row in rows) if keyword is not None else {}
    return VectorChannel(query_vector=query_vector, embedding_ms=(embedded_at - started) * 1000, rows=rows,
                         keyword_scores=keyword_scores, ms=(time.perf_counter() - embedded_at) * 1000)


def _query_vector_from(embedded: Future, beside: Future) -> list[float]:
    """The query vector the worker thread embeds, as soon as it exists; the worker's error if it
    failed before (a worker that stops early never leaves this waiting)."""
    futures.wait([embedded, beside], return_when=futures.FIRST_COMPLETED)
    if not embedded.done():
        beside.result()  # finished without embedding: raises its error
        raise RuntimeError("the search worker finished without embedding the query")
    return embedded.result()


def _add(timings: dict[str, float], name: str, ms: float) -> None:
    timings[name] = timings.get(name, 0.0) + ms


def _rank_candidates(*, model: EmbeddingModel, generation_ids: list, query: str, options: SearchOptions,
                     timings: dict[str, float], fusion: str = "convex",
                     indexes: GenerationIndexes = GenerationIndexes()) -> list[Candidate]:
    """One embedding-model group: channel candidates, completed and fused, best first, read
    through the indexes the generations have (`indexes`).

    Convex fusion completes each channel's candidates with the other channel's score: the vector
    channel reads its rows' BM25 in its own query; the keyword candidates' cosines come with them
    when the query vector is given (the keyword channel's own read), else they are read by this
    thread once the worker has embedded the query, while the vector channel still runs — all of
    them, since which ones the vector channel will also bring is not known yet."""
    # 50 per channel: on dureader, cmrc and drcd nDCG@10 within 0.0002 of 100, and half the fill-in work.
    limit = options.candidate_k or retrieval_settings().search_candidates
    tf_stored = set(generation_ids) <= indexes.stored_tf
    hybrid = options.mode == "hybrid"
    candidates: dict[Any, Candidate] = {}
    scorer = None
    query_vector: list[float] | None = None  # embedded only for the vector and hybrid modes, which alone read it
    channel: VectorChannel | None = None
    beside: Future | None = None
    embedded: Future | None = None
    scored: Future = Future()  # the keyword scorer, for the vector channel's rows
    if options.mode in ("vector", "hybrid"):
        # The vector channel starts before the keyword statistics are read: its SQL needs the
        # query's terms alone, and it takes the scorer when its rows are back.
        channel_args: dict[str, Any] = dict(model=model, generation_ids=generation_ids, limit=limit,
                                            indexed=indexes.vector, need=options.top_k)
        if hybrid:
            channel_args["ef_search"] = retrieval_settings().hybrid_vector_ef_search
            terms = query_terms(query)
            if fusion == "convex" and terms:
                channel_args.update(keyword_columns=keyword_row_columns(terms, stored_tf=tf_stored), scorer=scored)
        if hybrid and options.embed_beside:
            # The query's embedding and then the vector channel run on a second connection's thread
            # while this thread does keywords.
            embedded = Future()
            beside = parallel.run_beside(_vector_channel, query=query, embedded=embedded, **channel_args)
        if beside is None:
            embedded = None
            started = time.perf_counter()
            query_vector = embedder_for(model).embed_query(query)
            _add(timings, "query_embedding_ms", (time.perf_counter() - started) * 1000)
            if hybrid:
                # The vector channel alone on the second connection.
                beside = parallel.run_beside(_vector_channel, query_vector=query_vector, **channel_args)
            else:
                channel = _vector_channel(query_vector=query_vector, **channel_args)
    if hybrid:
        try:
            scorer = keyword_scorer(generation_ids=generation_ids, query=query, stored_tf=tf_stored,
                                    posting_budget=retrieval_settings().hybrid_keyword_posting_budget)
        except BaseException as error:
            scored.set_exception(error)  # a worker waiting for it stops too
            raise
        scored.set_result(scorer)
    cosines: dict[Any, float] = {}
    if options.mode in ("keyword", "hybrid"):
        started = time.perf_counter()
        # A query vector already here (not embedded beside) comes along: the candidates' cosines
        # are read with them.
        along = hybrid and fusion == "convex" and query_vector is not None
        keyword, scorer = keyword_candidates(generation_ids=generation_ids, query=query, limit=limit, scorer=scorer,
                                             stored_tf=tf_stored, own_index=indexes.keyword,
                                             model=model if along else None, query_vector=query_vector)
        for rank, (cid, score, terms, placement, cosine) in enumerate(keyword, start=1):
            candidates[cid] = Candidate(chunk_id=cid, keyword_rank=rank, keyword_score=score, matched_terms=terms,
                                        placement=placement)
            if cosine is not None:
                cosines[cid] = cosine
        _add(timings, "keyword_ms", (time.perf_counter() - started) * 1000)
    fill_ms = 0.0
    if hybrid:
        unread = [cid for cid in candidates if cid not in cosines]
        if beside is not None and fusion == "convex" and unread:
            if query_vector is None:
                assert embedded is not None  # the worker embeds the query
                query_vector = _query_vector_from(embedded, beside)
            started = time.perf_counter()
            cosines.update(_vector_scores(model=model, ids=unread, query_vector=query_vector))
            fill_ms = (time.perf_counter() - started) * 1000
        channel = beside.result() if beside is not None else _vector_channel(query_vector=query_vector, **channel_args)
    if channel is not None:
        query_vector = channel.query_vector
        _add(timings, "query_embedding_ms", channel.embedding_ms)
        _add(timings, "vector_ms", channel.ms)
        for rank, (cid, score, parent_id, document_id, *_rest) in enumerate(channel.rows, start=1):
            candidate = candidates.setdefault(cid, Candidate(chunk_id=cid, placement=(parent_id, document_id)))
            candidate.vector_rank, candidate.vector_score = rank, float(score)
            if candidate.keyword_score is None and cid in channel.keyword_scores:
                candidate.keyword_score, candidate.matched_terms = channel.keyword_scores[cid]
    if options.mode == "vector":
        for c in candidates.values():
            c.score = c.vector_score or 0.0
        return sorted(candidates.values(), key=lambda c: (-c.score, str(c.chunk_id)))
    if options.mode == "keyword":
        best = max((c.keyword_score or 0.0) for c in candidates.values()) if candidates else 0.0
        for c in candidates.values():
            c.score = (c.keyword_score or 0.0) / best if best else 0.0
        return sorted(candidates.values(), key=lambda c: (-c.score, str(c.chunk_id)))
    started = time.perf_counter()
    if fusion == "convex":
        missing = [cid for cid, c in candidates.items() if c.vector_score is None and cid not in cosines]
        if missing and query_vector is not None:
            cosines.update(_vector_scores(model=model, ids=missing, query_vector=query_vector))
        for cid, score in cosines.items():
            if candidates[cid].vector_score is None:
                candidates[cid].vector_score = float(score)
    knobs = retrieval_settings()
    window_dense, window_keyword = knobs.hybrid_window_dense, knobs.hybrid_window_keyword
    dense_weight = options.dense_weight
    adaptive = dense_weight is None
    if dense_weight is None:
        dense_weight = adaptive_dense_weight(candidates.values(), query=query)
    windows = 0
    if (fusion == "convex" and (window_dense or window_keyword) and query_vector is not None
            and indexes.windowed.intersection(generation_ids)):
        windows_started = time.perf_counter()
        read = candidates
        if 0 < knobs.hybrid_window_pool < len(candidates):
            first = fuse(candidates, fusion=fusion, dense_weight=dense_weight)[:knobs.hybrid_window_pool]
            read = {c.chunk_id: c for c in first}
        windows = window_scores(read, model=model, query_vector=query_vector, scorer=scorer)
        _add(timings, "windows_ms", (time.perf_counter() - windows_started) * 1000)
    if adaptive and windows:
        dense_weight = min(0.95, max(0.05, dense_weight + knobs.hybrid_window_shift))
    ranked = fuse(candidates, fusion=fusion, dense_weight=dense_weight, window_dense=window_dense,
                  window_keyword=window_keyword)
    # Completing the candidates counts as fusion, even where it overlapped the vector channel.
    _add(timings, "fusion_ms", fill_ms + (time.perf_counter() - started) * 1000)
    return ranked


def _merge_by_rank(groups: list[list[Candidate]]) -> list[Candidate]:
    if len(groups) == 1:
        return groups[0]
    rrf: dict[Any, float] = defaultdict(float)
    by_id: dict[Any, Candidate] = {}
    for group in groups:
        for rank, candidate in enumerate(group, start=1):
            rrf[candidate.chunk_id] += 1.0 / (RRF_K + rank)
            by_id[candidate.chunk_id] = candidate
    return sorted(by_id.values(), key=lambda c: (-rrf[c.chunk_id], -c.score, str(c.chunk_id)))


# Roll-up and budget


def utf8_window(text: str, *, start: int, end: int, budget: int) -> tuple[int, int]:
    """A [lo, hi) character window of `text` containing [start, end) as far as the budget allows,
    at most `budget` UTF-8 bytes, grown evenly on both sides. Never splits a character."""
    if len(text.encode("utf-8")) <= budget:
        return 0, len(text)
    sizes = [len(ch.encode("utf-8")) for ch in text]
    start, end = max(0, min(start, len(text))), max(0, min(end, len(text)))
    used = sum(sizes[start:end])
    if used > budget:  # the hit alone is larger: keep its beginning
        hi, used = start, 0
        while hi < len(text) and used + sizes[hi] <= budget:
            used += sizes[hi]
            hi += 1
        return start, hi
    lo, hi = start, end
    while True:
        grew = False
        if hi < len(text) and used + sizes[hi] <= budget:
            used += sizes[hi]
            hi += 1
            grew = True
        if lo > 0 and used + sizes[lo - 1] <= budget:
            lo -= 1
            used += sizes[lo]
            grew = True
        if not grew:
            return lo, hi


def _choose(ranked: list[Candidate], placed: dict[Any, tuple], *, top_k: int, max_docs: int | None,
            rollup: bool) -> dict[Any, list[Candidate]]:
    """The shown groups, best first: {section (or chunk) id: its candidates}, at most `top_k`
    groups from at most `max_docs` documents, of the candidates in `placed` ({id: (parent id,
    document id)})."""
    chosen: dict[Any, list[Candidate]] = {}
    documents: list[Any] = []
    for candidate in ranked:
        if candidate.chunk_id not in placed:
            continue
        parent_id, document_id = placed[candidate.chunk_id]
        key = (parent_id or candidate.chunk_id) if rollup else candidate.chunk_id
        if key not in chosen:
            if len(chosen) >= top_k:
                continue
            if max_docs is not None and document_id not in documents and len(documents) >= max_docs:
                continue
            chosen[key] = []
            if document_id not in documents:
                documents.append(document_id)
        chosen[key].append(candidate)
    return chosen


_SHOWN_COLUMNS = ("id", "document_id", "document__knowledge_base_id", "document__filename", "document__status",
                  "index", "text", "chapter_path", "metadata", "parent_id", "parent__text")


def _shown_rows(ids: list, *, with_parent: bool) -> list[dict]:
    """The enabled children among `ids` with their documents' KB, filename and status, and their
    parents' text (`with_parent`), keyed as _SHOWN_COLUMNS. Plain SQL: the ORM's query building
    took twice as long as the read (~2.3 ms against 1.1)."""
    parent = ("p.text FROM knowledge_chunk c LEFT JOIN knowledge_chunk p ON p.id = c.parent_id" if with_parent
              else "NULL FROM knowledge_chunk c")
    with connection.cursor() as cursor:
        cursor.execute(
            'SELECT c.id, c.document_id, d.knowledge_base_id, d.filename, d.status, c."index", c.text, '
            f"c.chapter_path, c.metadata, c.parent_id, {parent} JOIN knowledge_document d ON d.id = c.document_id "
            "WHERE c.id = ANY(%s::uuid[]) AND NOT c.disabled",
            [ids],
        )
        rows = [dict(zip(_SHOWN_COLUMNS, row, strict=True)) for row in cursor.fetchall()]
    for row in rows:
        # jsonb arrives as text (Django's psycopg set-up leaves the decoding to JSONField).
        row["metadata"] = json.loads(row["metadata"])
    return rows


def _rollup(ranked: list[Candidate], *, top_k: int, max_docs: int | None, budget: int, explain: bool,
            rollup: bool) -> list[Hit]:
    if not ranked:
        return []
    # Group on where every candidate sits (read with the channels' rows), then read text and
    # metadata only for the members of the groups that are shown.
    placed = {c.chunk_id: c.placement for c in ranked if c.placement is not None}
    unplaced = [c.chunk_id for c in ranked if c.placement is None]
    if unplaced:
        placed.update({chunk_id: (parent_id, document_id) for chunk_id, parent_id, document_id in Chunk.objects.filter(
            id__in=unplaced, disabled=False).values_list("id", "parent_id", "document_id")})
    # The shown children with their sections' text and their documents' status, in one read.
    # Only documents whose ingestion completed are shown: a chosen chunk of another document, or
    # one deleted or disabled since the channels read it, gives its place to the next candidate
    # (another read; the other candidates of that document go too).
    children: dict[Any, dict] = {}
    while True:
        chosen = _choose(ranked, placed, top_k=top_k, max_docs=max_docs, rollup=rollup)
        wanted = [c.chunk_id for members in chosen.values() for c in members if c.chunk_id not in children]
        rows = _shown_rows(wanted, with_parent=rollup) if wanted else []
        unfinished = {row["document_id"] for row in rows if row["document__status"] != Document.Status.COMPLETED}
        children.update({row["id"]: row for row in rows if row["document_id"] not in unfinished})
        gone = {chunk_id for chunk_id in wanted if chunk_id not in children}
        if not gone:
            break
        placed = {chunk_id: place for chunk_id, place in placed.items()
                  if chunk_id not in gone and place[1] not in unfinished}
    groups = {key: pairs for key, members in chosen.items()
              if (pairs := [(c, children[c.chunk_id]) for c in members if c.chunk_id in children])}
    parents = {row["parent_id"]: row["parent__text"] for row in children.values()
               if rollup and row["parent_id"] and row["parent__text"] is not None}
    hits = []
    for members in groups.values():
        best, child = members[0]
        parent_text = parents.get(child["parent_id"])
        metadata = dict(child["metadata"] or {})
        if parent_text is not None:
            spans = [(m[1]["metadata"] or {}).get("parent_start") for m in members]
            ends = [(m[1]["metadata"] or {}).get("parent_end") for m in members]
            known_spans = [span for span in spans if span is not None]
            known_ends = [span_end for span_end in ends if span_end is not None]
            if len(known_spans) < len(spans) or len(known_ends) < len(ends):
                start, end = 0, len(child["text"])
            else:
                start, end = min(known_spans), max(known_ends)
                best_start = (child["metadata"] or {})["parent_start"]
                best_end = (child["metadata"] or {})["parent_end"]
                if len(parent_text[start:end].encode("utf-8")) > budget:
                    start, end = best_start, best_end
            lo, hi = utf8_window(parent_text, start=start, end=end, budget=budget)
            content = parent_text[lo:hi]
            metadata.update({"parent_window": [lo, hi], "parent_chars": len(parent_text),
                             "truncated": (lo, hi) != (0, len(parent_text)),
                             "merged_chunks": len(members)})
        else:
            lo, hi = utf8_window(child["text"], start=0, end=len(child["text"]), budget=budget)
            content = child["text"][lo:hi]
            metadata.update({"truncated": (lo, hi) != (0, len(child["text"])), "merged_chunks": len(members)})
        explanation = None
        if explain:
            explanation = {
                "vector": {"rank": best.vector_rank, "score": best.vector_score},
                "keyword": {"rank": best.keyword_rank, "score": best.keyword_score},
                "window": {"cosine": best.window_cosine, "bm25": best.window_keyword, "blend": best.window_blend},
                "matched_terms": best.matched_terms,
                "fused_score": best.score,
                "fusion": best.fusion,
                "dense_weight": best.dense_weight,
                "rerank_score": best.rerank_score,
                "merged_chunk_ids": [str(m[0].chunk_id) for m in members],
            }
        hits.append(Hit(
            chunk_id=child["id"], document_id=child["document_id"],
            knowledge_base_id=child["document__knowledge_base_id"], chunk_index=child["index"], content=content,
            score=round(float(best.score), 6), chapter_path=child["chapter_path"], metadata=metadata,
            title=child["document__filename"], parent_id=child["parent_id"], explain=explanation,
        ))
    return hits


def search(*, kbs: Iterable[KnowledgeBase], query: str, options: SearchOptions | None = None) -> SearchResult:
    """Hits for `query` over the active generations of `kbs`, best first (see the module doc).
    Each KB's fusion, reranker and embedding model are taken as the caller read them
    (select_related("embedding_model") spares a read per KB)."""
    options = options or SearchOptions()
    timings: dict[str, float] = {}
    started = time.perf_counter()
    kb_by_id = {kb.pk: kb for kb in kbs}
    generations = _active_generations(list(kb_by_id))
    # KBs are searched together when they share a model and a fusion and have no reranker of their
    # own; a KB with a reranker is a group of its own, so its reranker sees only its candidates.
    groups_of: dict[tuple, list] = defaultdict(list)
    rerankers: dict[Any, RerankConfig] = {}
    models: dict[str, EmbeddingModel] = {}
    for generation in generations:
        kb = kb_by_id[generation.knowledge_base_id]
        config = RerankConfig.of(kb) if options.rerank else None
        fusion = options.fusion or kb.fusion
        key = (str(kb.embedding_model_id), fusion if options.mode == "hybrid" else "", str(kb.pk) if config else "")
        if config is not None:
            rerankers[key] = config
        groups_of[key].append(generation.pk)
        models[key[0]] = kb.embedding_model  # read once per KB unless the caller selected it
    indexes = GenerationIndexes.of(generations)
    groups = []
    trace: list[dict] = []
    for key, generation_ids in sorted(groups_of.items()):
        ranked = _rank_candidates(model=models[key[0]], generation_ids=sorted(generation_ids, key=str),
                                  query=query, options=options, timings=timings, fusion=key[1] or "convex",
                                  indexes=indexes)
        if options.score_threshold is not None:
            ranked = [c for c in ranked if c.score >= options.score_threshold]
        if key in rerankers:
            ranked, step = rerank(ranked, query=query, config=rerankers[key], route_id=options.route_id)
            timings["rerank_ms"] = timings.get("rerank_ms", 0.0) + step["latency_ms"]
            trace.append(step)
        groups.append(ranked)
    merged = _merge_by_rank(groups) if groups else []
    budget = options.budget_bytes or retrieval_settings().result_budget_bytes
    hits = _rollup(merged, top_k=options.top_k, max_docs=options.max_docs, budget=budget,
                   explain=options.explain, rollup=options.rollup)
    timings["total_ms"] = (time.perf_counter() - started) * 1000
    fusions = sorted({key[1] for key in groups_of if key[1]})
    return SearchResult(hits=hits, timings_ms=timings, trace=trace, fusions=fusions)


_QUERY_WS = re.compile(r"\s+")


def clean_query(query: str) -> str:
    return _QUERY_WS.sub(" ", query).strip()
