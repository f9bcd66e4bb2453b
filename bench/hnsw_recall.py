"""How close a KB's HNSW walk comes to the exact nearest chunks, and what it costs, by ef_search;
for the KB's own graph or for one built here with other parameters.

    .venv/bin/python bench/hnsw_recall.py --kb UUID --queries DIR/queries.jsonl [--limit 200]
        [--ef 100,150,200,300] [--k 50] [--graph M,EF_CONSTRUCTION] [--rounds 2]

The truth is each query's exact top `--k` among the active generation's child chunks, computed
in numpy over the vectors read once. Each ef_search value walks every query `--rounds` times (the
first round warms the buffers and is not timed) and prints recall@10 (of the exact top 10) and
recall@k, and the p50/p95 of the walk as the client sees it (query embedding excluded).

`--graph 24,200` builds a scratch HNSW index over the generation with m = 24 and ef_construction =
200, inside a transaction that hides the generation's own index (dropped there) and is rolled back
at the end: nothing outlives the run. It prints the build time. It holds a lock on the chunk table
for the whole run, so run it on a benchmark database, not beside a worker.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import django_setup


def _vector_literal(vector) -> str:
    return "[" + ",".join(f"{float(x):.7g}" for x in vector) + "]"


def _truth(cursor, generation_id, dimension: int, vectors: list[list[float]], k: int) -> list[list]:
    cursor.execute("SELECT id, embedding::text FROM knowledge_chunk WHERE generation_id = %s AND kind = 'child' "
                   "AND embedding IS NOT NULL", [generation_id])
    rows = cursor.fetchall()
    ids = [row[0] for row in rows]
    matrix = np.array([json.loads(row[1]) for row in rows], dtype=np.float32).reshape(len(rows), dimension)
    matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    queries = np.array(vectors, dtype=np.float32)
    queries /= np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
    scores = queries @ matrix.T
    return [[ids[i] for i in np.argsort(-row, kind="stable")[:k]] for row in scores]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kb", required=True)
    parser.add_argument("--queries", required=True, help="a queries.jsonl ({id, text} a line)")
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--ef", default="100,150,200,300")
    parser.add_argument("--k", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--graph", default="", help="M,EF_CONSTRUCTION of a scratch index to walk instead")
    args = parser.parse_args()
    django_setup()

    from django.db import connection, transaction

    from apps.knowledge.models import IndexGeneration, KnowledgeBase
    from apps.knowledge.pipeline.embedders import embedder_for
    from apps.knowledge.pipeline.sql import index_drop_sql, vector_index_name

    kb = KnowledgeBase.objects.select_related("embedding_model").get(pk=args.kb)
    generation = IndexGeneration.objects.get(knowledge_base=kb, status="active")
    if not generation.vector_indexed and not args.graph:
        sys.exit(f"generation {generation.pk} has no HNSW index of its own (it is scanned exactly): give --graph")
    dimension = kb.embedding_model.dimension
    texts = [json.loads(line)["text"] for line in Path(args.queries).read_text(encoding="utf-8").splitlines()
             if line.strip()][:args.limit]
    embedder = embedder_for(kb.embedding_model)
    vectors = [embedder.embed_query(text) for text in texts]
    literals = [_vector_literal(v) for v in vectors]
    # A literal generation id and cast, as the engine's own walk: the planner matches the partial index.
    walk = (f"SELECT id FROM knowledge_chunk WHERE generation_id = '{generation.pk}' AND kind = 'child' "  # noqa: S608
            f"ORDER BY embedding::vector({dimension}) <=> %s::vector({dimension}) LIMIT {int(args.k)}")
    with transaction.atomic(), connection.cursor() as cursor:
        truth = _truth(cursor, generation.pk, dimension, vectors, args.k)
        graph = "the KB's own graph"
        if args.graph:
            m, ef_construction = (int(x) for x in args.graph.split(","))
            cursor.execute(index_drop_sql(vector_index_name(generation.pk), concurrently=False))
            cursor.execute("SET LOCAL maintenance_work_mem = '2GB'")
            started = time.perf_counter()
            cursor.execute(f"CREATE INDEX bench_hnsw_scratch ON knowledge_chunk USING hnsw "
                           f"((embedding::vector({dimension})) vector_cosine_ops) WITH (m = {m}, ef_construction = "
                           f"{ef_construction}) WHERE generation_id = '{generation.pk}' AND kind = 'child'")
            graph = f"m {m}, ef_construction {ef_construction} (built in {time.perf_counter() - started:.1f} s)"
        cursor.execute("EXPLAIN " + walk, [literals[0]])
        plan = "\n".join(row[0] for row in cursor.fetchall())
        if "Index Scan using" not in plan:
            sys.exit("the walk does not use an HNSW index:\n" + plan)
        print(f"{kb.name}: {len(truth)} queries, {graph}; exact top {args.k} by numpy")
        for ef in (int(x) for x in args.ef.split(",")):
            cursor.execute(f"SET LOCAL hnsw.ef_search = {ef}")
            times: list[float] = []
            at10: list[float] = []
            atk: list[float] = []
            for round_ in range(args.rounds):
                for literal, exact in zip(literals, truth, strict=True):
                    started = time.perf_counter()
                    cursor.execute(walk, [literal])
                    got = [row[0] for row in cursor.fetchall()]
                    if round_ == 0 and args.rounds > 1:
                        continue
                    times.append((time.perf_counter() - started) * 1000)
                    at10.append(len(set(got[:10]) & set(exact[:10])) / max(len(exact[:10]), 1))
                    atk.append(len(set(got) & set(exact)) / max(len(exact), 1))
            times.sort()
            print(f"  ef_search {ef:4d}: recall@10 {statistics.mean(at10):.4f}  recall@{args.k} "
                  f"{statistics.mean(atk):.4f}  p50 {statistics.median(times):.2f} ms  "
                  f"p95 {times[max(int(len(times) * 0.95) - 1, 0)]:.2f} ms")
        transaction.set_rollback(True)


if __name__ == "__main__":
    main()
