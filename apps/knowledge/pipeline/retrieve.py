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
retrieval_settings, by the query's script: window_shares): a question matches one sentence of a
long child, and the child's own scores dilute it. A KB (KnowledgeBase.fusion) or one search
(SearchOptions.fusion) may choose `rrf` instead: each candidate scores the sum, over the channels
that ranked it, of 1 / (60 + its rank there). Convex fusion's scores are relative to the search's
candidates (its best scores about 1 whatever was asked), so they are then multiplied by the
probability that the KBs answer the question at all (pipeline.answerability), where the group's
embedding model is calibrated: the order stays, and a score threshold can mean "nothing here".

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

This module is the engine; its stages live beside it: pipeline.keyword_channel,
pipeline.vector_channel, pipeline.fusion (sentence windows, fusion), pipeline.answerability,
pipeline.rollup, and pipeline.candidates (what they pass around).
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from concurrent import futures
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from apps.knowledge.models import EmbeddingModel, IndexGeneration, KnowledgeBase
from apps.knowledge.pipeline import parallel
from apps.knowledge.pipeline.answerability import Answerability, answerability
from apps.knowledge.pipeline.candidates import Candidate, Hit
from apps.knowledge.pipeline.embedders import embedder_for
from apps.knowledge.pipeline.fusion import RRF_K, adaptive_dense_weight, fuse, window_scores, window_shares
from apps.knowledge.pipeline.keyword_channel import keyword_candidates, keyword_row_columns, keyword_scorer
from apps.knowledge.pipeline.rerank import RerankConfig, rerank
from apps.knowledge.pipeline.retrieval_settings import retrieval_settings
from apps.knowledge.pipeline.rollup import rollup
from apps.knowledge.pipeline.terms import ANALYZER as KEYWORD_ANALYZER
from apps.knowledge.pipeline.terms import query_terms
from apps.knowledge.pipeline.vector_channel import vector_candidates, vector_scores

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
class SearchResult:
    hits: list[Hit]
    timings_ms: dict[str, float] = field(default_factory=dict)
    # Steps worth telling a caller about (a rerank, and whether it fell back to the fused order).
    trace: list[dict] = field(default_factory=list)
    # The fusion each searched group used (hybrid mode), sorted.
    fusions: list[str] = field(default_factory=list)
    # Whether each convex-fused group answers the query at all, in group order.
    answerability: list[Answerability] = field(default_factory=list)
    # Every searched group's scores carry its answerability (convex fusion, a calibrated model):
    # a hit's score then says how likely it answers, comparable across searches, not only its rank.
    scores_calibrated: bool = False
    # The best score of any candidate, before a score threshold or a reranker (which may put others
    # first): with calibrated scores, how likely the best the KBs hold answers the query.
    best_score: float = 0.0


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
    # The KB's documents an operator turned off: no channel brings their chunks.
    withheld: tuple = ()


