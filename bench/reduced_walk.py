"""Walk an HNSW graph built over a PCA projection of the chunk vectors, then rescore its top N
exactly with the full vectors: buffers, milliseconds and recall against the full 384-d walk.

    .venv/bin/python bench/reduced_walk.py --kb UUID --queries DIR/queries.jsonl [--n 200]
        [--dims 64,96,128,192] [--ef 100,150,200,300] [--limits 50,100,200] [--base-ef 300]
        [--cache var/reduced_walk_queries.npy] [--keep]

The basis is fitted on the distractor chunks only (document `synthetic-distractors.txt`, as
`bench_retrieval --scale` makes them), centred with their mean: never on the queries or on the
dataset's own passages. For each d, a table `s29.short_<d>(id, v vector(d))` holds every child
of the active generation projected and L2-normalised, with an HNSW index of the same m /
ef_construction as the generation's own. One statement walks it for N ids and rescores them by
`embedding::vector(384) <=> q` from knowledge_chunk (joined by id), keeping the best 50.

Every arm (the generation's own walk at `--base-ef`, limit 50, and each reduced d / ef_search / N
with N ≤ ef_search) runs each query three times: once plainly for the ids (recall), then twice
under EXPLAIN (ANALYZE, BUFFERS); the second EXPLAIN is reported. Within a pass the arms are
interleaved query by query in a shuffled order, so the machine's drift falls on all of them.
The truth is each query's exact cosine top 50 over all the generation's children, in numpy.
Everything is made in schema s29, dropped at the end unless `--keep`.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import django_setup

SCHEMA = "s29"
KEEP = 50  # what the rescoring keeps: the vector channel's candidates


def _literal(vector) -> str:
    return "[" + ",".join(f"{float(x):.9g}" for x in vector) + "]"


@dataclass
class Arm:
    name: str
    dim: int | None  # None: the generation's own 384-d index
    ef: int
    limit: int
    ids: list[list] = field(default_factory=list)
    ms: list[float] = field(default_factory=list)
    planning_ms: list[float] = field(default_factory=list)
    buffers: list[int] = field(default_factory=list)
    walk_buffers: list[int] = field(default_factory=list)


def _query_vectors(kb, texts: list[str], cache: Path) -> np.ndarray:
    from apps.knowledge.pipeline.embedders import embedder_for

    if cache.exists():
        vectors = np.load(cache)
        if len(vectors) >= len(texts):
            return vectors[:len(texts)]
    embedder = embedder_for(kb.embedding_model)
    started = time.perf_counter()
    vectors = np.array([embedder.embed_query(text) for text in texts], dtype=np.float32)
    print(f"embedded {len(texts)} queries with {kb.embedding_model.name} in {time.perf_counter() - started:.1f} s")
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, vectors)
    return vectors


def _children(conn, generation_id, dimension: int, distractor_file: str):
    """(ids, unit vectors [n, dimension], is-distractor mask) of the generation's searchable children."""
    started = time.perf_counter()
    rows = conn.execute(
        "SELECT c.id, c.embedding::text, d.filename = %s FROM knowledge_chunk c "
        "JOIN knowledge_document d ON d.id = c.document_id WHERE c.generation_id = %s AND c.kind = 'child' "
        "AND c.embedding IS NOT NULL AND NOT c.disabled ORDER BY c.id", [distractor_file, generation_id]).fetchall()
    ids = [row[0] for row in rows]
    matrix = np.empty((len(rows), dimension), dtype=np.float32)
    for i, row in enumerate(rows):
        matrix[i] = np.array(row[1][1:-1].split(","), dtype=np.float32)
    matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    mask = np.array([row[2] for row in rows], dtype=bool)
    print(f"read {len(ids)} children ({int(mask.sum())} distractors) in {time.perf_counter() - started:.1f} s")
    return ids, matrix, mask


