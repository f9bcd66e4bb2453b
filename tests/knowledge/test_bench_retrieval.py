"""manage.py bench_retrieval on tiny datasets of its own (written to a temporary folder by the
tests), with the in-process `hashing` embedder.

bench-mini: 8 invented passages (4 Chinese, 4 English) and 5 queries, each sharing rare
characters or words with its one relevant passage only (one query in Traditional Chinese, one
needing English stems), so keyword search ranks every answer first: nDCG@10 = Recall@10 =
MRR@10 = 1 for each query, hence 1.0 on average.

bench-mini-han-ids: 2 invented passages with the ids "甲" and "乙" (no character of either id
survives into an upload file name unchanged) and a query for each sharing characters with it
only. `--scale` takes its sentences from a corpora folder the test writes (invented sentences),
never from ../shared.
"""

import json
import re
import shutil
from dataclasses import dataclass
from io import StringIO
from pathlib import Path

import numpy as np
import pytest
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command

from apps.knowledge.management.commands.bench_retrieval import DISTRACTOR_FILE
from apps.knowledge.models import (
    Chunk,
    ChunkWindow,
    Document,
    EmbeddingModel,
    IndexGeneration,
    KeywordTermStat,
    KnowledgeBase,
)
from apps.knowledge.pipeline.index import text_hash
from apps.knowledge.pipeline.windows import window_spans
from apps.projects.models import Project

pytestmark = pytest.mark.django_db


@dataclass(frozen=True)
class Dataset:
    """A dataset in the layout of ../shared/bench/datasets/*, invented for these tests and
    written to a temporary folder (no benchmark data is kept in the repository)."""

    name: str
    corpus: tuple[dict, ...]
    queries: tuple[dict, ...]
    qrels: tuple[tuple[str, str, int], ...]

    def write(self, parent: Path) -> Path:
        folder = parent / self.name
        folder.mkdir(parents=True, exist_ok=True)
        for file, rows in (("corpus.jsonl", self.corpus), ("queries.jsonl", self.queries)):
            (folder / file).write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows),
                                       encoding="utf-8")
        (folder / "qrels.tsv").write_text("".join(f"{q}\t{d}\t{r}\n" for q, d, r in self.qrels),
                                          encoding="utf-8")
        return folder


MINI = Dataset(
    name="bench-mini",
    corpus=(
        {"id": "mini-zh-frog", "title": "",
         "text": "青蛙博物馆设在一座废弃的灯塔里，馆内收藏了三百多种蛙类标本，每逢周三免费开放。"},
        {"id": "mini-zh-noodle", "title": "",
         "text": "这家小面馆的招牌是酸笋牛腩粉，汤底用柚子皮熬煮六个小时，午市常常排起长队。"},
        {"id": "mini-zh-books", "title": "社区图书角",
         "text": "社区图书角每月举办一次旧书交换会，居民可以用两本旧书换一张借阅卡。"},
        {"id": "mini-zh-stars", "title": "",
         "text": "山顶观星台配有一台折射望远镜，晴朗的夜晚可以清楚看到土星光环。"},
        {"id": "mini-en-ferry", "title": "",
         "text": "The harbour ferry to Marrow Island leaves every forty minutes; "
                 "bicycles ride free on weekday mornings."},
        {"id": "mini-en-quilt", "title": "Quilting circle",
         "text": "Our quilting circle meets in the old granary on Thursdays and lends sewing machines to beginners."},
        {"id": "mini-en-plants", "title": "",
         "text": "The glasshouse keeps a carnivorous pitcher plant collection, misted with rainwater twice a day."},
        {"id": "mini-en-umbrella", "title": "",
         "text": "Volunteers mend broken umbrellas at the Saturday repair café, using spare ribs from donated frames."},
    ),
    queries=(
        {"id": "q-frog", "text": "青蛙标本在哪里展出"},
        {"id": "q-noodle", "text": "酸笋牛腩粉的汤底是什么"},
        {"id": "q-stars", "text": "觀星台的望遠鏡能看到土星嗎"},
        {"id": "q-ferry", "text": "When does the ferry to Marrow Island leave?"},
        {"id": "q-plants", "text": "pitcher plants misting in the glasshouse"},
    ),
    qrels=(
        ("q-frog", "mini-zh-frog", 1),
        ("q-noodle", "mini-zh-noodle", 1),
        ("q-stars", "mini-zh-stars", 1),
        ("q-ferry", "mini-en-ferry", 1),
        ("q-plants", "mini-en-plants", 1),
    ),
)
HAN_IDS = Dataset(
    name="bench-mini-han-ids",
    corpus=(
        {"id": "甲", "title": "",
         "text": "渡口的老钟楼每天正午敲响十二下，声音能传到对岸的茶园。"},
        {"id": "乙", "title": "",
         "text": "梯田边的稻草人戴着褪色的红头巾，替农户吓走麻雀。"},
    ),
    queries=(
        {"id": "q-甲", "text": "钟楼正午敲几下"},
        {"id": "q-乙", "text": "稻草人头巾"},
    ),
    qrels=(
        ("q-甲", "甲", 1),
        ("q-乙", "乙", 1),
    ),
)
PASSAGES = 8
QUERIES = 5
METRIC_KEYS = {"ndcg@10", "recall@10", "mrr@10", "p50_ms", "p95_ms", "p99_ms"}
PERFECT = {"ndcg@10": 1.0, "recall@10": 1.0, "mrr@10": 1.0}
# Invented distractor sentences: each ends a sentence and is longer than 8 characters, so the
# command takes each one whole.
SENTENCES = (
    "Lanterns drift down the canal every autumn evening.",
    "The baker on Quill Lane shapes rye loaves like sleeping owls.",
    "灯笼沿着运河缓缓漂向下游的石桥。",
)


