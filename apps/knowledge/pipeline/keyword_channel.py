"""The keyword channel (pipeline.retrieve has the design): BM25 (k1=0.9, b=0.4) over CJK
unigrams+bigrams and stemmed words (pipeline.terms). Phase 1 reads the posting lists of the query's
rarest terms (every term for a small KB), summing idf; phase 2 scores the best of those exactly with
every query term."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection

from apps.knowledge.models import EmbeddingModel
from apps.knowledge.pipeline.candidates import PLACEMENT_COLUMNS, vector_literal, withheld_filter
from apps.knowledge.pipeline.index import embedding_text, generation_lexeme
from apps.knowledge.pipeline.retrieval_settings import retrieval_settings
from apps.knowledge.pipeline.terms import query_terms, term_frequencies

K1 = 0.9
B = 0.4


def _tsquery_lexeme(term: str) -> str:
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"


def term_stats(generation_ids: Sequence, terms: Sequence[str]) -> dict[str, int]:
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




def keyword_scorer(*, generation_ids: Sequence, query: str, stored_tf: bool = False,
                   posting_budget: int | None = None) -> KeywordScorer | None:
    """None when the query has no terms or the generations no indexed chunk. `stored_tf` only
    when every generation is at the current analyzer (the search engine checks)."""
    terms = query_terms(query)
    if not terms or not generation_ids:
        return None
    stats = term_stats(generation_ids, terms)
    n = stats.pop("#n", 0)
    total = stats.pop("#len", 0)
    if n <= 0:
        return None
    df = {t: d for t, d in stats.items() if d > 0}
    return KeywordScorer(terms=terms, df=df, idf={t: bm25_idf(d, n) for t, d in df.items()}, avg_length=total / n, n=n,
                         stored_tf=stored_tf, posting_budget=posting_budget)


SMALL_POSTINGS = 2_000


def phase1_terms(scorer: KeywordScorer) -> list[str]:
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
                    own_index: Iterable = (), cosine: tuple[int, str] | None = None,
                    withheld: Sequence = ()) -> list[tuple]:
    """The best `limit` chunks by summed idf of the phase-1 terms they hold, as the scorer's
    row_columns gives them followed by PLACEMENT_COLUMNS (one round trip: the ranking, the rows
    phase 2 scores and where they sit), then, with `cosine` (dimension, query vector literal),
    each row's cosine similarity to the query (None without an embedding). A
    generation in `own_index` is read through its own GIN index, the others through the shared
    one, each term's postings intersected with their lexemes. No chunk of a document in
    `withheld` (turned off) is read. Chunks tied at the cut go by their text's hash, then id: the
    same texts pass whichever ingestion made them (by id alone, a random UUID, two ingests of
    scifact ranked apart by up to 0.003 keyword nDCG@10; bench/README.md, stop 40).

    The terms are rows of an array, each joined laterally to its postings: one scan per index
    in the plan whatever the number of terms. (A branch per term, UNION ALL, made the planner
    test every partial index of knowledge_chunk once per term: 18 ms of planning beside 100
    generations with indexes of their own, 122 ms beside 400.)"""
    chosen = phase1_terms(scorer)
    if not chosen:
        return []
    owned = set(own_index)
    branches: list[str] = []
    params: list[Any] = [[_tsquery_lexeme(term) for term in chosen], [scorer.idf[term] for term in chosen]]
    skip, skip_params = withheld_filter(withheld)
    for generation_id in generation_ids:
        if generation_id in owned:
            # The generation named with its index's predicate (pipeline.sql.keyword_index_create_sql):
            # the planner matches the partial index, and no other index serves the clause.
            branches.append("SELECT id, text_hash FROM knowledge_chunk "  # noqa: S608 -- fixed SQL
                            "WHERE generation_id::text = %s AND kind = 'child' "
                            f"AND search_vector @@ t.term::tsquery AND NOT disabled{skip}")
            params += [str(generation_id), *skip_params]
    shared = [g for g in generation_ids if g not in owned]
    if shared:
        branches.append("SELECT id, text_hash FROM knowledge_chunk "  # noqa: S608 -- fixed SQL
                        f"WHERE search_vector @@ (%s::tsquery && t.term::tsquery) AND NOT disabled{skip}")
        params += [" | ".join(_tsquery_lexeme(generation_lexeme(g)) for g in shared), *skip_params]
    columns, column_params = scorer.row_columns()
    similarity, similarity_params = "", []
    if cosine is not None:
        dim, vector = int(cosine[0]), cosine[1]
        similarity, similarity_params = f", 1 - (c.embedding::vector({dim}) <=> %s::vector({dim}))", [vector]
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH best AS (SELECT h.id FROM unnest(%s::text[], %s::float8[]) AS t(term, w) "  # noqa: S608 -- fixed SQL
            f"CROSS JOIN LATERAL ({' UNION ALL '.join(branches)}) AS h "
            "GROUP BY h.id, h.text_hash ORDER BY sum(t.w) DESC, h.text_hash, h.id LIMIT %s) "
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
                       query_vector: Sequence[float] | None = None,
                       withheld: Sequence = ()) -> tuple[KeywordHits, KeywordScorer | None]:
    """[(chunk id, BM25, matched terms, placement, cosine)] best first. `own_index`: the
    generations with a GIN index of their own. With `model` and `query_vector` each candidate's
    cosine similarity is read with it (hybrid fusion needs it; a read of its own cost ~4 ms at
    1M chunks), else it is None. None of the documents in `withheld` (turned off)."""
    scorer = scorer or keyword_scorer(generation_ids=generation_ids, query=query, stored_tf=stored_tf)
    if scorer is None or not scorer.idf:
        return [], scorer
    phase1_limit = max(limit, retrieval_settings().keyword_phase1_limit)
    cosine = None
    if model is not None and query_vector is not None:
        cosine = (model.dimension, vector_literal(query_vector))
    rows = _keyword_phase1(generation_ids, scorer, phase1_limit, own_index, cosine=cosine, withheld=withheld)
    width = len(rows[0]) - (3 if cosine else 2) if rows else 0  # the scorer's columns
    placement = {row[0]: (row[width], row[width + 1]) for row in rows}
    similarity = {row[0]: row[-1] for row in rows} if cosine else {}
    scored = scorer.score_rows(row[:width] for row in rows)
    ranked = sorted(scored.items(), key=lambda item: (-item[1][0], str(item[0])))
    return [(cid, s, terms, placement[cid], similarity.get(cid)) for cid, (s, terms) in ranked if s > 0][:limit], scorer