def _active_generations(kb_ids: list) -> list[ActiveGeneration]:
    """The active generation of each of the KBs that has one, with the KB's documents that are
    off (through a partial index of those alone). Plain SQL, as every read on a search's path:
    building the ORM's query cost more than running it (~2.4 ms against 0.4)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT g.id, g.knowledge_base_id, g.vector_indexed, g.keyword_indexed, g.keyword_analyzer, "
            "coalesce((g.chunk_strategy->>'window_chars')::int, 0) > 0, "
            "ARRAY(SELECT d.id FROM knowledge_document d WHERE d.knowledge_base_id = g.knowledge_base_id "
            "AND NOT d.enabled ORDER BY d.id) FROM knowledge_indexgeneration g "
            "WHERE g.knowledge_base_id = ANY(%s::uuid[]) AND g.status = %s",
            [kb_ids, IndexGeneration.Status.ACTIVE.value],
        )
        return [ActiveGeneration(pk, kb_id, vector, keyword, analyzer, windowed, tuple(withheld))
                for pk, kb_id, vector, keyword, analyzer, windowed, withheld in cursor.fetchall()]


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
    # The worker runs this again on a new connection when the one it kept had died
    # (pipeline.parallel): the query is embedded once, and `embedded` resolved once.
    if query_vector is None and embedded is not None and embedded.done() and embedded.exception() is None:
        query_vector = embedded.result()
    try:
        if query_vector is None:
            query_vector = embedder_for(model).embed_knowledge_query(query)
    except BaseException as error:
        if embedded is not None and not embedded.done():
            embedded.set_exception(error)
        raise
    if embedded is not None and not embedded.done():
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
                     indexes: GenerationIndexes = GenerationIndexes(), withheld: Sequence = (),
                     answers: list[Answerability] | None = None) -> list[Candidate]:
    """One embedding-model group: channel candidates, completed and fused, best first, read
    through the indexes the generations have (`indexes`), none of the documents in `withheld`.
    Convex fusion appends to `answers` whether the group answers the query at all, and scales the
    fused scores by it where the group's model is calibrated (pipeline.answerability).

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
                                            indexed=indexes.vector, need=options.top_k, withheld=withheld)
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
            query_vector = embedder_for(model).embed_knowledge_query(query)
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
                                             stored_tf=tf_stored, own_index=indexes.keyword, withheld=withheld,
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
            cosines.update(vector_scores(model=model, ids=unread, query_vector=query_vector))
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
            cosines.update(vector_scores(model=model, ids=missing, query_vector=query_vector))
        for cid, score in cosines.items():
            if candidates[cid].vector_score is None:
                candidates[cid].vector_score = float(score)
    knobs = retrieval_settings()
    window_dense, window_keyword, window_shift = window_shares(query)
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
        dense_weight = min(0.95, max(0.05, dense_weight + window_shift))
    ranked = fuse(candidates, fusion=fusion, dense_weight=dense_weight, window_dense=window_dense,
                  window_keyword=window_keyword)
    if fusion == "convex":
        answered = answerability(ranked, scorer=scorer, model=model, query=query)
        if answers is not None:
            answers.append(answered)
        if answered.probability is not None:
            for c in ranked:
                c.fused_score, c.answerability = c.score, answered.probability
                c.score *= answered.probability
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
    withheld = sorted((pk for generation in generations for pk in generation.withheld), key=str)
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
    answers: list[Answerability] = []
    best_score = 0.0
    for key, generation_ids in sorted(groups_of.items()):
        ranked = _rank_candidates(model=models[key[0]], generation_ids=sorted(generation_ids, key=str),
                                  query=query, options=options, timings=timings, fusion=key[1] or "convex",
                                  indexes=indexes, withheld=withheld, answers=answers)
        if ranked:
            best_score = max(best_score, ranked[0].score)
        if options.score_threshold is not None:
            ranked = [c for c in ranked if c.score >= options.score_threshold]
        if key in rerankers:
            ranked, step = rerank(ranked, query=query, config=rerankers[key], route_id=options.route_id)
            timings["rerank_ms"] = timings.get("rerank_ms", 0.0) + step["latency_ms"]
            trace.append(step)
        groups.append(ranked)
    merged = _merge_by_rank(groups) if groups else []
    budget = options.budget_bytes or retrieval_settings().result_budget_bytes
    hits = rollup(merged, top_k=options.top_k, max_docs=options.max_docs, budget=budget,
                   explain=options.explain, rollup=options.rollup)
    timings["total_ms"] = (time.perf_counter() - started) * 1000
    fusions = sorted({key[1] for key in groups_of if key[1]})
    # Only convex-fused hybrid groups tell their answerability: every group did, with a probability.
    calibrated = len(answers) == len(groups_of) > 0 and all(answer.probability is not None for answer in answers)
    return SearchResult(hits=hits, timings_ms=timings, trace=trace, fusions=fusions, answerability=answers,
                        scores_calibrated=calibrated, best_score=best_score)


_QUERY_WS = re.compile(r"\s+")


def clean_query(query: str) -> str:
    return _QUERY_WS.sub(" ", query).strip()