def _pca(fit: np.ndarray):
    """(mean, components sorted by variance [dimension, dimension], variances) of `fit`."""
    mean = fit.mean(axis=0, dtype=np.float64)
    centred = fit.astype(np.float64) - mean
    covariance = centred.T @ centred / (len(fit) - 1)
    variances, components = np.linalg.eigh(covariance)
    order = np.argsort(variances)[::-1]
    return mean, components[:, order], variances[order]


def _project(vectors: np.ndarray, mean: np.ndarray, components: np.ndarray, d: int) -> np.ndarray:
    projected = ((vectors.astype(np.float64) - mean) @ components[:, :d]).astype(np.float32)
    return projected / np.maximum(np.linalg.norm(projected, axis=1, keepdims=True), 1e-12)


def _kept(vectors: np.ndarray, mean: np.ndarray, components: np.ndarray, d: int) -> float:
    """Share of `vectors`' variance about `mean` that the first d components keep."""
    centred = vectors.astype(np.float64) - mean
    return float(((centred @ components[:, :d]) ** 2).sum() / (centred**2).sum())


def _find(plan: dict, index_name: str) -> dict | None:
    if plan.get("Index Name") == index_name:
        return plan
    for child in plan.get("Plans", []):
        found = _find(child, index_name)
        if found is not None:
            return found
    return None


def _blocks(node: dict) -> int:
    return int(node.get("Shared Hit Blocks", 0)) + int(node.get("Shared Read Blocks", 0))


