"""bench/answerability.py: the AUC, the logistic fit per script and the per-cut report it prints."""

from __future__ import annotations

import pytest

from bench.answerability import auc, chat, fit_logistic, fit_per_script, kept, probability, report


def _row(cosine: float, coverage: float, label: int, **extra) -> dict:
    return {"cosine": cosine, "coverage": coverage, "label": label, "source": "own", "script": "cjk",
            "kb_script": "cjk", "top_fused": 1.0, **extra}


RISING = {"cjk": (0.0, 1.0, 0.0), "other": (0.0, 1.0, 0.0)}  # rises with the cosine alone


def test_auc_counts_the_pairs_ranked_right_and_half_the_ties():
    separated = [_row(0.9, 0, 1), _row(0.8, 0, 1), _row(0.7, 0, 0), _row(0.6, 0, 0)]
    assert auc(separated, RISING) == 1.0
    assert auc([_row(0.6, 0, 1), _row(0.9, 0, 0)], RISING) == 0.0
    # One positive above one negative, the other tied with it: (1 + 0.5) / 2.
    assert auc([_row(0.9, 0, 1), _row(0.7, 0, 1), _row(0.7, 0, 0)], RISING) == pytest.approx(0.75)
    assert auc([_row(0.9, 0, 1)], RISING) != auc([_row(0.9, 0, 1)], RISING)  # nan: one class only


def test_the_fit_separates_what_separates_and_weighs_the_classes_alike():
    # Own questions: high cosine or coverage; foreign: low. Three foreign for each own one.
    rows = [_row(0.86 + 0.01 * i, 0.6, 1) for i in range(5)]
    rows += [_row(0.78 + 0.005 * i, 0.1, 0) for i in range(15)]
    coef = fit_logistic(rows)
    assert coef[1] > 0 and coef[2] > 0
    coefs = {"cjk": coef}
    assert all(probability(coefs, r) > 0.5 for r in rows if r["label"] == 1)
    assert all(probability(coefs, r) < 0.5 for r in rows if r["label"] == 0)
    assert auc(rows, coefs) == 1.0


def test_each_script_gets_its_own_fit():
    # English own questions sit at lower cosines than Chinese foreign ones: one fit cannot separate
    # both, one per script does.
    rows = [_row(0.95, 0.5, 1), _row(0.94, 0.5, 1), _row(0.88, 0.5, 0), _row(0.87, 0.5, 0)]
    rows += [_row(0.85, 0.5, 1, script="other"), _row(0.84, 0.5, 1, script="other"),
             _row(0.78, 0.5, 0, script="other"), _row(0.77, 0.5, 0, script="other")]
    coefs = fit_per_script(rows)
    assert set(coefs) == {"cjk", "other"}
    assert auc(rows, coefs) == 1.0
    assert auc(rows, {"cjk": fit_logistic(rows), "other": fit_logistic(rows)}) < 1.0


def test_a_question_is_kept_when_its_best_hit_scores_the_cut_as_the_engine_compares():
    coefs = {"cjk": (-10.0, 10.0, 0.0)}  # 0.5 at cosine 1.0
    assert kept(coefs, _row(1.0, 0, 1, top_fused=1.0), 0.5)
    # The same probability under a best hit that fused below 1 (its channels disagreed): cut.
    assert not kept(coefs, _row(1.0, 0, 1, top_fused=0.9), 0.5)


def test_the_report_names_what_each_cut_costs():
    coefs = {"cjk": (-10.0, 10.0, 0.0), "other": (-10.0, 10.0, 0.0)}
    rows = [
        _row(1.2, 0, 1, gold_rank=1), _row(0.9, 0, 1, gold_rank=1), _row(0.95, 0, 1, gold_rank=3),
        _row(0.5, 0, 0, source="cmrc"), _row(1.1, 0, 0, source="cmrc"), _row(0.2, 0, 0, source="api", script="other"),
    ]
    figures = report(rows, coefs, cuts=(0.5,))
    assert (figures["own"], figures["foreign"]) == (3, 3)
    assert figures["at 0.5"] == {"own_kept": round(1 / 3, 4), "own_cut_with_gold_at_1": 1,
                                 "foreign_cut": {"api": 1.0, "cmrc": 0.5}}
    # The same-script AUC leaves out the English request to a Chinese KB.
    assert figures["auc_same_script"] == round(auc(rows[:5], coefs), 4)


def test_chat_wraps_a_question_in_its_own_script():
    assert chat("退款要多久？", 0) == "你好，请问一下，退款要多久？麻烦告诉我，谢谢！"
    assert chat("how long does a refund take?", 1) == (
        "I was wondering if you could help me with something: how long does a refund take")
