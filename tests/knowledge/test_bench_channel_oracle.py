"""bench/channel_oracle.py: per fold, the queries hybrid misses at rank 1, those neither channel
answers there, and the two oracles over the three rankings."""

from __future__ import annotations

from bench.channel_oracle import oracle


def test_the_oracles_take_each_querys_best_ranking():
    per_query = {
        # q1: every ranking answers; q2: only vector at rank 1; q3: none at rank 1, keyword best.
        "keyword": {"q1": (1.0, 1.0, 1.0), "q2": (0.0, 0.0, 0.0), "q3": (0.5, 1.0, 0.3333)},
        "vector": {"q1": (1.0, 1.0, 1.0), "q2": (1.0, 1.0, 1.0), "q3": (0.0, 0.0, 0.0)},
        "hybrid": {"q1": (1.0, 1.0, 1.0), "q2": (0.6309, 1.0, 0.5), "q3": (0.3869, 1.0, 0.25)},
    }
    figures = oracle(per_query, ["q1", "q2", "q3"])
    assert figures == {
        "queries": 3,
        "keyword_ndcg@10": 0.5, "vector_ndcg@10": 0.6667, "hybrid_ndcg@10": round((1 + 0.6309 + 0.3869) / 3, 4),
        "hybrid_not_rank_1": 2,  # q2, q3
        "neither_channel_rank_1": 1,  # q3
        # q2 counts as vector's 1.0; q3 stays hybrid's.
        "oracle_any_rank_1": round((1 + 1 + 0.3869) / 3, 4),
        # q3 takes keyword's 0.5 over hybrid's.
        "oracle_best_of_three": round((1 + 1 + 0.5) / 3, 4),
    }


def test_a_fold_is_only_its_members():
    per_query = {mode: {"a": (1.0, 1.0, 1.0), "b": (0.0, 0.0, 0.0)} for mode in ("keyword", "vector", "hybrid")}
    figures = oracle(per_query, ["b"])
    assert (figures["queries"], figures["hybrid_ndcg@10"], figures["hybrid_not_rank_1"],
            figures["neither_channel_rank_1"], figures["oracle_best_of_three"]) == (1, 0.0, 1, 1, 0.0)
