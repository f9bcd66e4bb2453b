"""Answering a question from knowledge: retrieve → rerank → generate → record.

`rag_query_answer` is the whole path for a route; `rag_answer_kbs` is the same path over given
KBs without a record (the KB playground's RAG mode).

Failure rules (the contract): any dependency failure — the database, the embedder, the answer
generator — becomes an answer with `error_code: "DEPENDENCY_UNAVAILABLE"` and a safe message,
never an exception; no retrieved passage (or none covering the question) is an honest
"not found" with `error_code: "FAILED_RETRIEVAL"`, never an invented answer; and the record is
written last, in its own savepoint, so a failing write leaves the answer intact with
`query_id: None`.

Evidence too unlikely to answer is not used: where the search's scores are calibrated (hybrid,
convex fusion, the local e5 model without a query adapter, in every bound KB: each hit's score
carries the probability that the KBs answer the question at all, pipeline.answerability) and the
search's best candidate — before a reranker, which may leave it out of the evidence — scores below
settings.RAG_EVIDENCE_SCORE_MIN, the answer is the honest "not found" without asking the generator:
an off-topic question otherwise drew a sentence from whatever ranked first.

Confidence (0–1) is calibrated, not a raw score: a logistic function of the cited text's
coverage of the question (`Draft.support`, idf-weighted) and, where the search's scores are
calibrated, the best evidence score; where they are relative (other embedding models, RRF) the
score says nothing across searches and support alone is used. Both are logistic regressions on
whether the answer contained a gold answer span — off-topic questions answered count as wrong —
fitted on one fold of the bench and checked for reliability (expected calibration error) on the
other (bench/rag.py --fit), then shipped as fitted on both folds. A not-found or failed answer has
confidence 0; an ungrounded one is capped at UNGROUNDED_CONFIDENCE_MAX.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from django.conf import settings
from django.db import DatabaseError

from apps.answers.errors import DEPENDENCY_UNAVAILABLE, FAILED_RETRIEVAL
from apps.answers.generators import AnswerGenerator, Draft, Evidence, GenerationFailed, generator_for
from apps.knowledge import selectors as knowledge_selectors
from apps.knowledge.models import KnowledgeBase
from apps.knowledge.pipeline.candidates import Hit
from apps.knowledge.pipeline.embedders import EmbeddingFailed
from apps.knowledge.pipeline.retrieve import SearchOptions, SearchResult
from apps.knowledge.pipeline.terms import has_cjk
from apps.ledger.rag import RagRecord, rag_query_record
from apps.routes.models import Route

logger = logging.getLogger(__name__)

INTERACTION_MODE = "knowledge"
QUOTE_MAX_CHARS = 600


@dataclass(frozen=True)
class Confidence:
    intercept: float
    support: float
    score: float = 0.0

    def of(self, *, support: float, score: float) -> float:
        z = self.intercept + self.support * support + self.score * score
        return round(1 / (1 + math.exp(-z)), 4)


# Fitted by `bench/rag.py --fit` (bench/README.md, "RAG answers") on the questions answered above
# the evidence floor, both folds: cmrc2018, drcd and dureader KBs (local e5, whole corpora), 200
# questions each typed plainly and as chat, and 150 each cannot answer (100 of them as chat too).
# Each fold's fit scored on the other first. Support alone is fitted on every answer, the floor's
# refusals too: it is served where no floor applies.
CONFIDENCE_CALIBRATED = Confidence(intercept=-1.725, support=2.163, score=1.763)
CONFIDENCE_RELATIVE = Confidence(intercept=-1.926, support=5.193)
UNGROUNDED_CONFIDENCE_MAX = 0.2

NOT_FOUND_ZH = "知识库中没有找到能回答这个问题的内容。"
NOT_FOUND_EN = "The knowledge holds nothing that answers this question."
NOT_FOUND_MESSAGE = "No passage in this knowledge answers the question."
UNAVAILABLE_MESSAGE = ("A service the answer depends on (knowledge search or the answer generator) is "
                       "unavailable right now; nothing was answered. Try again shortly.")


@dataclass
class RagAnswer:
    """The twelve public fields of an answer (to_public), and what the record keeps besides."""

    query_id: str | None
    answer: str
    evidence: list[dict[str, Any]]
    confidence: float
    used_web_search: bool
    trace: list[dict[str, Any]]
    grounded: bool
    useful: bool
    missing_points: list[str]
    error_code: str | None
    error_message: str | None
    interaction_mode: str
    generator: str = ""
    latency_ms: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    PUBLIC = ("query_id", "answer", "evidence", "confidence", "used_web_search", "trace", "grounded", "useful",
              "missing_points", "error_code", "error_message", "interaction_mode")

    def to_public(self) -> dict[str, Any]:
        data = asdict(self)
        return {name: data[name] for name in self.PUBLIC}


def confidence_of(*, support: float, best_score: float | None) -> float:
    """The calibrated probability that a grounded, found answer holds the answer (module doc);
    `best_score` None where the search's scores are relative."""
    if best_score is None:
        return CONFIDENCE_RELATIVE.of(support=support, score=0.0)
    return CONFIDENCE_CALIBRATED.of(support=support, score=best_score)


