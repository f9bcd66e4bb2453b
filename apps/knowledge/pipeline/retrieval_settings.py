"""The retrieval knobs: one declared, documented settings object with defaults and bounds.

`settings.KNOWLEDGE_RETRIEVAL` (a dict; the environment variable of the same name takes JSON) sets
any of the keys below; everything else keeps its default. The values are checked when the app
starts (apps.knowledge.apps), so a typo or an out-of-range value stops the boot with its name,
not the first search.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, fields
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

# Old names still read, so a configuration written for them keeps starting: {old: new}.
RENAMED = {
    # 2026-12: it governs a generation's keyword (GIN) index as well as its HNSW index.
    "vector_index_min_rows": "generation_index_min_rows",
}


@dataclass(frozen=True)
class RetrievalSettings:
    # Candidates each channel brings to fusion (50: nDCG@10 within 0.0002 of 100 on the dev sets).
    search_candidates: int = 50
    # Byte budget of a search result's rolled-up hits.
    result_budget_bytes: int = 16 * 1024
    # Keyword phase 1: terms rarer than this share of chunks read their postings first, up to the
    # posting budget and at most `keyword_phase1_terms` terms; `keyword_phase1_limit` chunks go on
    # to exact BM25.
    keyword_rare_fraction: float = 0.03
    keyword_posting_budget: int = 20_000
    # The same budget in hybrid search, where the vector channel finds what more postings would.
    # Each posting is a heap page read (GIN has no index-only scan): at 100k chunks, 5,000 postings
    # made phase 1 ~8 ms of the search. Chosen on fold A of dureader beside 100k distractors, with
    # windows (stop 22; cmrc, drcd and dureader alone are too small to reach it): 500 / 1,000 /
    # 1,500 / 2,000 / 2,500 / 5,000 → hybrid nDCG@10 0.9493 / 0.9493 / 0.9503 / 0.9513 / 0.9513 /
    # 0.9502; held out, fold B: 0.9327 at 1,000 to 5,000 alike. Keyword channel p95 24 → 16 ms.
    hybrid_keyword_posting_budget: int = 2_000
    keyword_phase1_terms: int = 16
    keyword_phase1_limit: int = 100
    # A generation with more than `generation_index_min_rows` indexed children gets an HNSW and a
    # GIN index of its own (apps.knowledge.generation_indexes); smaller ones are scanned exactly
    # (~5 µs a row) and searched through the shared GIN index.
    generation_index_min_rows: int = 2_000
    # Vector channel: an HNSW index is searched with ef_search = max(this floor, 2 × candidates).
    # An index answer short of rows (disabled chunks) is completed by an exact scan while the
    # generations searched have at most `vector_exact_fallback_max` rows.
    # Chosen on one fold of dureader's queries beside 100k distractors, the same on the other:
    # 200 → 400 took held-out vector nDCG@10 from 0.9005 to 0.9226 (an exact scan's figure).
    vector_ef_search: int = 400
    # The same floor in hybrid search, where the keyword channel finds what a longer walk would.
    # Dureader beside 100k distractors, with windows (bench/README.md, stop 35): 150 / 200 / 250 /
    # 300, hybrid nDCG@10 fold A 0.9488 / 0.9575 / 0.9575 / 0.9575, fold B 0.9328 at all four;
    # chosen on A (the smallest of A's best), held out B the same as 300. scifact alone (5,602
    # chunks): fold A 0.7396 at all, fold B 0.7562 at 200 against 0.7578 at 300 — a trade made
    # after seeing both folds: the walk is the longer channel, and 200 takes ~2.5 ms off its p50
    # and brings the 100k p95 under 25 ms (300 was chosen at stop 15, before windows).
    hybrid_vector_ef_search: int = 200
    vector_exact_fallback_max: int = 20_000
    # The HNSW graph a generation's index is built with (pgvector's `m` and `ef_construction`),
    # fixed when the index is built: a change reaches a KB's search at its next rebuild. The
    # defaults are pgvector's. Dureader beside 100k distractors (bench/hnsw_recall.py; bench/README,
    # stop 17): m 24 / ef_construction 200 walks at ef_search 200 to recall@10 0.980 of the exact
    # top 10 (the default graph: 0.954 at 300) in about the same time, and takes 3.2x as long to
    # build (314 s against 98 s). Chosen that way on either fold, hybrid nDCG@10 fold A 0.9496 (the
    # same) and fold B 0.9245 (0.9217). Not the default: the search's ef_search is one number for
    # every graph, and 200 on a graph built before would lose fold B 0.006.
    vector_index_m: int = 16
    vector_index_ef_construction: int = 64
    # Hybrid fusion: the dense weight by script (Traditional Chinese, no CJK), and for Simplified
    # Chinese a schedule from `short` to `long` over the query's length in units; then moved by
    # `hybrid_margin_slope` times the difference of the channels' top-1 margins.
    hybrid_dense_weight_traditional: float = 0.35
    hybrid_dense_weight_western: float = 0.6
    hybrid_dense_weight_short: float = 0.85
    hybrid_dense_weight_long: float = 0.35
    hybrid_short_units: int = 10
    hybrid_long_units: int = 16
    hybrid_margin_slope: float = 0.6
    # Sentence windows (pipeline.windows): convex fusion blends each candidate's best window into
    # both channels, dense = (1 - hybrid_window_dense) × its cosine + hybrid_window_dense × its
    # best window's cosine (each min-max scaled over the candidates), keyword likewise with BM25 /
    # best and hybrid_window_keyword, and moves the adaptive dense weight by hybrid_window_shift
    # (within 0.05–0.95). 0 and 0: windows are not read. These three serve a query in Simplified
    # Chinese; chosen on one fold of the three Chinese dev sets together, reported on the other
    # (bench/README.md, stop 20).
    hybrid_window_dense: float = 0.5
    hybrid_window_keyword: float = 0.75
    hybrid_window_shift: float = 0.1
    # The same three for a query without CJK characters (as hybrid_dense_weight_western): English
    # text has windows of its own width (pipeline.windows), and the Chinese choice moved the dense
    # weight the wrong way there. scifact with windows (bench/README.md, stop 23), a grid of dense
    # 0–0.75 × keyword 0 / 0.75 / 1 × shift 0 / 0.1: chosen on fold A (0.75, 0, 0), held out fold B
    # hybrid nDCG@10 0.7547 (the Chinese choice: 0.7453, no windows 0.7421); chosen on B
    # (0.75, 1, 0), held out A 0.7262 (0.7192; 0.7171). Shift 0 beat 0.1 in every cell of both folds.
    hybrid_window_dense_western: float = 0.75
    hybrid_window_keyword_western: float = 0.0
    hybrid_window_shift_western: float = 0.0
    # The same three for a query with Traditional-only characters (as hybrid_dense_weight_traditional):
    # e5-small reads Traditional Chinese poorly, a whole passage worse than its best sentence. drcd
    # with windows (bench/README.md, stop 24), a grid of dense 0.25–1 × keyword 0.75 / 1 × shift
    # 0 / 0.1: chosen on fold A (1, 0.75, 0.1), held out fold B hybrid nDCG@10 0.9780 (the Chinese
    # choice: 0.9758); chosen on B (1, 1, 0.1), held out A 0.9782 (0.9744).
    hybrid_window_dense_traditional: float = 1.0
    hybrid_window_keyword_traditional: float = 0.75
    hybrid_window_shift_traditional: float = 0.1
    # Windows are read for the best `hybrid_window_pool` candidates of the fusion without them (0:
    # every candidate); the others are their own windows. 0 / 20 / 30 / 50 on the three sets: 30
    # chosen on either fold; held out, −0.002 to +0.0006 nDCG@10 against reading every
    # candidate's, 4 ms less at p50 on drcd (bench/README.md, stop 21).
    hybrid_window_pool: int = 30

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            kind = int if field.type in ("int", int) else float
            if isinstance(value, bool) or not isinstance(value, int | float) or (kind is int and not isinstance(
                    value, int)):
                raise ImproperlyConfigured(f"KNOWLEDGE_RETRIEVAL[{field.name!r}] must be {kind.__name__}, "
                                           f"not {value!r}.")
            if field.name.startswith("hybrid_window_shift"):  # a move either way
                if not -0.5 <= value <= 0.5:  # also refuses NaN
                    raise ImproperlyConfigured(f"KNOWLEDGE_RETRIEVAL[{field.name!r}] must be within -0.5–0.5, "
                                               f"not {value!r}.")
                continue
            if value != value or value < 0:  # NaN or negative
                raise ImproperlyConfigured(f"KNOWLEDGE_RETRIEVAL[{field.name!r}] must be ≥ 0, not {value!r}.")
            share = (field.name.startswith("hybrid_dense_weight") or field.name.endswith("_fraction")
                     or field.name.startswith(("hybrid_window_dense", "hybrid_window_keyword")))
            if share and value > 1:
                raise ImproperlyConfigured(f"KNOWLEDGE_RETRIEVAL[{field.name!r}] must be within 0–1, "
                                           f"not {value!r}.")
        positive = ["search_candidates", "result_budget_bytes", "keyword_posting_budget",
                    "hybrid_keyword_posting_budget", "keyword_phase1_terms",
                    "keyword_phase1_limit", "vector_ef_search", "hybrid_vector_ef_search", "hybrid_short_units"]
        for name in positive:
            if getattr(self, name) < 1:
                raise ImproperlyConfigured(f"KNOWLEDGE_RETRIEVAL[{name!r}] must be ≥ 1.")
        if self.search_candidates > 1000:
            raise ImproperlyConfigured("KNOWLEDGE_RETRIEVAL['search_candidates'] must be ≤ 1000.")
        for name in ("vector_ef_search", "hybrid_vector_ef_search"):
            if getattr(self, name) > 1000:  # pgvector's own bound
                raise ImproperlyConfigured(f"KNOWLEDGE_RETRIEVAL[{name!r}] must be ≤ 1000.")
        if not 2 <= self.vector_index_m <= 100:  # pgvector's bounds
            raise ImproperlyConfigured("KNOWLEDGE_RETRIEVAL['vector_index_m'] must be within 2–100.")
        if not max(4, 2 * self.vector_index_m) <= self.vector_index_ef_construction <= 1000:
            raise ImproperlyConfigured("KNOWLEDGE_RETRIEVAL['vector_index_ef_construction'] must be within "
                                       "2 × vector_index_m (at least 4) and 1000.")
        if self.hybrid_long_units <= self.hybrid_short_units:
            raise ImproperlyConfigured("KNOWLEDGE_RETRIEVAL: hybrid_long_units must be > hybrid_short_units.")

    @classmethod
    def from_mapping(cls, values: Any) -> RetrievalSettings:
        if not isinstance(values, dict):
            raise ImproperlyConfigured("KNOWLEDGE_RETRIEVAL must be a JSON object of retrieval settings.")
        values = dict(values)
        for old, new in RENAMED.items():
            if old in values:
                if new in values:
                    raise ImproperlyConfigured(f"KNOWLEDGE_RETRIEVAL sets both {old!r} and {new!r}, the name it "
                                               f"has had since 2026-12; keep {new!r}.")
                values[new] = values.pop(old)
        known = {field.name for field in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ImproperlyConfigured(f"KNOWLEDGE_RETRIEVAL has unknown keys: {', '.join(map(str, unknown))}; "
                                       f"known: {', '.join(sorted(known))}.")
        return cls(**values)

    def replace(self, **changes: Any) -> RetrievalSettings:
        return dataclasses.replace(self, **changes)


@functools.cache
def retrieval_settings() -> RetrievalSettings:
    """The settings in force (validated; cached until settings.KNOWLEDGE_RETRIEVAL changes)."""
    return RetrievalSettings.from_mapping(getattr(settings, "KNOWLEDGE_RETRIEVAL", {}) or {})


@receiver(setting_changed)
def _forget(setting: str, **kwargs) -> None:
    if setting == "KNOWLEDGE_RETRIEVAL":
        retrieval_settings.cache_clear()
