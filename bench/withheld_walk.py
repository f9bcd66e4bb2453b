"""Hybrid search when documents near the query are turned off: the walk that comes back short
walks again at pgvector's widest ef_search before it falls back to an exact scan of the
generation. This times both ways on a kept KB, alternating.

    .venv/bin/python bench/withheld_walk.py --kb UUID --queries DIR/queries.jsonl [--limit 20] [--off 500]

For each query, the documents of its `--off` nearest chunks (an ef_search 1,000 walk) are turned
off, the query is searched twice each way ("wider": today's engine; "exact": the wider walk
disabled, as before), and the documents are turned on again. It prints p50/p95/max of the search
minus its query embedding. It writes to the KB's documents while it runs: use a benchmark
database, not one a worker or an agent is using.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import django_setup, percentiles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kb", required=True)
    parser.add_argument("--queries", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--off", type=int, default=500, help="turn off the documents of this many nearest chunks")
    args = parser.parse_args()
    django_setup()
    from apps.knowledge.models import Document, KnowledgeBase
    from apps.knowledge.pipeline import vector_channel
    from apps.knowledge.pipeline.embedders import embedder_for
    from apps.knowledge.pipeline.retrieval_settings import retrieval_settings
    from apps.knowledge.pipeline.retrieve import SearchOptions
    from apps.knowledge.selectors import knowledge_search

    kb = KnowledgeBase.objects.select_related("embedding_model").get(pk=args.kb)
    generation = kb.generations.get(status="active").pk
    queries = [json.loads(line)["text"] for line in args.queries.open(encoding="utf-8") if line.strip()]
    embedder = embedder_for(kb.embedding_model)
    widest = vector_channel.EF_SEARCH_MAX
    first_walk = retrieval_settings().hybrid_vector_ef_search
    options = SearchOptions(top_k=10, mode="hybrid", embed_beside=False)
    times: dict[str, list[float]] = {"wider": [], "exact": []}
    for query in queries[:args.limit]:
        near = vector_channel.vector_candidates(
            model=kb.embedding_model, generation_ids=[generation], query_vector=embedder.embed_query(query),
            limit=args.off, indexed=[generation], ef_search=widest)
        documents = list({row[3] for row in near})
        Document.objects.filter(pk__in=documents).update(enabled=False)
        try:
            for way in ("wider", "exact", "wider", "exact"):
                # "exact": no wider walk than the first (hybrid_vector_ef_search), so a short one is scanned.
                vector_channel.EF_SEARCH_MAX = widest if way == "wider" else first_walk
                started = time.perf_counter()
                result = knowledge_search(kbs=[kb], query=query, options=options)
                elapsed = (time.perf_counter() - started) * 1000 - result.timings_ms.get("query_embedding_ms", 0)
                times[way].append(elapsed)
                if {hit.document_id for hit in result.hits} & set(documents):
                    raise SystemExit("a document turned off was found")
        finally:
            Document.objects.filter(pk__in=documents).update(enabled=True)
            vector_channel.EF_SEARCH_MAX = widest
    for way, values in times.items():
        figures = percentiles(values)
        print(f"{way:6s} searches {len(values):4d}  p50 {figures['p50']:7.1f} ms  p95 {figures['p95']:7.1f} ms  "
              f"max {max(values):7.1f} ms")


if __name__ == "__main__":
    main()
