"""A query-side linear adapter for e5-small's vector channel, trained on one fold, measured on the
other (issue 17: a stronger first stage without a new model). Measured 2026-12-05 (bench/README.md,
stop 40): it raises the vector channel on held-out folds, not hybrid search; none ships.

    # 1. once per dataset, no database; two processes use both cores (dureader-robust-a: 70 s,
    #    scifact-train: ~25 min):
    .venv/bin/python bench/query_adapter.py embed --dataset DIR --cache /tmp/qa --shard 0/2 &
    .venv/bin/python bench/query_adapter.py embed --dataset DIR --cache /tmp/qa --shard 1/2
    # 2. as often as you like (minutes; --save DIR writes each fold's W and one from both folds):
    .venv/bin/python bench/query_adapter.py evaluate --dataset DIR [DIR...] --cache /tmp/qa [--save DIR]
    # 3. through the engine, over a kept KB: W trained on fold A, read fold B's lines (and the other way)
    KNOWLEDGE_E5_QUERY_ADAPTER=DIR/query-adapter-trained-on-A.npy .venv/bin/python manage.py \
        bench_retrieval --dataset DIR --kb UUID --mode all --split

The adapter maps a query's vector q to W·q before the cosine against the passages (whose vectors
stay as ingested: nothing is re-embedded). W starts at the identity and is trained on one fold's
queries of every dataset given, each against its own whole corpus (InfoNCE at temperature tau
over every passage, the judged ones positive), pulled back toward the identity by lam·‖W − I‖²;
Adam, full batch. lam (and the steps) are chosen on the training fold alone, by an inner split
of it (each half trained, scored on the other); W is then trained on the whole training fold and
scored on the other fold, both ways. Each passage is embedded whole (`passage: `, title on a line
before the text), as a one-chunk document: the vector channel alone, no fusion.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import django_setup

django_setup()

from apps.knowledge.management.commands.bench_retrieval import fold_of, load_dataset, metrics  # noqa: E402

LAMBDAS = (0.3, 1.0, 10.0, 30.0, 100.0)
TAU = 0.01
STEPS = 100


def passage_text(passage: dict) -> str:
    return f"{passage['title']}\n{passage['text']}" if passage.get("title") else passage["text"]


def embed(args) -> None:
    from apps.knowledge.pipeline.embedders.e5_numpy import E5Numpy

    model = E5Numpy()
    folder = Path(args.dataset)
    corpus, queries, _ = load_dataset(folder, None)
    out = Path(args.cache) / folder.name
    out.mkdir(parents=True, exist_ok=True)
    shard, shards = (int(x) for x in args.shard.split("/"))
    if shard == 0:
        started = time.perf_counter()
        vectors = model.encode([query["text"] for query in queries], is_query=True)
        np.save(out / "queries.npy", np.asarray(vectors, dtype=np.float32))
        print(f"{folder.name}: {len(queries)} queries in {time.perf_counter() - started:.1f} s", flush=True)
    texts = [passage_text(passage) for passage in corpus][shard::shards]
    started = time.perf_counter()
    vectors = []
    for start in range(0, len(texts), 64):
        vectors.extend(model.encode(texts[start:start + 64]))
        print(f"{folder.name} {shard}/{shards}: {len(vectors)} of {len(texts)} passages in "
              f"{time.perf_counter() - started:.0f} s", flush=True)
    np.save(out / f"passages.{shard}of{shards}.npy", np.asarray(vectors, dtype=np.float32))


class Dataset:
    """A dataset's cached vectors: queries Q (judged ones only, in file order), passages P, each
    query's judged passages as row numbers of P, and its fold."""

    def __init__(self, folder: Path, cache: Path) -> None:
        corpus, queries, qrels = load_dataset(folder, None)
        out = cache / folder.name
        shards = int(next(out.glob("passages.0of*.npy")).name.split("of")[1].split(".")[0])
        parts = [np.load(out / f"passages.{i}of{shards}.npy") for i in range(shards)]
        self.name = folder.name
        self.P = np.zeros((len(corpus), parts[0].shape[1]), dtype=np.float64)
        for i, part in enumerate(parts):
            self.P[i::shards] = part
        self.Q = np.load(out / "queries.npy").astype(np.float64)
        row = {passage["id"]: k for k, passage in enumerate(corpus)}
        self.positives = [[row[doc] for doc in sorted(qrels[query["id"]]) if doc in row] for query in queries]
        self.folds = np.array([fold_of(query["id"]) for query in queries])

    def part(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[list[int]]]:
        return self.Q[rows], self.P, [self.positives[i] for i in rows]


