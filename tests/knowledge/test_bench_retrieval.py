"""manage.py bench_retrieval on a tiny dataset of its own (fixtures/bench-mini), with the
in-process `hashing` embedder.

bench-mini: 8 invented passages (4 Chinese, 4 English) and 5 queries, each sharing rare
characters or words with its one relevant passage only (one query in Traditional Chinese, one
needing English stems), so keyword search ranks every answer first: nDCG@10 = Recall@10 =
MRR@10 = 1 for each query, hence 1.0 on average.
"""

import json
import re
import shutil
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command

from apps.knowledge.models import Chunk, Document, EmbeddingModel, IndexGeneration, KeywordTermStat, KnowledgeBase
from apps.projects.models import Project

pytestmark = pytest.mark.django_db

MINI = Path(__file__).resolve().parent / "fixtures" / "bench-mini"
PASSAGES = 8
QUERIES = 5
METRIC_KEYS = {"ndcg@10", "recall@10", "mrr@10", "p50_ms", "p95_ms", "p99_ms"}
PERFECT = {"ndcg@10": 1.0, "recall@10": 1.0, "mrr@10": 1.0}


@pytest.fixture(autouse=True)
def _restore_settings(settings):
    # The command assigns these two settings for the rest of the process; an override around
    # each test puts them back afterwards.
    settings.KNOWLEDGE_TASK_QUEUE = settings.KNOWLEDGE_TASK_QUEUE
    settings.KNOWLEDGE_UPLOAD_MAX_FILES = settings.KNOWLEDGE_UPLOAD_MAX_FILES


def _bench(tmp_path, *args, dataset=MINI, name="report.json"):
    """Run the command with the hashing embedder; returns (JSON report, stdout)."""
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
        shutil.copy(MINI / name, folder / name)
    counts = _counts()
    with pytest.raises(CommandError, match=f"^{re.escape(str(folder))} has no qrels.tsv$"):
        _bench(tmp_path, dataset=folder)
    assert _counts() == counts


def test_scale_adds_distractor_chunks_counted_by_the_keyword_stats(tmp_path):
    # The command draws distractor sentences from <BASE_DIR>/../shared/bench/corpora.
    corpora = Path(django_settings.BASE_DIR).parent / "shared" / "bench" / "corpora"
    assert any(corpora.rglob("*.md")), f"{corpora} holds no .md files for --scale"
    report, stdout = _bench(tmp_path, "--mode", "keyword", "--scale", "50", "--keep")
    kb = _kept_kb(stdout)
    generation = IndexGeneration.objects.get(knowledge_base=kb, status="active")
    assert (report["chunks"], report["scale"]) == (PASSAGES, 50)
    assert _active_children(kb) == PASSAGES + 50
    assert Chunk.objects.filter(generation=generation, kind=Chunk.Kind.CHILD,
                                document__filename="synthetic-distractors.txt").count() == 50
    assert KeywordTermStat.objects.get(generation=generation, term="#n").df == PASSAGES + 50