def _evidence(hits: list[Hit]) -> list[Evidence]:
    return [Evidence(ref=i, document_title=hit.title, chapter_path=hit.chapter_path, text=hit.content,
                     score=float(hit.score), document_id=str(hit.document_id), chunk_id=str(hit.chunk_id))
            for i, hit in enumerate(hits, start=1)]


def _quote(item: Evidence, draft: Draft) -> str:
    if item.ref in draft.quotes:
        return draft.quotes[item.ref][:QUOTE_MAX_CHARS]
    return item.text[:QUOTE_MAX_CHARS]


def _evidence_out(evidence: list[Evidence], draft: Draft | None) -> list[dict[str, Any]]:
    cited = set(draft.cited) if draft else set()
    return [{"ref": item.ref, "document_title": item.document_title, "chapter_path": item.chapter_path,
             "quote": _quote(item, draft) if draft else item.text[:QUOTE_MAX_CHARS],
             "score": round(item.score, 4), "cited": item.ref in cited,
             "document_id": item.document_id, "chunk_id": item.chunk_id}
            for item in evidence]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def _retrieve(*, kbs: list[KnowledgeBase], question: str, options: SearchOptions) -> SearchResult:
    return knowledge_selectors.knowledge_search(kbs=kbs, query=question, options=options)


def _rerank_step(result: SearchResult) -> dict[str, Any]:
    """Reranking happens inside knowledge retrieval when a KB names a reranker; here it is
    reported: skipped (no reranker), applied, or fallback (it failed; the fused order stood)."""
    steps = [step for step in getattr(result, "trace", []) if step.get("step") == "rerank"]
    ms = round(float(result.timings_ms.get("rerank_ms", 0.0)), 1)
    if not steps or all(step.get("status") == "skipped" for step in steps):
        return {"step": "rerank", "ms": ms, "status": "skipped"}
    failed = [step for step in steps if step.get("status") == "failed"]
    if failed:
        return {"step": "rerank", "ms": ms, "status": "fallback", "fallback": "fused_order",
                "error_code": failed[0].get("error_code")}
    return {"step": "rerank", "ms": ms, "status": "applied"}


def _failed(*, question: str, trace: list[dict[str, Any]], evidence: list[dict[str, Any]], started: float,
            generator: str) -> RagAnswer:
    return RagAnswer(query_id=None, answer="", evidence=evidence, confidence=0.0, used_web_search=False,
                     trace=trace, grounded=False, useful=False, missing_points=[question],
                     error_code=DEPENDENCY_UNAVAILABLE, error_message=UNAVAILABLE_MESSAGE,
                     interaction_mode=INTERACTION_MODE, generator=generator,
                     latency_ms=int((time.perf_counter() - started) * 1000))