def train(parts: list[tuple[np.ndarray, np.ndarray, list[list[int]]]], *, lam: float, steps: int = STEPS,
          tau: float = TAU, lr: float = 1e-3) -> np.ndarray:
    dim = parts[0][0].shape[1]
    eye = np.eye(dim)
    W, m, v = eye.copy(), np.zeros((dim, dim)), np.zeros((dim, dim))
    total = sum(len(Q) for Q, _, _ in parts)
    for step in range(1, steps + 1):
        grad = 2 * lam * (W - eye)
        for Q, P, positives in parts:
            S = (Q @ W.T) @ P.T / tau
            S -= S.max(axis=1, keepdims=True)
            G = np.exp(S)
            G /= G.sum(axis=1, keepdims=True)
            for i, rows in enumerate(positives):
                G[i, rows] -= 1.0 / len(rows)
            grad += (G @ P / tau / total).T @ Q
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad * grad
        W -= lr * (m / (1 - 0.9 ** step)) / (np.sqrt(v / (1 - 0.999 ** step)) + 1e-8)
    return W


def scores(Q: np.ndarray, P: np.ndarray, positives: list[list[int]], W: np.ndarray | None = None):
    """Mean nDCG@10, Recall@10, MRR@10 of the cosine ranking (W·q normalised when W is given)."""
    if W is not None:
        Q = Q @ W.T
        Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    top = np.argsort(-(Q @ P.T), axis=1)[:, :10]
    rows = [metrics([str(d) for d in ranked], {str(d) for d in relevant})
            for ranked, relevant in zip(top, positives, strict=True)]
    return tuple(float(x) for x in np.mean(rows, axis=0))


def inner_score(halves: list[tuple[Dataset, np.ndarray, np.ndarray]], *, lam: float) -> float:
    """The summed nDCG@10 of each half of the training fold under W trained on the other half."""
    total = 0.0
    for fit_first in (True, False):
        W = train([dataset.part(one if fit_first else other) for dataset, one, other in halves], lam=lam)
        total += sum(scores(*dataset.part(other if fit_first else one), W=W)[0] for dataset, one, other in halves)
    return total


def evaluate(args) -> None:
    data = [Dataset(Path(folder), Path(args.cache)) for folder in args.dataset]
    chosen_on: list[float] = []
    for train_fold, test_fold in (("A", "B"), ("B", "A")):
        halves = []
        for dataset in data:
            rows = np.where(dataset.folds == train_fold)[0]
            half = np.array([hashlib.sha256(b"inner:%d" % i).digest()[0] % 2 for i in rows])
            halves.append((dataset, rows[half == 0], rows[half == 1]))
        chosen = max(LAMBDAS, key=lambda lam: inner_score(halves, lam=lam))
        chosen_on.append(chosen)
        W = train([dataset.part(np.where(dataset.folds == train_fold)[0]) for dataset in data], lam=chosen)
        if args.save:
            np.save(Path(args.save) / f"query-adapter-trained-on-{train_fold}.npy", W.astype(np.float32))
        for dataset in data:
            test = dataset.part(np.where(dataset.folds == test_fold)[0])
            before, after = scores(*test), scores(*test, W=W)
            print(f"{dataset.name} fold {test_fold} (trained on {train_fold}, lam {chosen}): vector nDCG@10 / "
                  f"Recall@10 / MRR@10 {before[0]:.4f} / {before[1]:.4f} / {before[2]:.4f} -> "
                  f"{after[0]:.4f} / {after[1]:.4f} / {after[2]:.4f}", flush=True)
    if args.save:
        save_whole(args, data, lam=min(chosen_on))


def save_whole(args, data: list[Dataset], lam: float) -> None:
    W = train([dataset.part(np.arange(len(dataset.Q))) for dataset in data], lam=lam)
    np.save(Path(args.save) / "query-adapter.npy", W.astype(np.float32))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    one = commands.add_parser("embed")
    one.add_argument("--dataset", required=True)
    one.add_argument("--cache", required=True)
    one.add_argument("--shard", default="0/1", help="I/N: embed every N-th passage from the I-th")
    two = commands.add_parser("evaluate")
    two.add_argument("--dataset", nargs="+", required=True)
    two.add_argument("--cache", required=True)
    two.add_argument("--save", default=None, metavar="DIR",
                     help="write each fold's W there (query-adapter-trained-on-A.npy, …), and W trained on "
                          "both folds with the smaller of the two lam chosen (query-adapter.npy)")
    args = parser.parse_args()
    {"embed": embed, "evaluate": evaluate}[args.command](args)


if __name__ == "__main__":
    main()
