"""Retrieval benchmark on any folder in the layout of ../shared/bench/datasets/* (corpus.jsonl,
queries.jsonl, qrels.tsv).

    python -m bailinghub.embedded exec -- .venv/bin/python manage.py bench_retrieval \
        --dataset ../shared/bench/datasets/dureader-robust-a [--mode all] [--embedder local] \
        [--top-k 10] [--limit-queries N] [--json FILE] [--scale N [--corpora DIR]] [--keep | --kb UUID]

Loads the corpus into a scratch KB through the real pipeline (upload service, then each
document's ingestion — the service the Celery task runs — in this process; the embedding cache
makes a second run skip embedding), runs every query through the same selector the API uses, and
prints nDCG@10, Recall@10, MRR@10 (per document: a document ranks at its best chunk), search
latency p50/p95/p99 excluding the query embedding (reported separately), and ingest time.

`--scale N` adds N synthetic distractor chunks to the same KB: text made of sentences drawn from
../shared/bench/corpora (or --corpora), vectors that are random blends of two of the corpus's real
vectors plus noise (so latency and quality at scale are measured without embedding N texts).
Say so with the figures.
`--keep` keeps the loaded KB and `--kb UUID` searches it again (loading 1M chunks takes long).

An honest protocol: `--split` divides the queries in two folds by a hash of the query id and prints
every figure per fold. `--grid "key=v1,v2;key2=v3,v4"` (keys of KNOWLEDGE_RETRIEVAL, or
`dense_weight` — a number or `adaptive` — and `fusion`) evaluates every combination in hybrid mode
and, with `--split`, chooses the best on one fold and reports it on the other, both ways: a figure
scored on the queries it was tuned on is not a result.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
import re
import statistics
import time
import uuid
from collections import defaultdict
from dataclasses import fields
from pathlib import Path

import numpy as np
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connection, transaction
from django.test import override_settings

from apps.knowledge import generation_indexes, ingest, selectors, services
from apps.knowledge.models import Chunk, Document, EmbeddingModel, IndexGeneration, KnowledgeBase
from apps.knowledge.pipeline import index
from apps.knowledge.pipeline.retrieve import SearchOptions
from apps.knowledge.pipeline.strategy import strategy_from_snapshot
from apps.knowledge.pipeline.windows import window_spans
from apps.projects.models import Project

DEFAULT_CORPORA = Path(settings.BASE_DIR).parent / "shared" / "bench" / "corpora"
MODEL_NAMES = {"local": "multilingual-e5-small", "use": "universal-sentence-encoder-multilingual"}


DISTRACTOR_FILE = "synthetic-distractors.txt"


def distractor_sentences(corpora: Path) -> list[str]:
    sentences = []
    for path in sorted(corpora.rglob("*.md")) if corpora.is_dir() else []:
        sentences += [s.strip() for s in re.split(r"(?<=[。！？；.!?])\s*|\n+", path.read_text("utf-8"))
                      if len(s.strip()) > 8]
    return sentences


def load_dataset(folder: Path, limit_queries: int | None):
    corpus = [json.loads(line) for line in (folder / "corpus.jsonl").open(encoding="utf-8") if line.strip()]
    queries = [json.loads(line) for line in (folder / "queries.jsonl").open(encoding="utf-8") if line.strip()]
    qrels: dict[str, set[str]] = defaultdict(set)
    for line in (folder / "qrels.tsv").open(encoding="utf-8"):
        parts = line.rstrip("\n").split("\t")
        if len(parts) >= 3 and parts[2].strip().isdigit() and int(parts[2]) > 0:
            qrels[parts[0]].add(parts[1])
    queries = [q for q in queries if q["id"] in qrels]
    if limit_queries:
        queries = queries[:limit_queries]
    return corpus, queries, qrels


def metrics(ranked: list[str], relevant: set[str], k: int = 10) -> tuple[float, float, float]:
    top = ranked[:k]
    dcg = sum(1 / math.log2(i + 2) for i, doc in enumerate(top) if doc in relevant)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(k, len(relevant))))
    recall = len(set(top) & relevant) / len(relevant)
    mrr = next((1 / (i + 1) for i, doc in enumerate(top) if doc in relevant), 0.0)
    return (dcg / ideal if ideal else 0.0), recall, mrr


def fold_of(query_id: str) -> str:
    """The fold of a query: "A" or "B" by the parity of a salted SHA-256 of its id (stable across
    runs and machines, independent of the file's order). Salted: the unsalted hash's last byte is
    even for every one of dureader-robust-a's 714 query ids, which put them all in one fold."""
    return "AB"[hashlib.sha256(b"bailinghub-fold:" + query_id.encode("utf-8")).digest()[0] % 2]


def split_folds(queries: list[dict]) -> dict[str, list[dict]]:
    """{"A": [...], "B": [...]}; refuses a split that leaves a fold under a third of the queries."""
    folds = {fold: [q for q in queries if fold_of(q["id"]) == fold] for fold in "AB"}
    smaller = min(len(members) for members in folds.values())
    if smaller * 3 < len(queries):
        raise CommandError(f"--split put {len(folds['A'])} queries in fold A and {len(folds['B'])} in B: "
                           "too uneven to tune on one and report on the other (use more queries)")
    return folds


def shared_relevant(folds: dict[str, list[dict]], qrels: dict[str, set]) -> dict[str, int]:
    """{fold: how many of its queries share a relevant passage with a query of the other fold}.
    Such queries tell a parameter that can learn particular passages (a trained model, say) from
    one that cannot: scifact writes several claims from one abstract, and ~40 % of each fold's
    queries share one (bench/README.md, stop 26)."""
    relevant = {fold: {p for q in members for p in qrels.get(q["id"], ())} for fold, members in folds.items()}
    elsewhere = {fold: set().union(*(relevant[f] for f in folds if f != fold)) for fold in folds}
    return {fold: sum(1 for q in members if elsewhere[fold].intersection(qrels.get(q["id"], ())))
            for fold, members in folds.items()}


def summarise(runs: dict[str, tuple], queries: list[dict]) -> dict:
    rows = [runs[q["id"]] for q in queries]
    if not rows:
        raise CommandError("a fold has no query: use more queries (--limit-queries) or no --split")
    latencies, embed_ms = [r[1] for r in rows], [r[2] for r in rows]
    return {
        "queries": len(rows),
        "ndcg@10": round(statistics.fmean(r[0][0] for r in rows), 4),
        "recall@10": round(statistics.fmean(r[0][1] for r in rows), 4),
        "mrr@10": round(statistics.fmean(r[0][2] for r in rows), 4),
        "p50_ms": round(percentile(latencies, 50), 2),
        "p95_ms": round(percentile(latencies, 95), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "query_embedding_p50_ms": round(percentile(embed_ms, 50), 2),
    }


def parse_grid(text: str) -> dict[str, list]:
    """`"key=v1,v2;key2=v3"` → {key: [values]}; numbers parsed, `adaptive` (dense_weight) is None."""
    from apps.knowledge.pipeline.retrieval_settings import RetrievalSettings

    known = {f.name for f in fields(RetrievalSettings)} | {"dense_weight", "fusion"}
    grid: dict[str, list] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        key, _, values = part.partition("=")
        key = key.strip()
        if key not in known or not values.strip():
            raise CommandError(f"--grid: unknown key or no values in {part!r}; keys: {', '.join(sorted(known))}")
        parsed: list[str | float | None] = []
        for value in (v.strip() for v in values.split(",")):
            if key == "fusion":
                if value not in {"convex", "rrf"}:
                    raise CommandError(f"--grid: fusion is convex or rrf, not {value!r}")
                parsed.append(value)
            elif key == "dense_weight" and value == "adaptive":
                parsed.append(None)
            else:
                try:
                    number = float(value)
                except ValueError:
                    raise CommandError(f"--grid: {key} needs numbers, not {value!r}") from None
                parsed.append(int(number) if number.is_integer() and key != "dense_weight" else number)
        grid[key] = parsed
    if not grid:
        raise CommandError("--grid needs at least one key=values")
    try:
        for combination in grid_combinations(grid):
            RetrievalSettings.from_mapping({k: v for k, v in combination.items()
                                            if k not in {"dense_weight", "fusion"}})
    except ImproperlyConfigured as exc:
        raise CommandError(f"--grid: {exc}") from None
    return grid


def grid_combinations(grid: dict[str, list]) -> list[dict]:
    keys = sorted(grid)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(grid[k] for k in keys))]


