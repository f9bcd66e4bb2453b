"""Hybrid fusion (pipeline.retrieve has the design): each candidate's best sentence window
(window_scores), the dense weight set per query (adaptive_dense_weight), and the channels' scores
combined convexly or by RRF (fuse)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

from django.db import connection

from apps.knowledge.models import EmbeddingModel
from apps.knowledge.pipeline.candidates import Candidate, vector_literal
from apps.knowledge.pipeline.han import is_traditional
from apps.knowledge.pipeline.keyword_channel import K1, B, KeywordScorer
from apps.knowledge.pipeline.retrieval_settings import retrieval_settings
from apps.knowledge.pipeline.terms import has_cjk, is_cjk_term, keyword_terms

RRF_K = 60


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
            [vector_literal(query_vector), terms, list(candidates), terms, idf],
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


Script = Literal["traditional", "simplified", "western"]


def query_units(query: str) -> int:
    """Length of a query in CJK characters plus words (a Chinese character counts as a word)."""
    return sum(1 for t in keyword_terms(query) if not is_cjk_term(t) or len(t) == 1)


def query_script(query: str) -> Script:
    """"traditional" (a Traditional-only character), "simplified" (other CJK) or "western" (no
    CJK): the fusion's parameters that differ by script are chosen by this."""
    if is_traditional(query):
        return "traditional"
    return "simplified" if has_cjk(query) else "western"


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
    script = query_script(query)
    if script == "traditional":
        base = knobs.hybrid_dense_weight_traditional
    elif script == "western":
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


def window_shares(query: str) -> tuple[float, float, float]:
    """(dense share, keyword share, dense-weight shift) of the candidates' best windows in convex
    fusion, by the query's script as the dense weight is: hybrid_window_*_traditional,
    hybrid_window_* (Simplified Chinese) or hybrid_window_*_western."""
    knobs = retrieval_settings()
    script = query_script(query)
    if script == "traditional":
        return (knobs.hybrid_window_dense_traditional, knobs.hybrid_window_keyword_traditional,
                knobs.hybrid_window_shift_traditional)
    if script == "western":
        return knobs.hybrid_window_dense_western, knobs.hybrid_window_keyword_western, knobs.hybrid_window_shift_western
    return knobs.hybrid_window_dense, knobs.hybrid_window_keyword, knobs.hybrid_window_shift


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
