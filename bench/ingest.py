"""Ingest benchmark: Markdown corpora through the real pipeline, per embedder.

    python -m bailinghub.embedded exec -- .venv/bin/python bench/ingest.py \
        [--corpus DIR ...] [--embedder use|local|hashing ...] [--max-files N] [--max-chars N]

Each (corpus, embedder) runs in its own process, against a scratch database, with a cold
embedding cache: upload (the builder API's service: type check and conversion check), then each
document's pipeline (parse, chunk, embed, index: the service the Celery task calls). Prints
documents/s, chunks/s (embedded child chunks), the share of time spent inside the embedder,
and the process's peak memory (embedder weights included); then a second, warm pass of the same
files into a new knowledge base, which the embedding cache serves without embedding.
`--max-files`/`--max-chars` take a deterministic subset (sorted paths) for slow embedders.
`--processes N` ingests the documents in N forked processes (documents dealt round-robin, each
process one document at a time), as `make run`'s worker does with one process per core; the
embedding share is then the embedder's seconds over N × the wall time, and the peak memory the parent's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, django_setup, peak_rss_mib, scratch_database

CORPORA = Path(os.environ.get("BENCH_CORPORA", ROOT.parent / "shared" / "bench" / "corpora"))
DEFAULT_CORPORA = [CORPORA / "md-zh-laws-core", CORPORA / "md-zh-vuedocs"]
PROVIDERS = {"use": "universal-sentence-encoder-multilingual", "local": "multilingual-e5-small", "hashing": None}


def corpus_files(corpus: Path, *, max_files: int | None, max_chars: int | None) -> list[Path]:
    subset = corpus / "subset-core-codes.txt"
    if subset.exists():
        files = [corpus / "files" / line.strip() for line in subset.read_text().splitlines() if line.strip()]
    else:
        files = sorted((corpus / "files").rglob("*.md"))
    files = sorted(files)
    chosen, chars = [], 0
    for path in files:
        if max_files is not None and len(chosen) >= max_files:
            break
        size = len(path.read_text(encoding="utf-8"))
        if max_chars is not None and chosen and chars + size > max_chars:
            break
        chosen.append(path)
        chars += size
    return chosen


# What the timed embedder did (run_one's); a forked process counts into its own copy.
_TIMING: dict = {}


def _ingest_share(document_ids: list) -> tuple[list[str], dict]:
    """In a forked process: ingest these documents; their outcomes and what the embedder did."""
    from django.db import connections

    from apps.knowledge import ingest

    timing = _TIMING
    before = dict(timing)
    try:
        outcomes = [ingest.document_ingest(document_id=pk) for pk in document_ids]
        return outcomes, {key: timing[key] - before[key] for key in timing}
    finally:
        connections.close_all()


def run_one(corpus: Path, provider: str, max_files: int | None, max_chars: int | None,
            processes: int = 1) -> dict:
    django_setup()
    from django.conf import settings
    from django.core.files.uploadedfile import SimpleUploadedFile

    from apps.knowledge import ingest, services
    from apps.knowledge.models import Chunk, Document, EmbeddingModel
    from apps.knowledge.pipeline.embedders import embedder_for
    from apps.projects.services import project_create

    files = corpus_files(corpus, max_files=max_files, max_chars=max_chars)
    with scratch_database(f"bench_ingest_{os.getpid()}"):
        if PROVIDERS[provider]:
            model = EmbeddingModel.objects.get(name=PROVIDERS[provider])
        else:
            model = services.embedding_model_register(name="hashing-384", provider="hashing", dimension=384)
        embedder = embedder_for(model)
        timing = _TIMING
        timing.update({"embed_seconds": 0.0, "embed_calls": 0, "embedded_texts": 0, "embedded_chars": 0})
        original = embedder.embed_documents

        def timed(texts):
            started = time.perf_counter()
            try:
                return original(texts)
            finally:
                timing["embed_seconds"] += time.perf_counter() - started
                timing["embed_calls"] += 1
                timing["embedded_texts"] += len(texts)
                timing["embedded_chars"] += sum(len(text) for text in texts)

        embedder.embed_documents = timed
        project = project_create(name="Bench", slug=f"bench-{os.getpid()}")
        payloads = [(str(path.relative_to(corpus)), path.read_bytes()) for path in files]

        def one_pass(name: str) -> dict:
            kb = services.knowledge_base_create(project=project, name=name, embedding_model=model,
                                                embedding_dim=model.dimension)
            before = dict(timing)
            started = time.perf_counter()
            documents = services.document_upload(
                kb=kb, files=[SimpleUploadedFile(Path(n).name, data) for n, data in payloads]
            )
            if processes > 1:
                import multiprocessing

                from django.db import connections

                connections.close_all()  # each forked process opens its own
                shares = [[d.pk for d in documents[i::processes]] for i in range(processes)]
                with multiprocessing.get_context("fork").Pool(processes) as pool:
                    results = pool.map(_ingest_share, shares)
                outcomes = [outcome for share, _ in results for outcome in share]
                for _, done in results:  # the children's embedder counts, as if done here
                    for key, value in done.items():
                        timing[key] += value
                embed = (timing["embed_seconds"] - before["embed_seconds"]) / processes
            else:
                outcomes = [ingest.document_ingest(document_id=document.pk) for document in documents]
            seconds = time.perf_counter() - started
            children = Chunk.objects.filter(generation__knowledge_base=kb, kind=Chunk.Kind.CHILD).count()
            if processes <= 1:
                embed = timing["embed_seconds"] - before["embed_seconds"]
            return {
                "documents": len(documents),
                "completed": outcomes.count("completed"),
                "failed": Document.objects.filter(knowledge_base=kb, status="failed").count(),
                "chunks": children,
                "seconds": round(seconds, 2),
                "documents_per_s": round(len(documents) / seconds, 2),
                "chunks_per_s": round(children / seconds, 2),
                "embedding_share": round(embed / seconds, 3) if seconds else 0.0,
                "embedded_texts": timing["embedded_texts"] - before["embedded_texts"],
                "embedded_chars_avg": round((timing["embedded_chars"] - before["embedded_chars"])
                                            / max(1, timing["embedded_texts"] - before["embedded_texts"])),
            }

        settings.KNOWLEDGE_UPLOAD_MAX_FILES = max(settings.KNOWLEDGE_UPLOAD_MAX_FILES, len(payloads))  # one upload
        cold = one_pass("cold")
        warm = one_pass("warm")
    return {
        "corpus": corpus.name,
        "embedder": f"{provider} ({model.name}, {model.dimension})",
        "files": len(files),
        "chars": sum(len(data.decode("utf-8")) for _, data in payloads),
        "cold": cold,
        "warm": warm,
        "peak_rss_mib": round(peak_rss_mib(), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", action="append", type=Path)
    parser.add_argument("--embedder", action="append", choices=sorted(PROVIDERS))
    parser.add_argument("--max-files", type=int)
    parser.add_argument("--max-chars", type=int)
    parser.add_argument("--processes", type=int, default=1, help="ingest in N forked processes")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    corpora = args.corpus or DEFAULT_CORPORA
    embedders = args.embedder or ["use", "local"]
    if args.one:
        print(json.dumps(run_one(corpora[0], embedders[0], args.max_files, args.max_chars, max(1, args.processes)),
                         ensure_ascii=False))
        return
    print(f"{'corpus':<18} {'embedder':<52} {'files':>5} {'chars':>9} {'chunks':>6} {'docs/s':>7} "
          f"{'chunks/s':>8} {'embed%':>6} {'peak MiB':>8} {'warm docs/s':>11}")
    for corpus in corpora:
        for embedder in embedders:
            command = [sys.executable, __file__, "--one", "--corpus", str(corpus), "--embedder", embedder]
            if args.max_files is not None:
                command += ["--max-files", str(args.max_files)]
            if args.max_chars is not None:
                command += ["--max-chars", str(args.max_chars)]
            command += ["--processes", str(max(1, args.processes))]
            output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            row = json.loads(output.strip().splitlines()[-1])
            cold = row["cold"]
            print(f"{row['corpus']:<18} {row['embedder']:<52} {row['files']:>5} {row['chars']:>9} "
                  f"{cold['chunks']:>6} {cold['documents_per_s']:>7} {cold['chunks_per_s']:>8} "
                  f"{cold['embedding_share'] * 100:>5.1f}% {row['peak_rss_mib']:>8} "
                  f"{row['warm']['documents_per_s']:>11}", flush=True)
            print("  " + json.dumps(row, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()
