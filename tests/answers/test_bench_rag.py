"""bench/rag.py: the evidence floor it chooses, the confidence it fits and the figures it prints."""

from __future__ import annotations

import math

import pytest

from bench.rag import answered, auc, choose_floor, confidence, fit_confidence, floor_worth, summary


def _row(top: float, *, gold: bool = False, own: bool = True, useful: bool = True, calibrated: bool = True,
         support: float = 0.5, fold: str = "A", confidence: float = 0.5) -> dict:
    return {"id": "q", "fold": fold, "status": 200, "ms": 10.0, "grounded": True, "useful": useful,
            "unavailable": False, "confidence": confidence, "chars": 20, "top_score": top,
            "calibrated": calibrated, "support": support, "gold": gold, "recall": own, "own": own}


def test_a_floor_cuts_only_calibrated_answers_below_it():
    assert answered(_row(0.4), 0.5) is False
    assert answered(_row(0.5), 0.5) is True
    assert answered(_row(0.1, calibrated=False), 0.5) is True  # relative scores meet no floor
    assert answered(_row(0.9, useful=False), 0.0) is False


def test_the_floor_weighs_right_answers_lost_against_off_topic_answers_given():
    # 10 own questions answered right, 2 of them at 0.22; 10 off-topic ones answered, 6 at 0.18.
    rows = [_row(0.9, gold=True) for _ in range(8)] + [_row(0.22, gold=True) for _ in range(2)]
    rows += [_row(0.18, own=False) for _ in range(6)] + [_row(0.9, own=False) for _ in range(4)]
    assert floor_worth(rows, 0.0) == pytest.approx(1.0 - 1.0)
    assert floor_worth(rows, 0.2) == pytest.approx(1.0 - 0.4)  # the 6 off-topic ones go, nothing lost
    assert floor_worth(rows, 0.25) == pytest.approx(0.8 - 0.4)
    assert choose_floor(rows) == 0.2  # the lowest of the equals 0.2 (0.2 and no higher: 0.22 stays)
    rows += [_row(0.23, own=False) for _ in range(20)]  # now cutting at 0.25 is worth its two losses
    assert choose_floor(rows) == 0.25


def test_wrong_own_answers_below_the_floor_cost_nothing():
    rows = [_row(0.9, gold=True) for _ in range(10)] + [_row(0.1) for _ in range(10)] + [_row(0.5, own=False)]
    assert floor_worth(rows, 0.9) == floor_worth(rows, 0.0) + 1.0
    assert choose_floor(rows) == 0.55


def test_confidence_is_fitted_on_what_the_floor_leaves_and_separates_right_from_wrong():
    rows = [_row(0.9, gold=True, support=0.9) for _ in range(30)] + [_row(0.6, support=0.3) for _ in range(30)]
    # Off-topic questions answered with a well-supported quote, below the floor: left out of the
    # calibrated fit, but not of the support-only one, served where no floor takes them away.
    rows += [_row(0.05, own=False, support=0.9) for _ in range(30)]
    calibrated, relative = fit_confidence(rows, 0.5)
    assert calibrated[1] > 0 and calibrated[2] > 0
    assert relative[2] == 0.0
    high = confidence(_row(0.9, support=0.9), calibrated, relative)
    low = confidence(_row(0.6, support=0.3), calibrated, relative)
    assert high > 0.9 and low < 0.1
    # Half the answers at support 0.9 were wrong where no floor applies.
    assert confidence(_row(0.9, calibrated=False, support=0.9), calibrated, relative) == pytest.approx(0.5, abs=0.1)
    # A relative row reads the support-only coefficients.
    a, b, _ = relative
    assert confidence(_row(0.0, calibrated=False, support=0.3), calibrated, relative) == pytest.approx(
        1 / (1 + math.exp(-(a + b * 0.3))))


def test_auc_counts_pairs_and_half_the_ties():
    assert auc([(0.9, 1), (0.1, 0)]) == 1.0
    assert auc([(0.1, 1), (0.9, 0)]) == 0.0
    assert auc([(0.5, 1), (0.5, 0), (0.9, 1)]) == pytest.approx(0.75)
    assert math.isnan(auc([(0.5, 1)]))


def test_the_summary_applies_the_floor_to_own_and_foreign_questions():
    rows = [_row(0.9, gold=True, confidence=0.8), _row(0.2, gold=True, confidence=0.6), _row(0.9, confidence=0.4),
            _row(0.9, useful=False),
            _row(0.3, own=False, confidence=0.3), _row(0.7, own=False, confidence=0.5), _row(0.1, own=False,
                                                                                            useful=False)]
    figures = summary({"rows": rows}, 0.5)
    assert figures["questions"] == 4
    assert figures["answered_rate"] == 0.5
    assert figures["answer_contains_gold"] == 0.25
    assert figures["answer_contains_gold_when_answered"] == 0.5
    assert figures["foreign_questions"] == 3
    assert figures["foreign_answered_rate"] == pytest.approx(0.3333, abs=1e-4)
    assert figures["foreign_answered_without_floor"] == pytest.approx(0.6667, abs=1e-4)
    assert figures["foreign_confidence_mean"] == 0.5
    assert figures["own_confidence_mean"] == pytest.approx(0.6)
    assert summary({"rows": rows}, 0.0)["answer_contains_gold"] == 0.5


def test_the_summary_reads_one_typing_at_a_time():
    rows = [dict(_row(0.9, gold=True), typed="plain"), dict(_row(0.9), typed="chat"), dict(_row(0.9), typed="chat"),
            dict(_row(0.9, own=False), typed="chat")]
    assert summary({"rows": rows}, 0.3)["questions"] == 1
    chat = summary({"rows": rows}, 0.3, "chat")
    assert (chat["questions"], chat["answer_contains_gold"], chat["foreign_questions"]) == (2, 0.0, 1)
