"""Whether the searched KBs answer a question at all (pipeline.answerability), and what hybrid
search does with it."""

import math

import pytest

from apps.knowledge.models import EmbeddingModel
from apps.knowledge.pipeline.answerability import CALIBRATIONS, Calibration, answerability, coverage
from apps.knowledge.pipeline.candidates import Candidate
from apps.knowledge.pipeline.keyword_channel import KeywordScorer, bm25_idf


def _scorer(df: dict[str, int], *, terms: list[str], n: int = 100) -> KeywordScorer:
    present = {t: d for t, d in df.items() if d > 0}
    return KeywordScorer(terms=terms, df=present, idf={t: bm25_idf(d, n) for t, d in present.items()},
                         avg_length=10.0, n=n)


def test_coverage_is_the_share_of_the_query_idf_a_text_holds():
    scorer = _scorer({"refund": 5, "the": 90}, terms=["refund", "the", "zebra"])
    absent = bm25_idf(0, 100)
    total = bm25_idf(5, 100) + bm25_idf(90, 100) + absent
    assert coverage(["refund"], scorer) == pytest.approx(bm25_idf(5, 100) / total)
    assert coverage(["refund", "the"], scorer) == pytest.approx((total - absent) / total)
    assert coverage(["refund", "the", "zebra"], scorer) == pytest.approx(1.0)
    # A term the query lacks adds nothing; no terms, or no scorer, cover nothing.
    assert coverage(["unrelated"], scorer) == 0.0
    assert coverage([], scorer) == 0.0
    assert coverage(["refund"], None) == 0.0


def test_a_term_no_chunk_has_weighs_as_much_as_the_rarest_possible():
    # "zebra" is in no chunk: a question about it covers little of itself, however well its
    # other word matches.
    scorer = _scorer({"refund": 1}, terms=["refund", "zebra"])
    assert coverage(["refund"], scorer) < 0.51
    assert coverage(["refund"], _scorer({"refund": 1, "zebra": 80}, terms=["refund", "zebra"])) > 0.8


def test_the_signals_are_the_best_cosine_and_the_best_coverage_over_the_candidates():
    scorer = _scorer({"a": 10, "b": 10}, terms=["a", "b"])
    candidates = [
        Candidate(chunk_id=1, vector_score=0.81, window_cosine=0.86, matched_terms=["a"]),
        Candidate(chunk_id=2, vector_score=0.84, matched_terms=["a", "b"]),
        Candidate(chunk_id=3, keyword_score=2.0, matched_terms=[]),
    ]
    local = EmbeddingModel(provider=EmbeddingModel.Provider.LOCAL, dimension=384)
    signal = answerability(candidates, scorer=scorer, model=local)
    assert (signal.cosine, signal.coverage) == (pytest.approx(0.86), pytest.approx(1.0))
    calibration = CALIBRATIONS[EmbeddingModel.Provider.LOCAL]
    assert signal.probability == pytest.approx(calibration.probability(cosine=0.86, coverage=1.0))


def test_a_model_without_a_calibration_has_no_probability():
    hashing = EmbeddingModel(provider=EmbeddingModel.Provider.HASHING, dimension=64)
    signal = answerability([Candidate(chunk_id=1, vector_score=0.9, matched_terms=["a"])],
                           scorer=_scorer({"a": 1}, terms=["a"]), model=hashing)
    assert signal.probability is None
    assert signal.as_dict() == {"cosine": 0.9, "coverage": 1.0, "probability": None}


def test_the_calibration_is_a_logistic_of_both_signals():
    calibration = Calibration(intercept=-10.0, cosine=10.0, coverage=2.0)
    assert calibration.probability(cosine=1.0, coverage=0.0) == pytest.approx(0.5)
    assert calibration.probability(cosine=0.8, coverage=0.5) == pytest.approx(1 / (1 + math.exp(1.0)))
    # Far below: 0, not an overflow.
    assert Calibration(intercept=-1000.0, cosine=0.0, coverage=0.0).probability(cosine=0.5, coverage=0.5) == 0.0


def test_the_shipped_calibration_rises_with_each_signal():
    local = CALIBRATIONS[EmbeddingModel.Provider.LOCAL]
    assert local.cosine > 0 and local.coverage > 0