@pytest.fixture
def corpora(tmp_path):
    """A --corpora folder: one .md file of SENTENCES, and a .txt file the command must ignore."""
    folder = tmp_path / "corpora"
    (folder / "town").mkdir(parents=True)
    (folder / "town" / "notes.md").write_text(f"{SENTENCES[0]} {SENTENCES[1]}\n\n{SENTENCES[2]}\n",
                                              encoding="utf-8")
    (folder / "ignored.txt").write_text("This sentence sits in a text file and is never drawn.\n",
                                        encoding="utf-8")
    return folder


def _bench(tmp_path, *args, dataset: Dataset | Path = MINI, name="report.json"):
    """Run the command with the hashing embedder; returns (JSON report, stdout)."""
    if isinstance(dataset, Dataset):
        dataset = dataset.write(tmp_path / "datasets")
    path = tmp_path / name
    out = StringIO()
    call_command("bench_retrieval", "--dataset", str(dataset), "--embedder", "hashing", "--json", str(path),
                 *args, stdout=out)
    return json.loads(path.read_text(encoding="utf-8")), out.getvalue()


def _counts() -> tuple[int, ...]:
    return (KnowledgeBase.objects.count(), Document.objects.count(), Chunk.objects.count(),
            Project.objects.count(), EmbeddingModel.objects.count())


def _kept_kb(stdout: str) -> KnowledgeBase:
    match = re.search(r"kept knowledge base (\S+) \(search it again with --kb (\S+)\)", stdout)
    assert match and match.group(1) == match.group(2)
    return KnowledgeBase.objects.get(pk=match.group(1))


def _active_children(kb) -> int:
    return Chunk.objects.filter(generation__knowledge_base=kb, generation__status="active",
                                kind=Chunk.Kind.CHILD).count()


