"""Agent knowledge benchmark: latency of `knowledge/search` and of `knowledge/read` pages.

    python -m bailinghub.embedded exec -- .venv/bin/python bench/knowledge_agent.py \
        [--scratch] [--kb-chunks 10000] [--embedder hashing|use] [--searches 200] [--pages 3] \
        [--max-bytes 16384] [--kb UUID --queries FILE.jsonl] [--big-document-mb 8]

Set-up is bench/turns.py's: a project `bench-turns` whose route `bench-kb` reads one KB, filled
through the real pipeline (upload, parse, chunk, embed, index; 160-character chunks) from the
Markdown corpora under `shared/bench/corpora` until it holds at least `--kb-chunks` child chunks,
and a fresh agent session. Without `--scratch` this is the configured database, where a KB built
by an earlier run (of either benchmark, with whichever embedder it named) is reused: the set-up
line says which embedder built it. With `--scratch` everything is built in a fresh database that
is dropped afterwards; with the default `hashing` embedder that takes a few minutes (its vectors
are deterministic hashes, not a model's: the figures are then the protocol's and the index's
cost, without a model's query embedding). `--kb UUID` searches a KB that exists (one kept by
`bench_retrieval --keep`, e.g. beside 100k distractors) through routes made in its project, with
`--queries` a dataset's queries.jsonl (`text` of each line) instead of the corpora's headings.

Requests go through Django's full stack in this process (middleware, bearer authentication, route
resolution, the views, the JSON renderer), one at a time, without a network hop. Per query (the
corpora's own headings, seeded order): one search (limit 3), then the first hint's reference read
page by page, at most `--pages` pages. Prints p50/p95/p99 in milliseconds of searches, first pages
and follow-on pages, the retrieval engine alone on the same queries, the share of searches
with hints, response sizes, and the error counts.

`--big-document-mb N` also ingests (once) a document of about N MB into the KB, the law corpus's
text over and over under numbered headings, and reads it through a search that finds it, `--pages`
pages a search, `--searches` times: what a page of a large document costs (a page reads only the
sections it shows; until 2026-12 every page rebuilt and hashed the whole body, ~37 ms per MB).
Figures, never assertions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import django_setup, percentiles, scratch_database


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kb-chunks", type=int, default=10_000)
    parser.add_argument("--embedder", choices=["hashing", "use"], default="hashing")
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--pages", type=int, default=3, help="pages read per reference, at most")
    parser.add_argument("--max-bytes", type=int, default=16384)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--scratch", action="store_true", help="build everything in a fresh, dropped database")
    parser.add_argument("--kb", help="search this existing KB (nothing is ingested)")
    parser.add_argument("--queries", type=Path, help="a queries.jsonl whose lines' `text` are the searches")
    parser.add_argument("--big-document-mb", type=float, default=0,
                        help="also read pages of a document of this many MB (ingested once)")
    args = parser.parse_args()
    if args.kb and args.scratch:
        parser.error("--kb names a KB of the configured database; --scratch would start from an empty one")
    django_setup()
    database = scratch_database(f"bench_knowledge_{os.getpid()}") if args.scratch else contextlib.nullcontext()
    with database:
        run(args)


def run(args) -> None:
    from django.test import Client
    from turns import KB_NAME, KB_ROUTE, corpus_queries, setup

    from apps.knowledge.models import Chunk, KnowledgeBase

    info = setup(kb_chunks=args.kb_chunks, embedder=args.embedder, want_kb=True, kb_id=args.kb)
    token = info.pop("token")
    kb = (KnowledgeBase.objects.get(pk=args.kb) if args.kb
          else KnowledgeBase.objects.get(name=KB_NAME, project__slug="bench-turns"))
    info["kb_parents"] = Chunk.objects.filter(generation__knowledge_base=kb, generation__status="active",
                                              kind=Chunk.Kind.PARENT).count()
    print(json.dumps({"setup": info}, ensure_ascii=False))

    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    base = f"/agent-api/v1/workspaces/{KB_ROUTE}/knowledge"

    def post(path: str, body: dict):
        started = time.perf_counter()
        response = client.post(base + path, json.dumps(body, ensure_ascii=False), content_type="application/json")
        return response, (time.perf_counter() - started) * 1000

    if args.queries:
        lines = args.queries.read_text(encoding="utf-8").splitlines()
        queries = [json.loads(line)["text"] for line in lines if line.strip()][: args.searches + args.warmup]
    else:
        queries = corpus_queries(args.searches + args.warmup)
    for query in queries[: args.warmup]:
        post("/search", {"query": query})
    searches, first_pages, next_pages, search_sizes, page_sizes = [], [], [], [], []
    errors: dict[str, int] = {}
    with_hints = answered = 0
    status_counts: dict[str, int] = {}
    for query in queries[args.warmup:]:
        response, elapsed = post("/search", {"query": query, "limit": 3})
        if response.status_code != 200:
            code = response.json().get("error", str(response.status_code))
            errors[code] = errors.get(code, 0) + 1
            continue
        searches.append(elapsed)
        search_sizes.append(len(response.content))
        found = response.json()
        answered += 1
        status_counts[found["status"]] = status_counts.get(found["status"], 0) + 1
        if not found["hints"]:
            continue
        with_hints += 1
        for page in read_pages(found["hints"][0]["ref"], args=args, post=post, errors=errors):
            (first_pages if page.number == 0 else next_pages).append(page.ms)
            page_sizes.append(page.bytes)
    big = big_document_pages(kb, args, post) if args.big_document_mb else None
    # The retrieval engine alone, with the options the protocol searches with: the rest of a
    # search's time is the protocol's (auth, scope, validation, signing, rendering).
    from apps.knowledge.pipeline.retrieve import SearchOptions
    from apps.knowledge.selectors import knowledge_search
    from apps.routes.models import Route

    route = Route.objects.get(key=KB_ROUTE, project=kb.project)
    options = SearchOptions(top_k=max(3, route.knowledge_top_k), score_threshold=route.knowledge_score_threshold,
                            max_docs=min(3, route.knowledge_max_docs), budget_bytes=512)
    retrieval = []
    for query in queries[args.warmup:]:
        started = time.perf_counter()
        knowledge_search(kbs=[kb], query=query, options=options)
        retrieval.append((time.perf_counter() - started) * 1000)
    print(json.dumps({
        "search_ms": percentiles(searches),
        "retrieval_only_ms": percentiles(retrieval),
        "read_first_page_ms": percentiles(first_pages),
        "read_next_page_ms": percentiles(next_pages),
        "search_statuses": status_counts,
        "searches_with_hints": round(with_hints / max(1, answered), 3),
        "search_bytes_median": statistics.median(search_sizes) if search_sizes else None,
        "search_bytes_max": max(search_sizes, default=None),
        "page_bytes_median": statistics.median(page_sizes) if page_sizes else None,
        "page_bytes_max": max(page_sizes, default=None),
        "errors": errors,
        **({"big_document": big} if big else {}),
    }, ensure_ascii=False, indent=1))


@dataclass
class Page:
    number: int  # 0: the first
    ms: float
    bytes: int
    body: dict


def read_pages(ref: str, *, args, post, errors: dict) -> Iterator[Page]:
    """The pages of `ref`, at most `args.pages`, each as it is read; a refused read counts its
    error code in `errors` and ends them."""
    cursor = None
    for number in range(args.pages):
        body = {"ref": ref, "max_bytes": args.max_bytes, **({"cursor": cursor} if cursor else {})}
        response, elapsed = post("/read", body)
        if response.status_code != 200:
            code = response.json().get("error", str(response.status_code))
            errors[code] = errors.get(code, 0) + 1
            return
        page = Page(number=number, ms=elapsed, bytes=len(response.content), body=response.json())
        yield page
        cursor = page.body["next_cursor"]
        if cursor is None:
            return


# A phrase only the big document holds, at its start: the search for it finds the document.
BIG_MARK = "巨型文档分页读取基准标记"


def big_document_pages(kb, args, post) -> dict:
    """Ingests the big document into `kb` unless it is there, then per search the pages of its
    reference; returns their latencies and the document's size."""
    from django.conf import settings
    from django.core.files.uploadedfile import SimpleUploadedFile
    from turns import CORPUS_DIRS

    from apps.knowledge import ingest, services
    from apps.knowledge.models import Document

    name = f"big-{args.big_document_mb:g}mb.md"
    document = kb.documents.filter(filename=name, status=Document.Status.COMPLETED).first()
    if document is None:
        laws = sorted((CORPUS_DIRS[0] / "files").rglob("*.md"))
        text = "\n\n".join(path.read_text(encoding="utf-8") for path in laws)
        parts, size, n = [f"# {BIG_MARK}\n\n{BIG_MARK}。"], 0, 0
        while size < args.big_document_mb * 1024 * 1024:
            n += 1
            part = f"# 第{n}编\n\n{text}"
            parts.append(part)
            size += len(part.encode("utf-8"))
        data = "\n\n".join(parts).encode("utf-8")
        # Past the per-document caps an operator's upload has: this one is about reading.
        settings.KNOWLEDGE_UPLOAD_MAX_BYTES = max(settings.KNOWLEDGE_UPLOAD_MAX_BYTES, len(data) + 1)
        settings.KNOWLEDGE_MAX_CHUNKS = max(settings.KNOWLEDGE_MAX_CHUNKS, len(data) // 64)
        started = time.perf_counter()
        (document,) = services.document_upload(kb=kb, files=[SimpleUploadedFile(name, data)])
        ingest.document_ingest(document_id=document.pk)
        document.refresh_from_db()
        if document.status != Document.Status.COMPLETED:
            raise SystemExit(f"{name} did not ingest: {document.error_message}")
        print(f"  ingested {name} ({len(data)} bytes) in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    first, following, errors, total_bytes = [], [], {}, None
    for _ in range(args.searches):
        response, _elapsed = post("/search", {"query": BIG_MARK, "limit": 3})
        refs = [hint["ref"] for hint in response.json().get("hints", []) if hint["title"] == name]
        if not refs:
            errors["not_found"] = errors.get("not_found", 0) + 1
            continue
        for page in read_pages(refs[0], args=args, post=post, errors=errors):
            (first if page.number == 0 else following).append(page.ms)
            total_bytes = page.body["total_content_bytes"]
    return {"bytes": total_bytes, "parents": document.chunks.filter(kind="parent").count(),
            "first_page_ms": percentiles(first), "next_page_ms": percentiles(following), "errors": errors}


if __name__ == "__main__":
    main()
