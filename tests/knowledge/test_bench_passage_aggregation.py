"""bench/passage_aggregation.py: a passage scored as its best child plus lam times its others."""

from __future__ import annotations

import numpy as np

from bench.passage_aggregation import figures, ranked


def _query(fold: str = "A") -> dict:
    # Candidates as fusion_study dumps them: (passage, keyword rank, BM25, vector rank, cosine).
    # Passage "one" has the best child; "two" has two children, each a little behind it.
    return {"id": "q", "fold": fold, "rel": ["two"], "w": 0.5, "c": [
        ["one", 1, 10.0, 1, 0.90],
        ["two", 2, 9.0, 2, 0.88],
        ["two", 3, 8.0, 3, 0.86],
        ["three", 4, 1.0, 4, 0.50],
    ]}


def test_the_best_child_alone_ranks_a_passage_at_lam_0():
    assert ranked(_query(), 0.0) == ["one", "two", "three"]


def test_a_passage_matching_in_several_children_rises_with_lam():
    # one: 0.5 * 1 + 0.5 * 1 = 1.0; two's children 0.5 * 0.95 + 0.5 * 0.9 = 0.925 and
    # 0.5 * 0.9 + 0.5 * 0.8 = 0.85: at lam 0.1 two scores 1.01.
    assert ranked(_query(), 0.1) == ["two", "one", "three"]
    assert ranked(_query(), 0.05) == ["one", "two", "three"]


def test_figures_read_only_the_folds_queries():
    rows = [_query("A"), {**_query("B"), "rel": ["three"]}]
    assert np.allclose(figures(rows, 0.1, "A"), [1.0, 1.0, 1.0])
    assert np.allclose(figures(rows, 0.1, "B"), [0.5, 1.0, 1 / 3])