def test_run_writes_every_spec_key_with_exact_keyword_scores_and_deletes_the_scratch_kb(tmp_path):
    before = _counts()[:3]  # knowledge bases, documents, chunks
    report, _ = _bench(tmp_path, "--mode", "all")
    assert set(report) >= {"dataset", "embedder", "ingest_s", "modes"}
    assert (report["dataset"], report["embedder"], report["queries"], report["chunks"], report["scale"]) == (
        "bench-mini", "bench-hashing-256", QUERIES, PASSAGES, 0)
    assert isinstance(report["ingest_s"], (int, float)) and report["ingest_s"] >= 0
    assert set(report["modes"]) == {"keyword", "vector", "hybrid"}
    for mode, figures in report["modes"].items():
        assert set(figures) >= METRIC_KEYS, mode
        for key in ("p50_ms", "p95_ms", "p99_ms"):
            assert isinstance(figures[key], (int, float)) and figures[key] >= 0, (mode, key)
        for key in ("ndcg@10", "recall@10", "mrr@10"):
            assert 0.0 <= figures[key] <= 1.0, (mode, key)
    assert {key: report["modes"]["keyword"][key] for key in PERFECT} == PERFECT
    assert _counts()[:3] == before


def test_limit_queries_evaluates_only_the_first_queries(tmp_path):
    report, _ = _bench(tmp_path, "--mode", "keyword", "--limit-queries", "2")
    assert report["queries"] == 2
    assert set(report["modes"]) == {"keyword"}
    assert {key: report["modes"]["keyword"][key] for key in PERFECT} == PERFECT


def test_keep_keeps_the_kb_and_kb_searches_it_again_without_ingesting(tmp_path):
    first, stdout = _bench(tmp_path, "--mode", "keyword", "--keep", name="first.json")
    kb = _kept_kb(stdout)
    assert (kb.documents.count(), _active_children(kb)) == (PASSAGES, PASSAGES)
    counts = _counts()
    second, stdout = _bench(tmp_path, "--mode", "keyword", "--kb", str(kb.pk), name="second.json")
    assert _counts() == counts
    assert (second["dataset"], second["ingest_s"], second["chunks"], second["queries"]) == (
        "bench-mini", 0.0, PASSAGES, QUERIES)
    assert {key: second["modes"]["keyword"][key] for key in PERFECT} == {
        key: first["modes"]["keyword"][key] for key in PERFECT} == PERFECT
    assert KnowledgeBase.objects.filter(pk=kb.pk).exists()


def test_kb_unknown_or_malformed_is_refused_and_creates_nothing(tmp_path):
    counts = _counts()
    unknown = "00000000-0000-0000-0000-000000000000"
    with pytest.raises(CommandError, match=rf"^no knowledge base {unknown}$"):
        _bench(tmp_path, "--kb", unknown)
    with pytest.raises(CommandError, match=r"^no knowledge base not-a-uuid$"):
        _bench(tmp_path, "--kb", "not-a-uuid")
    assert _counts() == counts
    assert not (tmp_path / "report.json").exists()


def test_a_dataset_without_qrels_is_refused_and_creates_nothing(tmp_path):
    folder = tmp_path / "no-qrels"
    folder.mkdir()
    for name in ("corpus.jsonl", "queries.jsonl"):
        shutil.copy(MINI.write(tmp_path / "datasets") / name, folder / name)
    counts = _counts()
    with pytest.raises(CommandError, match=f"^{re.escape(str(folder))} has no qrels.tsv$"):
        _bench(tmp_path, dataset=folder)
    assert _counts() == counts


def test_scale_adds_distractor_chunks_made_of_the_corpora_sentences(tmp_path, corpora, settings):
    settings.KNOWLEDGE_WINDOW_CHARS = 40
    report, stdout = _bench(tmp_path, "--mode", "keyword", "--scale", "5", "--corpora", str(corpora), "--keep")
    kb = _kept_kb(stdout)
    generation = IndexGeneration.objects.get(knowledge_base=kb, status="active")
    assert (report["chunks"], report["scale"]) == (PASSAGES, 5)
    assert _active_children(kb) == PASSAGES + 5
    texts = list(Chunk.objects.filter(generation=generation, kind=Chunk.Kind.CHILD,
                                      document__filename=DISTRACTOR_FILE).values_list("text", flat=True))
    assert len(texts) == 5
    made_of_sentences = re.compile("(?:" + "|".join(map(re.escape, SENTENCES)) + ")+")
    for text in texts:
        assert made_of_sentences.fullmatch(text), text
        assert len(text) >= 300
    assert KeywordTermStat.objects.get(generation=generation, term="#n").df == PASSAGES + 5
    # Their windows, as the generation cuts them, each with terms and a vector near its chunk's.
    for chunk in Chunk.objects.filter(generation=generation, document__filename=DISTRACTOR_FILE):
        windows = list(ChunkWindow.objects.filter(chunk=chunk).order_by("index"))
        assert [(w.start, w.end) for w in windows] == window_spans(chunk.text, 40)
        for window in windows:
            assert window.text_hash == text_hash(chunk.text[window.start:window.end])
            assert window.search_vector is not None
            cosine = float(np.dot(window.embedding, chunk.embedding))
            assert 0.5 < cosine < 0.9999


