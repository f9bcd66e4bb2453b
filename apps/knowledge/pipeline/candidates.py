"""What the stages of a search pass around (pipeline.retrieve has the design): a candidate as the
channels bring it, fusion scores it and the roll-up places it; the hit a search returns; the
columns that place a candidate; and a query vector as the SQL of every cosine read spells it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


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
    # The probability that the searched KBs answer the query at all (pipeline.answerability), by
    # which hybrid search multiplied the fused score (then kept in fused_score); None when it did not.
    answerability: float | None = None
    fused_score: float | None = None


# Columns every channel reads beside its own (over alias c): where a candidate sits, for the roll-up.
PLACEMENT_COLUMNS = "c.parent_id, c.document_id"


def withheld_filter(withheld: Sequence) -> tuple[str, list]:
    """The channels' clause (leading AND included) and parameters that skip the chunks of the
    documents in `withheld` (turned off); nothing without any, so such a search's statement stays
    as it was."""
    return (" AND document_id <> ALL(%s::uuid[])", [list(withheld)]) if withheld else ("", [])


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


def vector_literal(query_vector: Sequence[float]) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in query_vector) + "]"
