"""Whether the searched KBs answer a question at all (pipeline.answerability): its signals and
calibrations. What hybrid search does with it: tests/knowledge/test_retrieve.py."""

import math

import pytest

from apps.knowledge.models import EmbeddingModel
from apps.knowledge.pipeline.answerability import Calibration, answerability, calibration_for, coverage
from apps.knowledge.pipeline.candidates import Candidate
from apps.knowledge.pipeline.keyword_channel import KeywordScorer, bm25_idf

LOCAL = EmbeddingModel(provider=EmbeddingModel.Provider.LOCAL, dimension=384)


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
    # A term no chunk has is never a candidate's match: it only weighs on the query's side.
    assert coverage(["refund", "the", "zebra"], scorer) == pytest.approx((total - absent) / total)
    # A term the query lacks adds nothing; no terms, or no scorer, cover nothing.
    assert coverage(["unrelated"], scorer) == 0.0
    assert coverage([], scorer) == 0.0
    assert coverage(["refund"], None) == 0.0


def test_in_a_small_kb_a_stray_common_character_does_not_cover_a_question_whole():
    # Two chunks; the question shares only 的 with them: its other terms weigh as terms in none.
    scorer = _scorer({"的": 1}, terms=["量子", "色动", "力学", "的", "渐近", "自由"], n=2)
    assert coverage(["的"], scorer) < 0.2


def test_a_question_none_of_whose_words_the_kb_has_covers_nothing():
    scorer = _scorer({}, terms=["quantum", "chromodynamics"])
    signal = answerability([Candidate(chunk_id=1, vector_score=0.8)], scorer=scorer, model=LOCAL, query="quantum")
    assert (signal.coverage, signal.held_idf, signal.present_idf) == (0.0, 0.0, 0.0)
    assert signal.absent_idf == pytest.approx(2 * bm25_idf(0, 100))


def test_the_signals_are_the_best_cosine_and_the_best_coverage_over_the_candidates():
    scorer = _scorer({"a": 10, "b": 10}, terms=["a", "b"])
    candidates = [
        Candidate(chunk_id=1, vector_score=0.81, window_cosine=0.86, matched_terms=["a"]),
        Candidate(chunk_id=2, vector_score=0.84, matched_terms=["a", "b"]),
        Candidate(chunk_id=3, keyword_score=2.0, matched_terms=[]),
    ]
    signal = answerability(candidates, scorer=scorer, model=LOCAL, query="a b")
    assert (signal.cosine, signal.coverage) == (pytest.approx(0.86), pytest.approx(1.0))
    assert signal.held_idf == pytest.approx(2 * bm25_idf(10, 100))
    calibration = calibration_for(LOCAL, "a b")
    assert signal.probability == pytest.approx(calibration.probability(cosine=0.86, coverage=1.0))


def test_each_query_script_has_its_calibration():
    cjk, other = calibration_for(LOCAL, "退款要多久"), calibration_for(LOCAL, "how long does a refund take")
    assert cjk is not other
    assert calibration_for(LOCAL, "iPhone 退款") is cjk  # any CJK character
    # Both rise with each signal.
    assert min(cjk.cosine, cjk.coverage, other.cosine, other.coverage) > 0


def test_a_model_without_a_calibration_has_no_probability():
    hashing = EmbeddingModel(provider=EmbeddingModel.Provider.HASHING, dimension=64)
    assert calibration_for(hashing, "退款") is None
    signal = answerability([Candidate(chunk_id=1, vector_score=0.9, matched_terms=["a"])],
                           scorer=_scorer({"a": 1}, terms=["a"]), model=hashing, query="a")
    assert (signal.cosine, signal.coverage, signal.probability) == (pytest.approx(0.9), 1.0, None)


def test_a_query_adapter_moves_the_cosines_so_the_local_model_goes_uncalibrated(settings):
    settings.KNOWLEDGE_E5_QUERY_ADAPTER = "/srv/adapter.npy"
    assert calibration_for(LOCAL, "退款") is None
    settings.KNOWLEDGE_E5_QUERY_ADAPTER = ""
    assert calibration_for(LOCAL, "退款") is not None


def test_the_calibration_is_a_logistic_of_both_signals():
    calibration = Calibration(intercept=-10.0, cosine=10.0, coverage=2.0)
    assert calibration.probability(cosine=1.0, coverage=0.0) == pytest.approx(0.5)
    assert calibration.probability(cosine=0.8, coverage=0.5) == pytest.approx(1 / (1 + math.exp(1.0)))
    # Far below: 0, not an overflow.
    assert Calibration(intercept=-1000.0, cosine=0.0, coverage=0.0).probability(cosine=0.5, coverage=0.5) == 0.0