@pytest.mark.parametrize("where", ["no-md", "missing"])
def test_scale_without_md_sentences_under_corpora_is_refused_and_creates_nothing(tmp_path, where):
    folder = tmp_path / where
    if where == "no-md":
        folder.mkdir()
        (folder / "sentences.txt").write_text(f"{SENTENCES[0]} {SENTENCES[1]}\n", encoding="utf-8")
    counts = _counts()
    message = f"--scale needs sentences: no *.md text under {folder}"
    with pytest.raises(CommandError, match=f"^{re.escape(message)}$"):
        _bench(tmp_path, "--scale", "5", "--corpora", str(folder))
    assert _counts() == counts
    assert not (tmp_path / "report.json").exists()


def test_kb_after_scale_reports_the_distractor_chunks_it_holds(tmp_path, corpora):
    _, stdout = _bench(tmp_path, "--mode", "keyword", "--scale", "5", "--corpora", str(corpora), "--keep",
                       name="first.json")
    kb = _kept_kb(stdout)
    counts = _counts()
    report, _ = _bench(tmp_path, "--mode", "keyword", "--kb", str(kb.pk), name="second.json")
    assert (report["scale"], report["chunks"], report["queries"], report["ingest_s"]) == (5, PASSAGES, QUERIES, 0.0)
    assert _counts() == counts


def test_a_run_leaves_the_settings_it_overrides_as_they_were(tmp_path):
    def overridden():  # the run sets a queue of its own and at least 1000 files per upload
        return django_settings.KNOWLEDGE_TASK_QUEUE, django_settings.KNOWLEDGE_UPLOAD_MAX_FILES

    before = overridden()
    assert before[1] < 1000  # else a leaked upload limit would not show
    _bench(tmp_path, "--mode", "keyword")
    assert overridden() == before


def test_ids_that_sanitise_alike_stay_apart_and_each_ranks_as_itself(tmp_path):
    report, stdout = _bench(tmp_path, "--mode", "keyword", "--keep", dataset=HAN_IDS)
    kb = _kept_kb(stdout)
    filenames = set(kb.documents.values_list("filename", flat=True))
    assert len(filenames) == 2
    assert (report["dataset"], report["chunks"], report["queries"]) == ("bench-mini-han-ids", 2, 2)
    assert {key: report["modes"]["keyword"][key] for key in PERFECT} == PERFECT


@pytest.mark.parametrize(("args", "message"), [
    (["--limit-queries", "0"], r"^--limit-queries must be at least 1$"),
    (["--scale", "-1", "--corpora", "{corpora}"], r"^--scale must not be negative$"),
    (["--neighbours", "2"], r"^--neighbours needs --scale or --kb and must not be negative$"),
    (["--scale", "5", "--corpora", "{corpora}", "--neighbours", "1", "--neighbour-chunks", "-1"],
     r"^--neighbour-chunks must not be negative$"),
])
def test_a_bad_count_option_is_refused_and_creates_nothing(tmp_path, corpora, args, message):
    counts = _counts()
    with pytest.raises(CommandError, match=message):
        _bench(tmp_path, *[arg.format(corpora=corpora) for arg in args])
    assert _counts() == counts
    assert not (tmp_path / "report.json").exists()