def rag_answer_kbs(*, kbs: list[KnowledgeBase], question: str, options: SearchOptions,
                   generator: AnswerGenerator | None = None, route_label: str | None = None) -> RagAnswer:
    """Answer `question` from `kbs` (already scoped by the caller); never raises for a dependency."""
    started = time.perf_counter()
    trace: list[dict[str, Any]] = []
    name = getattr(generator, "name", "")
    try:
        generator = generator or generator_for(route_label=route_label)
    except GenerationFailed as exc:
        logger.warning("RAG generator misconfigured: %s", exc)
        trace.append({"step": "generate", "ms": 0.0, "status": "failed"})
        return _failed(question=question, trace=trace, evidence=[], started=started, generator=name)
    name = generator.name
    try:
        result = _retrieve(kbs=kbs, question=question, options=options)
    except (DatabaseError, EmbeddingFailed, OSError) as exc:
        logger.warning("RAG retrieval unavailable: %s", type(exc).__name__, exc_info=True)
        trace.append({"step": "retrieve", "ms": _ms(time.perf_counter() - started), "status": "failed"})
        return _failed(question=question, trace=trace, evidence=[], started=started, generator=name)
    rerank = _rerank_step(result)
    trace.append({"step": "retrieve", "ms": round(max(0.0, result.timings_ms.get("total_ms", 0.0) - rerank["ms"]), 1),
                  "status": "ok", "hits": len(result.hits), "scores_calibrated": result.scores_calibrated})
    trace.append(rerank)
    evidence = _evidence(result.hits)
    # Calibrated scores say how likely a passage answers: judged on the best candidate the search
    # had, which a reranker may have put out of the evidence.
    best_score = result.best_score if result.scores_calibrated else None
    generate_started = time.perf_counter()
    if not evidence:
        draft = Draft(answer="", cited=[], quotes={}, grounded=True, found=False, missing_points=[question])
        skipped = {"step": "generate", "ms": 0.0, "status": "skipped", "reason": "no_evidence"}
        if options.score_threshold is not None:
            skipped["score_threshold"] = options.score_threshold  # the route's: it may have cut every hit
        trace.append(skipped)
    elif best_score is not None and best_score < settings.RAG_EVIDENCE_SCORE_MIN:
        draft = Draft(answer="", cited=[], quotes={}, grounded=True, found=False, missing_points=[question])
        trace.append({"step": "generate", "ms": 0.0, "status": "skipped", "reason": "evidence_unlikely_to_answer",
                      "best_score": round(best_score, 4), "floor": settings.RAG_EVIDENCE_SCORE_MIN})
    else:
        try:
            draft = generator.generate(question=question, evidence=evidence)
        except (GenerationFailed, ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
            # The contract: a generator's failure is a failed answer, never a 500. A database
            # fault is not the generator's, and goes on to the 503 of an outage.
            if isinstance(exc, GenerationFailed):
                logger.warning("RAG generation unavailable: %s", exc)
            else:  # a defect to fix, still not a 500 for the caller
                logger.exception("RAG generation failed unexpectedly")
            trace.append({"step": "generate", "ms": _ms(time.perf_counter() - generate_started), "status": "failed"})
            return _failed(question=question, trace=trace, evidence=_evidence_out(evidence, None), started=started,
                           generator=name)
        trace.append({"step": "generate", "ms": _ms(time.perf_counter() - generate_started), "status": "ok",
                      "support": round(draft.support, 4)})
    latency_ms = int((time.perf_counter() - started) * 1000)
    if not draft.found:
        return RagAnswer(query_id=None, answer=NOT_FOUND_ZH if has_cjk(question) else NOT_FOUND_EN,
                         evidence=_evidence_out(evidence, draft), confidence=0.0, used_web_search=False,
                         trace=trace, grounded=True, useful=False,
                         missing_points=draft.missing_points or [question], error_code=FAILED_RETRIEVAL,
                         error_message=NOT_FOUND_MESSAGE, interaction_mode=INTERACTION_MODE, generator=name,
                         latency_ms=latency_ms, extra=draft.extra)
    confidence = confidence_of(support=draft.support, best_score=best_score)
    if not draft.grounded:
        confidence = min(confidence, UNGROUNDED_CONFIDENCE_MAX)
    return RagAnswer(query_id=None, answer=draft.answer, evidence=_evidence_out(evidence, draft),
                     confidence=confidence, used_web_search=False, trace=trace, grounded=draft.grounded,
                     useful=True, missing_points=draft.missing_points, error_code=None, error_message=None,
                     interaction_mode=INTERACTION_MODE, generator=name, latency_ms=latency_ms, extra=draft.extra)


def route_search_options(*, route: Route) -> SearchOptions:
    """The route's own knowledge settings, in hybrid mode; a reranker's cost records name the route."""
    return SearchOptions(top_k=route.knowledge_top_k, mode="hybrid", score_threshold=route.knowledge_score_threshold,
                         max_docs=route.knowledge_max_docs, route_id=route.pk)


def rag_query_answer(*, route: Route, question: str, conversation_id: str = "", user=None) -> RagAnswer:
    """Answer a question from the route's bound knowledge bases and record it (see the module doc).

    The RAG API is knowledge Q&A by definition, so it reads the route's bound KBs whether or not
    the route puts knowledge into agents' turns."""
    started = time.perf_counter()
    try:
        kbs = list(knowledge_selectors.route_readable_knowledge_bases(route=route))
    except DatabaseError:
        logger.warning("RAG: route knowledge unavailable", exc_info=True)
        answer = _failed(question=question, trace=[{"step": "retrieve", "ms": _ms(time.perf_counter() - started),
                                                    "status": "failed"}],
                         evidence=[], started=started, generator="")
    else:
        route_label = f"{route.project.slug}/{route.key}"
        answer = rag_answer_kbs(kbs=kbs, question=question, options=route_search_options(route=route),
                                route_label=route_label)
    answer.latency_ms = int((time.perf_counter() - started) * 1000)
    record = RagRecord(
        question=question, answer=answer.answer, evidence=answer.evidence, confidence=answer.confidence,
        grounded=answer.grounded, useful=answer.useful, missing_points=answer.missing_points,
        error_code=answer.error_code, error_message=answer.error_message, interaction_mode=answer.interaction_mode,
        trace=answer.trace, latency_ms=answer.latency_ms, generator=answer.generator,
        conversation_id=conversation_id or "",
    )
    try:
        row = rag_query_record(route=route, record=record, user=user)
    except DatabaseError:
        logger.warning("RAG: the query record could not be written; answering without it", exc_info=True)
    else:
        answer.query_id = str(row.pk)
    return answer