def _percentile(values: list[float], q: float) -> float:
    """Nearest rank: the smallest value with at least q of them at or below it."""
    ordered = sorted(values)
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kb", required=True)
    parser.add_argument("--queries", required=True, help="a queries.jsonl ({id, text} a line)")
    parser.add_argument("--n", type=int, default=200, help="the first N queries")
    parser.add_argument("--dims", default="64,96,128,192")
    parser.add_argument("--ef", default="100,150,200,300", help="ef_search of the reduced walks")
    parser.add_argument("--limits", default="50,100,200", help="ids the reduced walk hands to the rescoring")
    parser.add_argument("--base-ef", default="300", help="ef_search of the generation's own walk (limit 50)")
    parser.add_argument("--cache", default="var/reduced_walk_queries.npy", help="the query vectors, cached")
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--keep", action="store_true", help="leave schema s29 in place")
    args = parser.parse_args()
    django_setup()

    import psycopg
    from django.db import connection

    from apps.knowledge.management.commands.bench_retrieval import DISTRACTOR_FILE
    from apps.knowledge.models import IndexGeneration, KnowledgeBase
    from apps.knowledge.pipeline.sql import vector_index_name

    kb = KnowledgeBase.objects.select_related("embedding_model").get(pk=args.kb)
    generation = IndexGeneration.objects.get(knowledge_base=kb, status="active")
    dimension = kb.embedding_model.dimension
    texts = [json.loads(line)["text"] for line in Path(args.queries).read_text(encoding="utf-8").splitlines()
             if line.strip()][:args.n]
    queries = _query_vectors(kb, texts, Path(args.cache))
    queries /= np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)

    settings = connection.settings_dict
    conn = psycopg.connect(dbname=settings["NAME"], user=settings["USER"], host=settings["HOST"],
                           port=settings["PORT"] or None, password=settings["PASSWORD"] or None, autocommit=True)
    own_index = vector_index_name(generation.pk)
    options = conn.execute("SELECT reloptions FROM pg_class WHERE relname = %s", [own_index]).fetchone()
    if options is None:
        sys.exit(f"generation {generation.pk} has no HNSW index {own_index}")
    graph = dict(option.split("=") for option in options[0] or [])
    m, ef_construction = int(graph.get("m", 16)), int(graph.get("ef_construction", 64))

    ids, matrix, distractor = _children(conn, generation.pk, dimension, DISTRACTOR_FILE)
    started = time.perf_counter()
    truth = []
    for row in queries @ matrix.T:
        top = np.argpartition(-row, KEEP)[:KEEP]
        truth.append([ids[i] for i in top[np.argsort(-row[top], kind="stable")]])
    print(f"exact top {KEEP} of {len(queries)} queries in {time.perf_counter() - started:.1f} s")

    mean, components, variances = _pca(matrix[distractor])
    dims = [int(x) for x in args.dims.split(",")]
    print(f"\nPCA fitted on the {int(distractor.sum())} distractor children, centred with their mean")
    print("| d | variance kept (distractors, fit) | dataset passages (held out) | queries (held out) |")
    print("|---|---|---|---|")
    for d in dims:
        print(f"| {d} | {variances[:d].sum() / variances.sum():.4f} | "
              f"{_kept(matrix[~distractor], mean, components, d):.4f} | {_kept(queries, mean, components, d):.4f} |")

    conn.execute(f"CREATE SCHEMA {SCHEMA}")
    try:
        workers = conn.execute("SHOW max_parallel_maintenance_workers").fetchone()[0]
        memory = conn.execute("SHOW maintenance_work_mem").fetchone()[0]
        print(f"\nbuilds: hnsw (v vector_cosine_ops) WITH (m = {m}, ef_construction = {ef_construction}), "
              f"max_parallel_maintenance_workers {workers}, maintenance_work_mem {memory}")
        print("| d | fill s | index build s | index MB | table MB |")
        print("|---|---|---|---|---|")
        for d in dims:
            table = f"{SCHEMA}.short_{d}"
            started = time.perf_counter()
            conn.execute(f"CREATE TABLE {table} (id uuid PRIMARY KEY, v vector({d}) NOT NULL)")
            projected = _project(matrix, mean, components, d)
            with conn.cursor().copy(f"COPY {table} (id, v) FROM STDIN") as copy:
                for chunk_id, vector in zip(ids, projected, strict=True):
                    copy.write_row((chunk_id, _literal(vector)))
            conn.execute(f"ANALYZE {table}")
            filled = time.perf_counter() - started
            started = time.perf_counter()
            conn.execute(f"CREATE INDEX short_{d}_hnsw ON {table} USING hnsw (v vector_cosine_ops) "
                         f"WITH (m = {m}, ef_construction = {ef_construction})")
            built = time.perf_counter() - started
            sizes = conn.execute(f"SELECT pg_relation_size('{SCHEMA}.short_{d}_hnsw'), "
                                 f"pg_relation_size('{table}')").fetchone()
            print(f"| {d} | {filled:.1f} | {built:.1f} | {sizes[0] / 2**20:.1f} | {sizes[1] / 2**20:.1f} |")
        own_size = conn.execute("SELECT pg_relation_size(%s::regclass)", [own_index]).fetchone()[0]
        print(f"(the generation's own {dimension}-d index: {own_size / 2**20:.1f} MB)")

        efs = [int(x) for x in args.ef.split(",")]
        limits = [int(x) for x in args.limits.split(",")]
        arms = [Arm(f"base 384 ef {ef}", None, ef, KEEP) for ef in (int(x) for x in args.base_ef.split(","))]
        arms += [Arm(f"d {d} ef {ef} N {n}", d, ef, n) for d in dims for ef in efs for n in limits if n <= ef]
        # A literal generation id, as the engine's own walk: the planner matches the partial index.
        base_sql = (f"SELECT id FROM knowledge_chunk WHERE generation_id = '{generation.pk}' AND kind = 'child' "  # noqa: S608
                    f"AND embedding IS NOT NULL AND NOT disabled "
                    f"ORDER BY embedding::vector({dimension}) <=> %(q)s::vector({dimension}) LIMIT {KEEP}")

        def reduced_sql(arm: Arm) -> str:
            return (f"WITH walk AS MATERIALIZED (SELECT id FROM {SCHEMA}.short_{arm.dim} "  # noqa: S608
                    f"ORDER BY v <=> %(s)s::vector({arm.dim}) LIMIT {arm.limit}) "
                    f"SELECT c.id FROM walk JOIN knowledge_chunk c ON c.id = walk.id "
                    f"WHERE c.embedding IS NOT NULL AND NOT c.disabled "
                    f"ORDER BY c.embedding::vector({dimension}) <=> %(q)s::vector({dimension}) LIMIT {KEEP}")

        literals = [_literal(q) for q in queries]
        short_literals = {d: [_literal(v) for v in _project(queries, mean, components, d)] for d in dims}

        def run(arm: Arm, i: int, explain: bool):
            conn.execute(f"SET hnsw.ef_search = {arm.ef}")
            conn.execute(f"SET enable_sort = {'off' if arm.dim is None else 'on'}")
            sql = base_sql if arm.dim is None else reduced_sql(arm)
            params = {"q": literals[i]} | ({} if arm.dim is None else {"s": short_literals[arm.dim][i]})
            if not explain:
                return [row[0] for row in conn.execute(sql, params).fetchall()]
            return conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params).fetchone()[0][0]

        for arm in arms:  # each arm walks the index it means to, and the rescoring does not walk the 384-d one
            plan = run(arm, 0, explain=True)["Plan"]
            wanted = own_index if arm.dim is None else f"short_{arm.dim}_hnsw"
            if _find(plan, wanted) is None or (arm.dim is not None and _find(plan, own_index) is not None):
                sys.exit(f"{arm.name}: the plan does not walk {wanted} alone:\n{json.dumps(plan, indent=1)}")
        print(f"\n{len(arms)} arms x {len(queries)} queries: one pass for ids, two EXPLAIN passes (the second "
              f"reported), arms shuffled per query")
        shuffle = random.Random(args.seed)
        started = time.perf_counter()
        for pass_ in range(3):
            for i in range(len(queries)):
                for arm in shuffle.sample(arms, len(arms)):
                    if pass_ == 0:
                        arm.ids.append(run(arm, i, explain=False))
                        continue
                    result = run(arm, i, explain=True)
                    if pass_ == 1:
                        continue
                    plan = result["Plan"]
                    arm.ms.append(float(result["Execution Time"]))
                    arm.planning_ms.append(float(result["Planning Time"]))
                    arm.buffers.append(_blocks(plan))
                    walked = _find(plan, own_index if arm.dim is None else f"short_{arm.dim}_hnsw")
                    arm.walk_buffers.append(_blocks(walked))
            print(f"  pass {pass_ + 1} done at {time.perf_counter() - started:.0f} s")

        print(f"\nrecall of the exact top 10 / top {KEEP} among the {KEEP} kept; Execution Time of the second "
              f"EXPLAIN pass; buffers = shared hit + read of the whole statement (walk = the HNSW index scan "
              f"node: the graph and its own table's heap; rest = knowledge_chunk's pkey, heap and TOAST for the "
              f"rescoring); µs/buffer = median of per-query ms/buffers")
        print(f"| arm | recall@10 | recall@{KEEP} | median ms | p95 ms | median buffers | median walk buffers "
              f"| median rest | µs/buffer | planning ms |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for arm in arms:
            at10 = statistics.mean(len(set(got) & set(exact[:10])) / 10 for got, exact in zip(
                arm.ids, truth, strict=True))
            atk = statistics.mean(len(set(got) & set(exact)) / KEEP for got, exact in zip(arm.ids, truth, strict=True))
            per = [1000 * ms / b for ms, b in zip(arm.ms, arm.buffers, strict=True)]
            rest = [b - w for b, w in zip(arm.buffers, arm.walk_buffers, strict=True)]
            print(f"| {arm.name} | {at10:.4f} | {atk:.4f} | {statistics.median(arm.ms):.2f} | "
                  f"{_percentile(arm.ms, 0.95):.2f} | {statistics.median(arm.buffers):.0f} | "
                  f"{statistics.median(arm.walk_buffers):.0f} | {statistics.median(rest):.0f} | "
                  f"{statistics.median(per):.3f} | {statistics.median(arm.planning_ms):.2f} |")
    finally:
        if not args.keep:
            conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
        conn.close()


if __name__ == "__main__":
    main()