def test_a_dataset_with_no_relevant_qrels_is_refused_and_creates_nothing(tmp_path):
    folder = tmp_path / "no-relevant"
    folder.mkdir()
    for name in ("corpus.jsonl", "queries.jsonl"):
        shutil.copy(MINI.write(tmp_path / "datasets") / name, folder / name)
    # A header line, zero relevance, and a relevant pair for a query the dataset does not have.
    (folder / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq-frog\tmini-zh-frog\t0\nq-ferry\tmini-en-ferry\t0\n"
        "q-absent\tmini-en-quilt\t1\n", encoding="utf-8")
    counts = _counts()
    queries = folder.resolve() / "queries.jsonl"
    with pytest.raises(CommandError,
                       match=f"^no query in {re.escape(str(queries))} has a relevant passage in qrels.tsv$"):
        _bench(tmp_path, dataset=folder)
    assert _counts() == counts
    assert not (tmp_path / "report.json").exists()


def test_kb_of_another_dataset_is_refused_and_changes_nothing(tmp_path):
    _, stdout = _bench(tmp_path, "--mode", "keyword", "--keep", dataset=HAN_IDS, name="first.json")
    kb = _kept_kb(stdout)
    counts = _counts()
    with pytest.raises(CommandError, match=rf"^knowledge base {kb.pk} holds none of bench-mini's passages$"):
        _bench(tmp_path, "--mode", "keyword", "--kb", str(kb.pk), name="second.json")
    assert _counts() == counts
    assert not (tmp_path / "second.json").exists()


def test_split_reports_each_fold_on_its_own_queries(tmp_path):
    from apps.knowledge.management.commands.bench_retrieval import fold_of

    report, stdout = _bench(tmp_path, "--mode", "keyword", "--split")
    folds = report["modes"]["keyword"]
    expected = {fold: sum(1 for q in MINI.queries if fold_of(q["id"]) == fold) for fold in "AB"}
    assert {fold: folds[fold]["queries"] for fold in "AB"} == expected
    assert expected["A"] and expected["B"]  # the mini set's ids fall in both folds
    assert {key: folds["A"][key] for key in PERFECT} == PERFECT
    assert "keyword A" in stdout and "keyword B" in stdout
    assert set(report["shared_relevant"]) == {"A", "B"}
    assert "queries sharing a relevant passage with the other fold: A " in stdout


def test_split_counts_the_queries_that_share_a_relevant_passage_with_the_other_fold():
    from apps.knowledge.management.commands.bench_retrieval import fold_of, shared_relevant

    in_a = [f"q{n}" for n in range(40) if fold_of(f"q{n}") == "A"][:3]
    in_b = [f"q{n}" for n in range(40) if fold_of(f"q{n}") == "B"][:2]
    folds = {"A": [{"id": i} for i in in_a], "B": [{"id": i} for i in in_b]}
    qrels = {in_a[0]: {"p1"}, in_a[1]: {"p2", "p3"}, in_a[2]: {"p4"},  # p3 and p4 are judged in B too
             in_b[0]: {"p3", "p9"}, in_b[1]: {"p4"}}
    assert shared_relevant(folds, qrels) == {"A": 2, "B": 2}
    assert shared_relevant(folds, {**qrels, in_b[0]: {"p9"}, in_b[1]: {"p8"}}) == {"A": 0, "B": 0}


def test_folds_follow_the_query_id_not_the_file_order():
    from apps.knowledge.management.commands.bench_retrieval import fold_of

    ids = [f"q{i}" for i in range(200)]
    assert [fold_of(i) for i in ids] == [fold_of(i) for i in ids]
    assert 70 < sum(fold_of(i) == "A" for i in ids) < 130


def test_folds_split_ids_whose_plain_sha256_ends_even():
    # Every one of dureader-robust-a's query ids has a SHA-256 ending in an even byte: an unsalted
    # parity put the whole set in fold A.
    import hashlib

    from apps.knowledge.management.commands.bench_retrieval import fold_of

    ids = [i for i in (f"{n:032x}" for n in range(600)) if hashlib.sha256(i.encode()).digest()[-1] % 2 == 0]
    assert 100 < sum(fold_of(i) == "A" for i in ids) < len(ids) - 100


