"""Does a passage with several matching chunks deserve a higher rank than its best chunk alone?

The engine ranks a passage (a document of a dev set) by its best child's fused score. This study
scores each passage instead as best + lam × (the sum of its other children's fused scores), over
the dumps `bench/fusion_study.py dump` writes (today's convex fusion, each query's own dense
weight, the top-50 pools; no sentence windows). lam is chosen on fold A of every dump given
(mean nDCG@10 over the datasets) and reported on fold B, and the other way round:

    .venv/bin/python bench/passage_aggregation.py /tmp/scifact-dump.json /tmp/dureader-dump.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fusion_study import _channels, _convex_parts, _metrics, _pool

LAMBDAS = (0.0, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5)


def ranked(query: dict, lam: float, depth: int = 50) -> list[str]:
    """The query's passages by best child + lam × the rest of its children, ties in pool order."""
    pool = _pool(query, depth)
    if not pool:
        return []
    keyword, dense = _channels(pool)
    d, k = _convex_parts(keyword, dense)
    fused = query["w"] * d + (1 - query["w"]) * k
    children: dict[str, list[float]] = {}
    for candidate, score in zip(pool, fused, strict=True):
        children.setdefault(candidate[0], []).append(float(score))
    score_of = {p: max(s) + lam * (sum(s) - max(s)) for p, s in children.items()}
    return sorted(score_of, key=lambda p: -score_of[p])


def figures(rows: list[dict], lam: float, fold: str) -> np.ndarray:
    """nDCG@10, Recall@10, MRR@10 over the fold's queries."""
    return np.mean([_metrics(ranked(q, lam), set(q["rel"])) for q in rows if q["fold"] == fold], axis=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dumps", nargs="+", type=Path)
    args = parser.parse_args()
    sets = {path.stem.removesuffix("-dump"): json.loads(path.read_text()) for path in args.dumps}
    table = {(name, lam, fold): figures(rows, lam, fold)
             for name, rows in sets.items() for lam in LAMBDAS for fold in "AB"}
    print("lam   " + "  ".join(f"{name} A / B (nDCG@10)" for name in sets))
    for lam in LAMBDAS:
        print(f"{lam:<6}" + "  ".join(f"{table[name, lam, 'A'][0]:.4f} / {table[name, lam, 'B'][0]:.4f}"
                                      for name in sets))
    for tuned, held in (("A", "B"), ("B", "A")):
        lam = max(LAMBDAS, key=lambda x: np.mean([table[name, x, tuned][0] for name in sets]))
        print(f"chosen on fold {tuned}: lam {lam}; on fold {held}, nDCG@10 / Recall@10 / MRR@10, max → chosen:")
        for name in sets:
            before, after = table[name, 0.0, held], table[name, lam, held]
            print(f"  {name}: {'/'.join(f'{v:.4f}' for v in before)} → {'/'.join(f'{v:.4f}' for v in after)}")


if __name__ == "__main__":
    main()
