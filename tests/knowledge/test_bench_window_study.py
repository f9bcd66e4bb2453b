"""bench/window_study.py's windows: cut after sentence ends, a long sentence in pieces of the width,
overlapping from each sentence on (`sentence`) or one after another (`packed`), titles on their own
line, and the vectors checked against the windows they were embedded from."""

from __future__ import annotations

import numpy as np
import pytest

from bench.window_study import _windows_of, parser, sub_corpus, texts_digest, width_scores, windows

TEXT = "甲乙丙。丁戊己庚！辛壬。\n子丑寅卯辰巳午未申酉。"


def test_sentence_stride_starts_a_window_at_every_sentence():
    assert windows(TEXT, 8, "sentence") == ["甲乙丙。", "丁戊己庚！辛壬。", "辛壬。", "子丑寅卯辰巳午未", "申酉。"]


def test_packed_stride_does_not_overlap_and_covers_the_text():
    packed = windows(TEXT, 8, "packed")
    assert packed == ["甲乙丙。", "丁戊己庚！辛壬。", "子丑寅卯辰巳午未", "申酉。"]
    assert "".join(packed) == TEXT.replace("\n", "")
    assert all(len(w) <= 8 for w in packed)


def test_a_window_joins_sentences_while_they_fit():
    assert windows(TEXT, 11, "packed") == ["甲乙丙。丁戊己庚！", "辛壬。", "子丑寅卯辰巳午未申酉。"]
    assert windows(TEXT, 12, "packed") == ["甲乙丙。丁戊己庚！辛壬。", "子丑寅卯辰巳午未申酉。"]


@pytest.mark.parametrize("stride", ["sentence", "packed"])
def test_windows_carry_their_passage_and_its_title(stride):
    corpus = [{"id": "p1", "title": "标题", "text": "一二。三四。"}, {"id": "p2", "text": "五六。"}]
    owners, texts = _windows_of(corpus, 3, stride)
    assert owners == ["p1", "p1", "p2"]
    assert texts == ["标题\n一二。", "标题\n三四。", "五六。"]


def test_vectors_embedded_from_other_windows_are_refused(tmp_path):
    from bench.window_study import _cache_names, _window_scores

    dataset = tmp_path / "tiny"
    dataset.mkdir()
    (dataset / "corpus.jsonl").write_text('{"id": "p1", "text": "一二。三四。"}\n', encoding="utf-8")
    (dataset / "queries.jsonl").write_text('{"id": "q1", "text": "一二"}\n', encoding="utf-8")
    (dataset / "qrels.tsv").write_text("q1\tp1\t1\n", encoding="utf-8")
    _query_path, window_path = _cache_names(tmp_path, "tiny", 3, "packed")
    # Embedded when the passage had one window; it has two now.
    np.savez(window_path, owner=np.array(["p1"]), v=np.zeros((1, 4), dtype=np.float32))
    rows = [{"id": "q1", "rel": {"p1"}, "w": 0.5, "c": [["p1", 1, 1.0, 1, 0.9]]}]
    with pytest.raises(SystemExit, match="embedded from other windows"):
        _window_scores(rows, dataset, tmp_path, 3, "packed")
    assert "w_cos" not in rows[0]


def test_late_windows_come_from_their_passage_pass_one_per_packed_window():
    from apps.knowledge.pipeline.embedders.e5_numpy import E5Numpy
    from bench.window_study import _encode_late

    corpus = [{"id": "p1", "title": "标题", "text": "一二三四五。六七八九十。", "width": 6},
              {"id": "p2", "text": "五六。", "width": 6}]
    passages, windows_of = _encode_late(corpus)
    e5 = E5Numpy()
    # The passages' own vectors are those of the passage (title line included) embedded whole.
    assert (passages * e5.encode(["标题\n一二三四五。六七八九十。", "五六。"])).sum(axis=1).min() >= 0.99999
    assert [len(w) for w in windows_of] == [2, 1]
    owners, _texts = _windows_of(corpus, 6, "packed")
    assert owners == ["p1", "p1", "p2"]
    # Each window read in context is not the window read alone, nor its passage.
    alone = e5.encode(["标题\n一二三四五。", "标题\n六七八九十。"])
    assert float(windows_of[0][0] @ windows_of[0][1]) < 0.9999
    assert all(float(windows_of[0][i] @ alone[i]) < 0.9999 for i in range(2))
    assert all(float(windows_of[0][i] @ passages[0]) < 0.9999 for i in range(2))