def test_a_split_leaving_a_fold_under_a_third_is_refused():
    from apps.knowledge.management.commands.bench_retrieval import fold_of, split_folds

    only_a = [{"id": i} for i in (f"q{n}" for n in range(60)) if fold_of(i) == "A"]
    with pytest.raises(CommandError, match=r"too uneven"):
        split_folds([*only_a, {"id": next(f"q{n}" for n in range(60) if fold_of(f"q{n}") == "B")}])


def test_grid_chooses_on_one_fold_and_reports_on_the_other(tmp_path):
    report, stdout = _bench(tmp_path, "--mode", "keyword", "--split", "--grid",
                            "dense_weight=0.0,adaptive;search_candidates=5,50")
    assert [entry["parameters"] for entry in report["grid"]] == [
        {"dense_weight": 0.0, "search_candidates": 5}, {"dense_weight": 0.0, "search_candidates": 50},
        {"dense_weight": None, "search_candidates": 5}, {"dense_weight": None, "search_candidates": 50}]
    # A dense weight of 0 is pure keyword ranking: perfect on this set, on both folds.
    assert report["grid"][0]["folds"]["A"]["ndcg@10"] == report["grid"][0]["folds"]["B"]["ndcg@10"] == 1.0
    assert re.search(r"chosen on A: .* -> held-out B: nDCG@10 1\.0000", stdout)
    assert re.search(r"chosen on B: .* -> held-out A: nDCG@10 1\.0000", stdout)
    # Both search_candidates values tie at 1.0 with a dense weight of 0: the choice says so.
    ties = {fold: sum(entry["folds"][fold]["ndcg@10"] == 1.0 for entry in report["grid"]) for fold in "AB"}
    assert min(ties.values()) >= 2
    for fold in "AB":
        assert f"(the first of {ties[fold]} tied on {fold})" in stdout


@pytest.mark.parametrize(("grid", "message"), [
    ("no_such_key=1", "unknown key"),
    ("search_candidates=", "unknown key or no values"),
    ("search_candidates=many", "needs numbers"),
    ("fusion=mean", "convex or rrf"),
    ("search_candidates=0", "must be ≥ 1"),
])
def test_a_bad_grid_is_refused_before_anything_is_loaded(tmp_path, grid, message):
    counts = _counts()
    with pytest.raises(CommandError, match=message):
        _bench(tmp_path, "--grid", grid)
    assert _counts() == counts


def test_a_document_a_worker_claimed_first_is_awaited_not_skipped(tmp_path, monkeypatch):
    """Another process (a worker on the same database) ingests the document: the bench waits for
    its outcome instead of stopping with `skipped`."""
    from apps.knowledge import ingest

    real = ingest.document_ingest

    def worker_got_there_first(*, document_id, run_token=None):
        real(document_id=document_id)  # the "worker" finishes it
        return "skipped"  # what the bench's own call sees

    monkeypatch.setattr(ingest, "document_ingest", worker_got_there_first)
    report, _ = _bench(tmp_path, "--mode", "keyword")
    assert {key: report["modes"]["keyword"][key] for key in PERFECT} == PERFECT


def test_a_database_without_migrations_says_what_to_run(tmp_path, monkeypatch):
    from django.db.migrations.executor import MigrationExecutor

    monkeypatch.setattr(MigrationExecutor, "migration_plan", lambda self, targets: [("knowledge", "9999")])
    counts = _counts()
    with pytest.raises(CommandError, match=r"1 unapplied migration\(s\): run `python manage.py migrate` first"):
        _bench(tmp_path)
    assert _counts() == counts


