"""Whether the searched KBs answer a question at all (pipeline.retrieve has the design).

Convex fusion scores a search's candidates against each other: its best candidate scores about 1
whatever the query, so a route's score threshold could not tell "the KB has nothing on this" from a
good hit. Two signals of the fused candidates do not depend on the others:

* cosine — the best cosine of any candidate or of its best sentence window to the query (an
  absolute figure of the embedding model, so calibrated per model);
* coverage — the largest share of the query's idf a candidate's text holds: a term no chunk of
  the KB has counts at the idf of a term in none, so a question about something the KB never
  mentions covers little of itself, however its words rank.

`answerability` turns them into a probability that the KB holds an answer, by a logistic fitted on
held-out queries (`bench/answerability.py`: each dataset's own queries against its KB beside other
datasets' queries, fitted on one fold, reported on the other). Hybrid search with convex fusion
multiplies each candidate's fused score by it, so the order within a search is unchanged and a
threshold cuts a question the KB does not cover. A model without a calibration (HTTP models, the
hashing test model, USE) keeps the relative scores: its cosines mean something else; so does RRF,
whose scores are sums of reciprocal ranks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from apps.knowledge.models import EmbeddingModel
from apps.knowledge.pipeline.candidates import Candidate
from apps.knowledge.pipeline.keyword_channel import KeywordScorer, bm25_idf


@dataclass(frozen=True)
class Calibration:
    intercept: float
    cosine: float
    coverage: float

    def probability(self, *, cosine: float, coverage: float) -> float:
        z = self.intercept + self.cosine * cosine + self.coverage * coverage
        return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0


# Fitted by bench/answerability.py (see bench/README.md, "Does the KB answer at all").
CALIBRATIONS: dict[str, Calibration] = {
    EmbeddingModel.Provider.LOCAL: Calibration(intercept=-19.124, cosine=15.299, coverage=16.154),
}


@dataclass(frozen=True)
class Answerability:
    cosine: float
    coverage: float
    # None: no calibration for the group's embedding model; its scores stay relative.
    probability: float | None

    def as_dict(self) -> dict:
        return {"cosine": round(self.cosine, 4), "coverage": round(self.coverage, 4),
                "probability": None if self.probability is None else round(self.probability, 4)}


def coverage(terms: Iterable[str], scorer: KeywordScorer | None) -> float:
    """The share of the query's idf that `terms` (a candidate's matched terms) hold."""
    if scorer is None or not scorer.terms:
        return 0.0
    absent = bm25_idf(0, scorer.n)
    total = sum(scorer.idf.get(term, absent) for term in scorer.terms)
    matched = set(terms)
    held = sum(scorer.idf.get(term, absent) for term in scorer.terms if term in matched)
    return held / total if total > 0 else 0.0


def answerability(candidates: Iterable[Candidate], *, scorer: KeywordScorer | None,
                  model: EmbeddingModel) -> Answerability:
    best_cosine = 0.0
    best_coverage = 0.0
    for c in candidates:
        for cosine in (c.vector_score, c.window_cosine):
            if cosine is not None and cosine > best_cosine:
                best_cosine = cosine
        if c.matched_terms:
            best_coverage = max(best_coverage, coverage(c.matched_terms, scorer))
    calibration = CALIBRATIONS.get(model.provider)
    probability = (calibration.probability(cosine=best_cosine, coverage=best_coverage)
                   if calibration is not None else None)
    return Answerability(cosine=best_cosine, coverage=best_coverage, probability=probability)
