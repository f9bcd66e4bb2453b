"""bench/answerability.py: the AUC, the logistic fit and the per-cut report it prints."""

from __future__ import annotations

import pytest

from bench.answerability import auc, fit_logistic, probability, report


def _row(cosine: float, coverage: float, label: int, **extra) -> dict:
    return {"cosine": cosine, "coverage": coverage, "label": label, "source": extra.pop("source", "own"), **extra}


def test_auc_counts_the_pairs_ranked_right_and_half_the_ties():
    rising = (0.0, 1.0, 0.0)  # the probability rises with the cosine alone
    separated = [_row(0.9, 0, 1), _row(0.8, 0, 1), _row(0.7, 0, 0), _row(0.6, 0, 0)]
    assert auc(separated, rising) == 1.0
    assert auc([_row(0.6, 0, 1), _row(0.9, 0, 0)], rising) == 0.0
    # One positive above one negative, the other tied with it: (1 + 0.5) / 2.
    assert auc([_row(0.9, 0, 1), _row(0.7, 0, 1), _row(0.7, 0, 0)], rising) == pytest.approx(0.75)
    assert auc([_row(0.9, 0, 1)], rising) != auc([_row(0.9, 0, 1)], rising)  # nan: one class only


def test_the_fit_separates_what_separates_and_weighs_the_classes_alike():
    # Own questions: high cosine or coverage; foreign: low. Three foreign for each own one.
    rows = [_row(0.86 + 0.01 * i, 0.6, 1) for i in range(5)]
    rows += [_row(0.78 + 0.005 * i, 0.1, 0) for i in range(15)]
    coef = fit_logistic(rows)
    assert coef[1] > 0 and coef[2] > 0
    assert all(probability(coef, r) > 0.5 for r in rows if r["label"] == 1)
    assert all(probability(coef, r) < 0.5 for r in rows if r["label"] == 0)
    assert auc(rows, coef) == 1.0


def test_the_report_names_what_each_cut_costs():
    coef = (-10.0, 10.0, 0.0)  # 0.5 at cosine 1.0
    rows = [
        _row(1.2, 0, 1, gold_rank=1), _row(0.9, 0, 1, gold_rank=1), _row(0.95, 0, 1, gold_rank=3),
        _row(0.5, 0, 0, source="cmrc"), _row(1.1, 0, 0, source="cmrc"), _row(0.2, 0, 0, source="api"),
    ]
    figures = report(rows, coef, cuts=(0.5,))
    assert (figures["own"], figures["foreign"]) == (3, 3)
    assert figures["at 0.5"] == {"own_kept": round(1 / 3, 4), "own_cut_with_gold_at_1": 1,
                                 "foreign_cut": {"api": 1.0, "cmrc": 0.5}}
