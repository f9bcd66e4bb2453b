"""bench/subset_dataset.py: a small KB's dataset cut from a large one."""

from __future__ import annotations

import json

from bench.subset_dataset import subset


def _write(folder, corpus, queries, qrels, answers):
    folder.mkdir()
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"id": p, "title": "", "text": p}) + "\n" for p in corpus))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"id": q, "text": q}) + "\n" for q in queries))
    (folder / "qrels.tsv").write_text("".join(f"{q}\t{p}\t1\n" for q, p in qrels))
    (folder / "answers.jsonl").write_text("".join(json.dumps({"id": q, "answers": [q]}) + "\n" for q in answers))


def _ids(path):
    return [json.loads(line)["id"] for line in path.read_text().splitlines()]


def test_the_subset_holds_every_written_querys_passages_and_their_answers_only(tmp_path):
    corpus = [f"p{i}" for i in range(20)]
    queries = [f"q{i}" for i in range(20)]
    # q0–q9 each have one passage; q10 has two (one of them shared with q0); q11–q19 none.
    qrels = [(f"q{i}", f"p{i}") for i in range(10)] + [("q10", "p0"), ("q10", "p15")]
    _write(tmp_path / "big", corpus, queries, qrels, queries)
    passages, written = subset(tmp_path / "big", tmp_path / "small", 3)
    kept = set(_ids(tmp_path / "small" / "corpus.jsonl"))
    own = _ids(tmp_path / "small" / "queries.jsonl")
    relevant = {q: {p for q2, p in qrels if q2 == q} for q in queries}
    assert (passages, written, len(kept)) == (len(kept), len(own), passages)
    assert 6 <= passages <= 7  # three queries' gold passages (one has two) and three others
    assert own and all(relevant[q] and relevant[q] <= kept for q in own)
    # every query answerable from the subset is in it
    assert set(own) == {q for q in queries if relevant[q] and relevant[q] <= kept}
    assert _ids(tmp_path / "small" / "answers.jsonl") == own
    written_qrels = (tmp_path / "small" / "qrels.tsv").read_text().splitlines()
    assert sorted(written_qrels) == sorted(f"{q}\t{p}\t1" for q in own for p in relevant[q])


def test_the_same_seed_cuts_the_same_subset(tmp_path):
    _write(tmp_path / "big", [f"p{i}" for i in range(30)], [f"q{i}" for i in range(30)],
           [(f"q{i}", f"p{i}") for i in range(30)], [])
    subset(tmp_path / "big", tmp_path / "one", 5)
    subset(tmp_path / "big", tmp_path / "two", 5)
    subset(tmp_path / "big", tmp_path / "three", 5, seed=51)
    one, two, three = ((tmp_path / name / "corpus.jsonl").read_text() for name in ("one", "two", "three"))
    assert one == two != three