def test_a_sub_corpus_keeps_every_judged_passage_and_a_seeded_sample():
    corpus = [{"id": f"p{i}", "text": "x"} for i in range(20)]
    qrels = {"q1": {"p3": 1}, "q2": {"p17": 1, "p3": 1}}
    sub = sub_corpus(corpus, qrels, 6)
    assert len(sub) == 6 and {"p3", "p17"} <= {p["id"] for p in sub}
    assert [p["id"] for p in sub] == sorted((p["id"] for p in sub), key=lambda pid: int(pid[1:]))  # corpus order
    assert sub == sub_corpus(corpus, qrels, 6)
    assert sub != sub_corpus(corpus, qrels, 6, seed=8)
    assert len(sub_corpus(corpus, qrels, 1)) == 2  # the judged ones, whatever the size


def test_width_scores_rank_a_passage_by_its_best_window():
    passages = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], dtype=np.float32)
    windows_ = np.array([[0.0, 1.0], [0.8, 0.6], [1.0, 0.0]], dtype=np.float32)  # p0 has two, p1 one, p2 none
    scores = width_scores(passages, [0, 0, 1], windows_, np.array([0.0, 1.0], dtype=np.float32))
    assert scores["passage"].tolist() == pytest.approx([0.0, 1.0, 0.8])
    assert scores["best window"].tolist() == pytest.approx([1.0, 0.0, -1.0])
    assert scores["mean(passage, best window)"].tolist() == pytest.approx([0.5, 0.5, -0.1])


def test_a_width_cache_is_named_by_the_texts_it_holds():
    """A change in how windows are cut gives new cache names: vectors of another cut are never read."""
    assert texts_digest(["a b.", "c"]) == texts_digest(["a b.", "c"])
    assert len({texts_digest(["a b.", "c"]), texts_digest(["a", "b.", "c"]), texts_digest(["c", "a b."]),
                texts_digest(["a b.c"])}) == 4


def test_each_subcommand_takes_its_own_arguments():
    embed = parser().parse_args(["embed", "--cache", "c", "--dataset", "d", "--stride", "packed"])
    assert (embed.command, str(embed.dataset), embed.stride) == ("embed", "d", "packed")
    assert str(parser().parse_args(["exact", "--cache", "c", "--dataset", "d"]).dataset) == "d"
    widths = parser().parse_args(["widths", "--cache", "c", "--dataset", "d", "--widths", "96,24"])
    assert (widths.widths, widths.sample) == ("96,24", 2000)
    evaluate = parser().parse_args(["evaluate", "--cache", "c", "--texts", "t", "a.json", "b.json"])
    assert [str(d) for d in evaluate.dumps] == ["a.json", "b.json"]
    with pytest.raises(SystemExit):
        parser().parse_args(["evaluate", "--cache", "c", "--dataset", "d"])


def test_two_widths_blend_the_passage_with_both_best_windows():
    from bench.window_study import two_width_scores

    own, first, second = np.array([0.8, 0.2]), np.array([0.4, 0.9]), np.array([0.0, 0.5])
    assert two_width_scores(own, first, second, 0.0, 0.5).tolist() == own.tolist()
    assert two_width_scores(own, first, second, 1.0, 0.0).tolist() == first.tolist()
    assert two_width_scores(own, first, second, 1.0, 1.0).tolist() == second.tolist()
    assert np.allclose(two_width_scores(own, first, second, 0.75, 0.5), [0.35, 0.575])