def _require_migrated() -> None:
    from django.db.migrations.executor import MigrationExecutor

    try:
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as exc:
        raise CommandError(f"The database cannot be read ({type(exc).__name__}); is it running?") from None
    if pending:
        raise CommandError(f"The database has {len(pending)} unapplied migration(s): run "
                           "`python manage.py migrate` first (with the embedded servers: "
                           "`python -m bailinghub.embedded exec -- .venv/bin/python manage.py migrate`).")


def _await_outcome(document_id, timeout: float = 3600.0) -> str:
    """The final status of a document another process is ingesting (completed, failed: …)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        document = Document.objects.filter(pk=document_id).values("status", "error_code").first()
        if document is None:
            return "deleted"
        if document["status"] == Document.Status.COMPLETED:
            return "completed"
        if document["status"] == Document.Status.FAILED:
            return f"failed: {document['error_code']}"
        time.sleep(0.2)
    return "still running after an hour"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def _file_for(passage: dict) -> SimpleUploadedFile:
    title = (passage.get("title") or "").strip().replace("\n", " ")
    text = passage["text"]
    name = re.sub(r"[^A-Za-z0-9._-]", "_", passage["id"])[:100]
    if name != passage["id"]:  # ids that differ only in replaced characters must stay apart
        name = f"{name[:80]}-{hashlib.sha256(passage['id'].encode()).hexdigest()[:12]}"
    if title:
        return SimpleUploadedFile(f"{name}.md", f"# {title}\n\n{text}\n".encode())
    return SimpleUploadedFile(f"{name}.txt", text.encode())


class Command(BaseCommand):
    help = "Measure retrieval quality and latency on a dataset folder."

    def add_arguments(self, parser):
        parser.add_argument("--dataset", required=True)
        parser.add_argument("--mode", default="all", choices=["keyword", "vector", "hybrid", "all"])
        parser.add_argument("--top-k", type=int, default=10)
        parser.add_argument("--embedder", default="local", help="local | use | hashing")
        parser.add_argument("--limit-queries", type=int, default=None, help="evaluate the first N queries (N ≥ 1)")
        parser.add_argument("--json", dest="json_path", default=None)
        parser.add_argument("--scale", type=int, default=0, help="add N synthetic distractor chunks")
        parser.add_argument("--neighbours", type=int, default=0, metavar="N",
                            help="with --scale or --kb: N more KBs of the same model beside it, each a copy of "
                                 "its distractors (searches must not walk their vectors)")
        parser.add_argument("--neighbour-chunks", type=int, default=0, metavar="M",
                            help="each neighbour copies M distractors, a slice of its own (neighbour k the "
                                 "distractors k·M − M to k·M − 1); default: all of them")
        parser.add_argument("--corpora", default=str(DEFAULT_CORPORA), metavar="DIR",
                            help="where --scale takes its sentences: *.md files under DIR "
                                 "(default: ../shared/bench/corpora beside the checkout)")
        parser.add_argument("--fusion", default="convex", choices=["convex", "rrf"])
        parser.add_argument("--dense-weight", type=float, default=None,
                            help="fixed dense weight (default: adaptive per query)")
        parser.add_argument("--candidates", type=int, default=None,
                            help="candidates per channel (default: KNOWLEDGE_RETRIEVAL search_candidates, 50)")
        parser.add_argument("--max-chars", type=int, default=None,
                            help="the KB's auto chunk size (default: KNOWLEDGE_DEFAULT_CHUNK_STRATEGY)")
        parser.add_argument("--split", action="store_true",
                            help="two folds by a hash of the query id; figures per fold")
        parser.add_argument("--grid", default=None, metavar='"key=v1,v2;key=v3"',
                            help="hybrid parameter grid (KNOWLEDGE_RETRIEVAL keys, dense_weight, fusion); "
                                 "with --split, chosen on one fold and reported on the other")
        parser.add_argument("--keep", action="store_true", help="keep the scratch KB afterwards")
        parser.add_argument("--kb", default=None, metavar="UUID",
                            help="search a KB kept by an earlier --keep run of the same dataset instead of "
                                 "loading one (implies --keep; --scale, --embedder and --max-chars are ignored)")

    def handle(self, *args, **o):
        folder = Path(o["dataset"]).expanduser().resolve()
        for name in ("corpus.jsonl", "queries.jsonl", "qrels.tsv"):
            if not (folder / name).is_file():
                raise CommandError(f"{folder} has no {name}")
        if o["limit_queries"] is not None and o["limit_queries"] < 1:
            raise CommandError("--limit-queries must be at least 1")
        if o["scale"] < 0:
            raise CommandError("--scale must not be negative")
        if o["neighbours"] < 0 or (o["neighbours"] and not (o["scale"] or o["kb"])):
            raise CommandError("--neighbours needs --scale or --kb and must not be negative")
        if o["neighbour_chunks"] < 0:
            raise CommandError("--neighbour-chunks must not be negative")
        _require_migrated()
        o["grid"] = parse_grid(o["grid"]) if o["grid"] else None
        corpus, queries, qrels = load_dataset(folder, o["limit_queries"])
        if not queries:
            raise CommandError(f"no query in {folder / 'queries.jsonl'} has a relevant passage in qrels.tsv")
        if o["kb"]:
            return self._measure_kept(folder, corpus, queries, qrels, o)
        sentences = distractor_sentences(Path(o["corpora"])) if o["scale"] else []
        if o["scale"] and not sentences:
            raise CommandError(f"--scale needs sentences: no *.md text under {o['corpora']}")
        model = self._model(o["embedder"])
        # Uploads queue pipeline tasks after commit; this run ingests in-process, so send them to
        # a queue nobody reads and drop it afterwards.
        discard_queue = f"bench-discard-{uuid.uuid4().hex[:8]}"
        with override_settings(KNOWLEDGE_TASK_QUEUE=discard_queue,
                               KNOWLEDGE_UPLOAD_MAX_FILES=max(settings.KNOWLEDGE_UPLOAD_MAX_FILES, 1000)):
            try:
                self._load_and_measure(folder, corpus, queries, qrels, model, sentences, o)
            finally:
                from apps.core.redis import redis_client

                redis_client().delete(discard_queue)

    def _load_and_measure(self, folder, corpus, queries, qrels, model, sentences, o) -> None:
        project, _ = Project.objects.get_or_create(slug="bench", defaults={"name": "Benchmarks"})
        strategy = None
        if o["max_chars"]:
            strategy = {**settings.KNOWLEDGE_DEFAULT_CHUNK_STRATEGY, "max_chars": o["max_chars"]}
        kb = services.knowledge_base_create(
            project=project, name=f"bench {folder.name} {o['embedder']} {uuid.uuid4().hex[:6]}",
            embedding_model=model, embedding_dim=model.dimension, chunk_strategy=strategy,
        )
        neighbours: list[KnowledgeBase] = []
        try:
            ingest_s, ingest_info = self._ingest(kb, corpus)
            self.stdout.write(f"ingested {len(corpus)} passages in {ingest_s:.1f} s "
                              f"({ingest_info['chunks']} chunks, {ingest_info['embedded']} embedded now)")
            if o["scale"]:
                started = time.perf_counter()
                self._distractors(kb, model, o["scale"], sentences)
                self.stdout.write(f"added {o['scale']} synthetic distractor chunks in "
                                  f"{time.perf_counter() - started:.1f} s")
                self._generation_indexes(kb)
                for number in range(1, o["neighbours"] + 1):
                    neighbours.append(self._neighbour(kb, project, number, o["neighbour_chunks"]))
            self._measure(kb, folder, corpus, queries, qrels, o, ingest_s=ingest_s, ingest_info=ingest_info)
        finally:
            if o["keep"]:
                self.stdout.write(f"kept knowledge base {kb.pk} (search it again with --kb {kb.pk})")
                for neighbour in neighbours:
                    self.stdout.write(f"kept neighbour knowledge base {neighbour.pk}")
            else:
                for neighbour in neighbours:
                    services.knowledge_base_delete(kb=neighbour)
                services.knowledge_base_delete(kb=kb)
                generation_indexes.stale_indexes_drop()

    @staticmethod
    def _active_generation(kb: KnowledgeBase) -> IndexGeneration:
        generation = selectors.generation_active(kb=kb)
        if generation is None:
            raise CommandError(f"{kb.name} has no active index.")
        return generation

    def _generation_indexes(self, kb: KnowledgeBase) -> None:
        started = time.perf_counter()
        outcome = generation_indexes.generation_index_ensure(self._active_generation(kb).pk)
        self.stdout.write(f"vector and keyword indexes of {kb.name}: {outcome} in "
                          f"{time.perf_counter() - started:.1f} s")

    def _neighbour(self, kb: KnowledgeBase, project, number: int, chunks: int = 0) -> KnowledgeBase:
        """Another KB of the same model holding a copy of `kb`'s distractor chunks (new ids, its own
        generation lexeme and term counts, its own vector and keyword indexes): all of them, or with
        `chunks` the slice of that many that is this neighbour's by its number."""
        started = time.perf_counter()
        source = self._active_generation(kb)
        neighbour = services.knowledge_base_create(
            project=project, name=f"{kb.name} neighbour {number}", embedding_model=kb.embedding_model,
            embedding_dim=kb.embedding_model.dimension, chunk_strategy=kb.chunk_strategy,
        )
        generation = self._active_generation(neighbour)
        document = Document.objects.create(
            knowledge_base=neighbour, filename=DISTRACTOR_FILE, file_type="txt", size=0,
            content_hash="0" * 64, status=Document.Status.COMPLETED,
        )
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                """
                INSERT INTO knowledge_chunk (id, generation_id, document_id, kind, index, text, metadata, text_hash,
                                             embedding_model_id, embedding, search_vector, disabled)
                SELECT gen_random_uuid(), %s, %s, kind, index, text, metadata, text_hash, embedding_model_id,
                       embedding, ts_delete(search_vector, %s) || %s::tsvector, false
                  FROM knowledge_chunk c JOIN knowledge_document d ON d.id = c.document_id
                 WHERE c.generation_id = %s AND d.filename = %s AND c.kind = 'child'
                   AND (%s = 0 OR c.index >= %s AND c.index < %s)
                """,
                [generation.pk, document.pk, index.generation_lexeme(source.pk),
                 "'" + index.generation_lexeme(generation.pk) + "'", source.pk, DISTRACTOR_FILE,
                 chunks, (number - 1) * chunks, number * chunks],
            )
            index.stats_add(
                rows_sql="SELECT generation_id, search_vector FROM knowledge_chunk WHERE generation_id = %s",
                params=[generation.pk])
        self.stdout.write(f"neighbour {number}: {Chunk.objects.filter(generation=generation).count()} chunks copied "
                          f"in {time.perf_counter() - started:.1f} s")
        self._generation_indexes(neighbour)
        return neighbour

    def _measure_kept(self, folder, corpus, queries, qrels, o) -> None:
        try:
            kb = KnowledgeBase.objects.select_related("embedding_model").get(pk=o["kb"])
        except (KnowledgeBase.DoesNotExist, ValueError, ValidationError) as exc:
            raise CommandError(f"no knowledge base {o['kb']}") from exc
        files = {_file_for(p).name for p in corpus}
        if not Document.objects.filter(knowledge_base=kb, filename__in=files).exists():
            raise CommandError(f"knowledge base {kb.pk} holds none of {folder.name}'s passages")
        if o["neighbours"]:
            if not Document.objects.filter(knowledge_base=kb, filename=DISTRACTOR_FILE).exists():
                raise CommandError(f"knowledge base {kb.pk} has no distractors to copy into neighbours "
                                   "(load it with --scale)")
            numbered = KnowledgeBase.objects.filter(name__startswith=f"{kb.name} neighbour ").count()
            for number in range(numbered + 1, numbered + o["neighbours"] + 1):
                neighbour = self._neighbour(kb, kb.project, number, o["neighbour_chunks"])
                self.stdout.write(f"kept neighbour knowledge base {neighbour.pk}")
        children = Chunk.objects.filter(generation__knowledge_base=kb, generation__status="active",
                                        kind=Chunk.Kind.CHILD)
        distractors = children.filter(document__filename=DISTRACTOR_FILE).count()
        # "chunks" counts the dataset's own chunks, as a loading run reports them.
        self._measure(kb, folder, corpus, queries, qrels, {**o, "scale": distractors}, ingest_s=0.0,
                      ingest_info={"chunks": children.count() - distractors})

    def _measure(self, kb, folder, corpus, queries, qrels, o, *, ingest_s: float, ingest_info: dict) -> None:
        doc_of = dict(Document.objects.filter(knowledge_base=kb).values_list("pk", "filename"))
        id_of_file = {_file_for(p).name: p["id"] for p in corpus}
        modes = ["keyword", "vector", "hybrid"] if o["mode"] == "all" else [o["mode"]]
        folds = {"all": queries}
        shared: dict[str, int] = {}
        if o["split"]:
            folds = split_folds(queries)
            shared = shared_relevant(folds, qrels)
            self.stdout.write("  queries sharing a relevant passage with the other fold: " + ", ".join(
                f"{fold} {shared[fold]} of {len(members)}" for fold, members in folds.items()))
        results: dict = {}
        for mode in modes:
            runs = self._run_mode(kb, mode, queries, qrels, doc_of, id_of_file, o)
            results[mode] = {}
            for fold, members in folds.items():
                r = results[mode][fold] = summarise(runs, members)
                label = mode if fold == "all" else f"{mode} {fold}"
                self.stdout.write(
                    f"{folder.name:>22} {label:>9}  nDCG@10 {r['ndcg@10']:.4f}  Recall@10 {r['recall@10']:.4f}  "
                    f"MRR@10 {r['mrr@10']:.4f}  p50 {r['p50_ms']:.1f} ms  p95 {r['p95_ms']:.1f} ms  "
                    f"p99 {r['p99_ms']:.1f} ms  (query embedding p50 {r['query_embedding_p50_ms']:.1f} ms)"
                )
            if not o["split"]:
                results[mode] = results[mode]["all"]
        report = {"dataset": folder.name, "embedder": kb.embedding_model.name, "ingest_s": round(ingest_s, 2),
                  "chunks": ingest_info["chunks"], "scale": o["scale"], "queries": len(queries),
                  "fusion": o["fusion"], "split": o["split"], "modes": results}
        if shared:
            report["shared_relevant"] = shared
        if o["grid"]:
            report["grid"] = self._grid(kb, folder, queries, qrels, doc_of, id_of_file, o, folds)
        if o["json_path"]:
            Path(o["json_path"]).write_text(json.dumps(report, indent=2, ensure_ascii=False))

    def _model(self, embedder: str) -> EmbeddingModel:
        if embedder in MODEL_NAMES:
            return EmbeddingModel.objects.get(name=MODEL_NAMES[embedder])
        if embedder == "hashing":
            model = EmbeddingModel.objects.filter(name="bench-hashing-256").first()
            return model or services.embedding_model_register(name="bench-hashing-256", provider="hashing",
                                                              dimension=256)
        return EmbeddingModel.objects.get(name=embedder)

    def _ingest(self, kb: KnowledgeBase, corpus: list[dict]) -> tuple[float, dict]:
        from apps.knowledge.models import EmbeddingCache

        cached_before = EmbeddingCache.objects.filter(embedding_model=kb.embedding_model).count()
        started = time.perf_counter()
        for start in range(0, len(corpus), 500):
            documents = services.document_upload(kb=kb, files=[_file_for(p) for p in corpus[start:start + 500]])
            for document in documents:
                outcome = ingest.document_ingest(document_id=document.pk)
                if outcome != "completed":
                    # A worker on the same database may have claimed it first: wait for its outcome.
                    outcome = _await_outcome(document.pk)
                if outcome != "completed":
                    raise CommandError(f"{document.filename}: {outcome}")
            self.stdout.write(f"  {min(start + 500, len(corpus))}/{len(corpus)} passages "
                              f"({time.perf_counter() - started:.0f} s)")
        seconds = time.perf_counter() - started
        chunks = Chunk.objects.filter(generation__knowledge_base=kb, kind=Chunk.Kind.CHILD).count()
        embedded = EmbeddingCache.objects.filter(embedding_model=kb.embedding_model).count() - cached_before
        return seconds, {"chunks": chunks, "embedded": embedded}

    def _grid(self, kb, folder, queries, qrels, doc_of, id_of_file, o, folds) -> list[dict]:
        """Every combination of the grid in hybrid mode; with two folds, the best on each fold
        reported on the other."""
        evaluated = []
        for combination in grid_combinations(o["grid"]):
            knobs = {k: v for k, v in combination.items() if k not in {"dense_weight", "fusion"}}
            run_o = {**o, "dense_weight": combination.get("dense_weight", o["dense_weight"]),
                     "fusion": combination.get("fusion", o["fusion"])}
            with override_settings(KNOWLEDGE_RETRIEVAL={**settings.KNOWLEDGE_RETRIEVAL, **knobs}):
                runs = self._run_mode(kb, "hybrid", queries, qrels, doc_of, id_of_file, run_o)
            scores = {fold: summarise(runs, members) for fold, members in folds.items()}
            evaluated.append({"parameters": combination, "folds": scores})
            self.stdout.write(f"{folder.name:>22}  grid {json.dumps(combination, ensure_ascii=False)}  " + "  ".join(
                f"{fold} nDCG@10 {r['ndcg@10']:.4f}" for fold, r in scores.items()))
        if set(folds) == {"A", "B"}:
            for tuned, held_out in (("A", "B"), ("B", "A")):
                best = max(evaluated, key=lambda e: e["folds"][tuned]["ndcg@10"])
                r = best["folds"][held_out]
                # A tie on the tuning fold is no choice: the grid's order picked the first.
                tied = sum(e["folds"][tuned]["ndcg@10"] == best["folds"][tuned]["ndcg@10"] for e in evaluated)
                self.stdout.write(
                    f"{folder.name:>22}  chosen on {tuned}: {json.dumps(best['parameters'], ensure_ascii=False)} "
                    f"-> held-out {held_out}: nDCG@10 {r['ndcg@10']:.4f}  Recall@10 {r['recall@10']:.4f}  "
                    f"MRR@10 {r['mrr@10']:.4f}" + (f"  (the first of {tied} tied on {tuned})" if tied > 1 else ""))
        return evaluated

    def _run_mode(self, kb, mode, queries, qrels, doc_of, id_of_file, o) -> dict[str, tuple]:
        """{query id: ((nDCG, recall, MRR), search ms without the query embedding, embedding ms)}."""
        runs: dict[str, tuple] = {}
        # The query embedding before the channels, not beside them: the time reported is the
        # search's without it.
        options = SearchOptions(top_k=o["top_k"] * 3, mode=mode, fusion=o["fusion"],
                                dense_weight=o["dense_weight"], rollup=False, candidate_k=o["candidates"],
                                embed_beside=False)
        kbs = [kb]
        for query in queries:
            result = selectors.knowledge_search(kbs=kbs, query=query["text"], options=options)
            embedding = result.timings_ms.get("query_embedding_ms", 0.0)
            ranked: list[str] = []
            for hit in result.hits:
                passage = id_of_file.get(doc_of.get(hit.document_id))
                if passage and passage not in ranked:
                    ranked.append(passage)
            runs[query["id"]] = (metrics(ranked, qrels[query["id"]], o["top_k"]),
                                 result.timings_ms["total_ms"] - embedding, embedding)
        return runs

    def _distractors(self, kb: KnowledgeBase, model: EmbeddingModel, count: int, sentences: list[str]) -> None:
        """N child chunks in one synthetic, completed document of the KB's active generation, with
        their sentence windows when the generation has them (a window's vector: its chunk's plus
        noise, σ 0.03 a dimension, renormalised)."""
        rng = random.Random(7)
        generation = selectors.generation_active(kb=kb)
        if generation is None:
            raise CommandError(f"{kb.name} has no active index to add distractors to.")
        width = strategy_from_snapshot(generation.chunk_strategy).window_chars
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT embedding::text FROM knowledge_chunk WHERE generation_id = %s AND kind = 'child' "
                "AND embedding IS NOT NULL", [generation.pk])
            real = np.array([json.loads(row[0]) for row in cursor.fetchall()], dtype=np.float32)
        document = Document.objects.create(
            knowledge_base=kb, filename=DISTRACTOR_FILE, file_type="txt", size=0,
            content_hash="0" * 64, status=Document.Status.COMPLETED,
        )
        lexeme = index.generation_lexeme(generation.pk)
        batch = 5000
        for start in range(0, count, batch):
            n = min(batch, count - start)
            # A blend of two real vectors plus noise: inside the region real texts occupy, but
            # spread out. (Noisy copies of single vectors made hundreds of near-duplicates of each
            # passage, and HNSW recall fell for every KB of the model: scifact's vector nDCG@10
            # went from 0.67 to 0.31 beside 120k of them.)
            noise_rng = np.random.default_rng(start)
            first = real[np.array([rng.randrange(len(real)) for _ in range(n)])]
            second = real[np.array([rng.randrange(len(real)) for _ in range(n)])]
            share = noise_rng.uniform(0.3, 0.7, size=(n, 1)).astype(np.float32)
            vectors = share * first + (1 - share) * second
            # σ 0.02: a blend is as close to its nearest real passage (median cos 0.90 on dureader)
            # as real passages are to each other (0.90).
            vectors += noise_rng.normal(0, 0.02, size=(n, model.dimension)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            with transaction.atomic(), connection.cursor() as cursor:
                with cursor.copy(
                    "COPY knowledge_chunk (id, generation_id, document_id, kind, index, text, metadata, text_hash, "
                    "embedding_model_id, embedding, search_vector) FROM STDIN"
                ) as copy:
                    windows = []
                    for i in range(n):
                        text = ""
                        while len(text) < 300:
                            text += rng.choice(sentences)
                        tsv = f"{index.search_terms_literal(text)} '{lexeme}'"
                        chunk = uuid.uuid4()
                        copy.write_row((
                            chunk, generation.pk, document.pk, "child", start + i, text, "{}",
                            index.text_hash(text), model.pk,
                            "[" + ",".join(f"{x:.6g}" for x in vectors[i]) + "]", tsv,
                        ))
                        windows += [(chunk, at, lo, hi, text[lo:hi], vectors[i])
                                    for at, (lo, hi) in enumerate(window_spans(text, width))]
                if windows:
                    own = np.stack([w[5] for w in windows])
                    own += noise_rng.normal(0, 0.03, size=own.shape).astype(np.float32)
                    own /= np.linalg.norm(own, axis=1, keepdims=True)
                    with cursor.copy("COPY knowledge_chunkwindow (chunk_id, index, start, \"end\", text_hash, "
                                     "embedding, search_vector) FROM STDIN") as copy:
                        for (chunk, at, lo, hi, window, _), vector in zip(windows, own, strict=True):
                            copy.write_row((chunk, at, lo, hi, index.text_hash(window),
                                            "[" + ",".join(f"{x:.6g}" for x in vector) + "]",
                                            index.search_terms_literal(window)))
                index.stats_add(
                    rows_sql="SELECT generation_id, search_vector FROM knowledge_chunk "
                             "WHERE document_id = %s AND index >= %s AND index < %s AND kind = 'child'",
                    params=[document.pk, start, start + n],
                )
            self.stdout.write(f"  distractors {start + n}/{count}")
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE knowledge_chunk")
            cursor.execute("ANALYZE knowledge_chunkwindow")