def test_neighbours_are_kbs_of_the_model_holding_copies_of_the_distractors_each_with_its_own_index(
        tmp_path, corpora, settings):
    settings.KNOWLEDGE_RETRIEVAL = {"generation_index_min_rows": 3}
    _, stdout = _bench(tmp_path, "--mode", "vector", "--scale", "5", "--neighbours", "2", "--corpora", str(corpora),
                       "--keep")
    kb = _kept_kb(stdout)
    neighbours = list(KnowledgeBase.objects.filter(name__startswith=f"{kb.name} neighbour "))
    assert sorted(n.name for n in neighbours) == [f"{kb.name} neighbour 1", f"{kb.name} neighbour 2"]
    source = set(Chunk.objects.filter(generation__knowledge_base=kb, document__filename=DISTRACTOR_FILE)
                 .values_list("text", flat=True))
    for neighbour in neighbours:
        assert neighbour.embedding_model_id == kb.embedding_model_id
        generation = IndexGeneration.objects.get(knowledge_base=neighbour, status="active")
        copies = Chunk.objects.filter(generation=generation, kind=Chunk.Kind.CHILD)
        assert set(copies.values_list("text", flat=True)) == source and copies.count() == 5
        assert all(f"#g{generation.pk.hex}" in vector and f"#g{kb.generations.get().pk.hex}" not in vector
                   for vector in copies.values_list("search_vector", flat=True))
        assert KeywordTermStat.objects.get(generation=generation, term="#n").df == 5
        assert generation.vector_indexed and generation.keyword_indexed
    measured = IndexGeneration.objects.get(knowledge_base=kb, status="active")
    assert measured.vector_indexed and measured.keyword_indexed


def _distractor_texts(kb, indexes) -> set[str]:
    return set(Chunk.objects.filter(generation__knowledge_base=kb, document__filename=DISTRACTOR_FILE,
                                    index__in=indexes).values_list("text", flat=True))


def _neighbour_texts(kb, number) -> list[str]:
    neighbour = KnowledgeBase.objects.get(name=f"{kb.name} neighbour {number}")
    return list(Chunk.objects.filter(generation__knowledge_base=neighbour, kind=Chunk.Kind.CHILD)
                .values_list("text", flat=True))


def test_neighbour_chunks_gives_each_neighbour_a_slice_of_its_own(tmp_path, corpora):
    _, stdout = _bench(tmp_path, "--mode", "keyword", "--scale", "5", "--neighbours", "2",
                       "--neighbour-chunks", "2", "--corpora", str(corpora), "--keep")
    kb = _kept_kb(stdout)
    first, second = _neighbour_texts(kb, 1), _neighbour_texts(kb, 2)
    assert len(first) == len(second) == 2
    assert set(first) == _distractor_texts(kb, [0, 1]) and set(second) == _distractor_texts(kb, [2, 3])


def test_neighbours_can_be_added_to_a_kept_kb_and_are_numbered_on(tmp_path, corpora):
    _, stdout = _bench(tmp_path, "--mode", "keyword", "--scale", "5", "--neighbours", "1", "--corpora", str(corpora),
                       "--keep")
    kb = _kept_kb(stdout)
    _, stdout = _bench(tmp_path, "--mode", "keyword", "--kb", str(kb.pk), "--neighbours", "1",
                       "--neighbour-chunks", "3", name="second.json")
    added = KnowledgeBase.objects.get(name=f"{kb.name} neighbour 2")
    assert f"kept neighbour knowledge base {added.pk}" in stdout
    assert len(_neighbour_texts(kb, 1)) == 5
    assert set(_neighbour_texts(kb, 2)) == _distractor_texts(kb, [3, 4])
    assert len(_neighbour_texts(kb, 2)) == 2  # the slice 3..5 holds only the distractors 3 and 4


def test_neighbours_of_a_kept_kb_without_distractors_are_refused(tmp_path):
    _, stdout = _bench(tmp_path, "--mode", "keyword", "--keep")
    kb = _kept_kb(stdout)
    counts = _counts()
    with pytest.raises(CommandError, match=r"has no distractors to copy into neighbours \(load it with --scale\)$"):
        _bench(tmp_path, "--mode", "keyword", "--kb", str(kb.pk), "--neighbours", "1", name="second.json")
    assert _counts() == counts


def test_a_run_without_keep_deletes_its_neighbours_too(tmp_path, corpora):
    before = _counts()[:3]  # knowledge bases, documents, chunks
    _bench(tmp_path, "--mode", "keyword", "--scale", "5", "--neighbours", "2", "--corpora", str(corpora))
    assert _counts()[:3] == before
