"""Whether the searched KBs answer a question at all (pipeline.retrieve has the design).

Convex fusion scores a search's candidates against each other: its best candidate scores about 1
whatever the query, so a route's score threshold could not tell "the KB has nothing on this" from a
good hit. Two signals of the fused candidates do not depend on the others:

* cosine — the best cosine of any candidate or of its best sentence window to the query (an
  absolute figure of the embedding model, so calibrated per model);
* coverage — the largest share of the query's idf one candidate's text holds. A term no chunk of
  the KB has counts at the idf of a term in none, so a question about something the KB never
  mentions covers little of itself, however its words rank; in a small KB a stray common
  character would otherwise cover such a question whole. (Leaving those terms out separated
  large KBs' questions a little better, AUC 0.975–0.982 against 0.971–0.973 held out, and spared a
  question typed as chat: measured in bench/README.md, not taken for the small KB's sake.)

`answerability` turns them into a probability that the KB holds an answer, by a logistic per query
script (CJK or not: e5's cosines sit differently) fitted on held-out queries
(`bench/answerability.py`: each dataset's own queries, plain and typed as chat, against other
datasets' queries; fitted on one fold, reported on the other). Hybrid search with convex fusion
multiplies each candidate's fused score by it, so the order within a search is unchanged and a
threshold cuts a question the KB does not cover. A model without a calibration (HTTP models, the
hashing test model, USE, or the local model under a query adapter, KNOWLEDGE_E5_QUERY_ADAPTER, which
moves its cosines) keeps the relative scores; so does RRF, whose scores are sums of reciprocal
ranks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings

from apps.knowledge.models import EmbeddingModel
from apps.knowledge.pipeline.candidates import Candidate
from apps.knowledge.pipeline.keyword_channel import KeywordScorer, bm25_idf
from apps.knowledge.pipeline.terms import has_cjk


@dataclass(frozen=True)
class Calibration:
    intercept: float
    cosine: float
    coverage: float

    def probability(self, *, cosine: float, coverage: float) -> float:
        z = self.intercept + self.cosine * cosine + self.coverage * coverage
        return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0


# Fitted by bench/answerability.py (see bench/README.md, "Does the KB answer at all"), per query
# script: (CJK, other).
CALIBRATIONS: dict[str, tuple[Calibration, Calibration]] = {
    EmbeddingModel.Provider.LOCAL: (Calibration(intercept=-26.480, cosine=25.631, coverage=13.264),
                                    Calibration(intercept=-29.541, cosine=32.086, coverage=9.686)),
}


def calibration_for(model: EmbeddingModel, query: str) -> Calibration | None:
    """The calibration of `model` for `query`'s script; None where its cosines are not the ones
    calibrated."""
    pair = CALIBRATIONS.get(model.provider)
    if pair is None or (model.provider == EmbeddingModel.Provider.LOCAL and settings.KNOWLEDGE_E5_QUERY_ADAPTER):
        return None
    return pair[0] if has_cjk(query) else pair[1]


@dataclass(frozen=True)
class Answerability:
    cosine: float
    coverage: float
    # None: no calibration for the group's embedding model; its scores stay relative.
    probability: float | None
    # The parts of coverage, for bench/answerability.py: the best candidate's matched idf, and the
    # idf of the query's terms some chunk has and of those none has.
    held_idf: float = 0.0
    present_idf: float = 0.0
    absent_idf: float = 0.0


def _idf_parts(scorer: KeywordScorer) -> tuple[float, float]:
    """(idf of the query's terms some chunk has, idf of those none has — each at a term in none)."""
    absent = bm25_idf(0, scorer.n)
    present = sum(scorer.idf[term] for term in scorer.terms if term in scorer.idf)
    return present, absent * sum(1 for term in scorer.terms if term not in scorer.idf)


def _held(terms: Iterable[str], scorer: KeywordScorer) -> float:
    matched = set(terms)
    return sum(scorer.idf[term] for term in scorer.terms if term in matched and term in scorer.idf)


def _share(held: float, present: float, absent: float) -> float:
    return held / (present + absent) if present + absent > 0 else 0.0


def coverage(terms: Iterable[str], scorer: KeywordScorer | None) -> float:
    """The share of the query's idf that `terms` (a candidate's matched terms) hold."""
    if scorer is None or not scorer.terms:
        return 0.0
    return _share(_held(terms, scorer), *_idf_parts(scorer))


def answerability(candidates: Iterable[Candidate], *, scorer: KeywordScorer | None, model: EmbeddingModel,
                  query: str) -> Answerability:
    best_cosine = 0.0
    held = 0.0
    for c in candidates:
        for cosine in (c.vector_score, c.window_cosine):
            if cosine is not None and cosine > best_cosine:
                best_cosine = cosine
        if c.matched_terms and scorer is not None:
            held = max(held, _held(c.matched_terms, scorer))
    present, absent = _idf_parts(scorer) if scorer is not None and scorer.terms else (0.0, 0.0)
    best_coverage = _share(held, present, absent)
    calibration = calibration_for(model, query)
    probability = (calibration.probability(cosine=best_cosine, coverage=best_coverage)
                   if calibration is not None else None)
    return Answerability(cosine=best_cosine, coverage=best_coverage, probability=probability, held_idf=held,
                         present_idf=present, absent_idf=absent)
