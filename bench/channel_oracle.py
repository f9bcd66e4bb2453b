"""How far fusion can go: per query, the gold passages' ranks in keyword, vector and hybrid on a
KB kept by `bench_retrieval --keep`, and per fold two oracles over them.

    python -m bailinghub.embedded exec -- .venv/bin/python bench/channel_oracle.py \
        --kb UUID --dataset ../shared/bench/datasets/dureader-robust-a [--json FILE]

Each mode is searched exactly as `bench_retrieval` searches it (its `_run_mode`: the engine with
today's settings, a document ranking at its best chunk). Per fold (by `fold_of`) it prints the
three channels' nDCG@10, how many queries hybrid does not answer at rank 1 and how many of those
neither channel answers there, and two oracles: "any rank 1" (hybrid, but a query either channel
answers at rank 1 counts as that channel's nDCG), and "best of three" (per query, the best nDCG@10
of keyword, vector and hybrid). No fusion of the two channels' rankings can beat the second; a
target above it needs a better channel, not other weights. Figures, never assertions.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

MODES = ("keyword", "vector", "hybrid")

# {mode: {query id: (nDCG@10, Recall@10, MRR@10)}}
PerQuery = dict[str, dict[str, tuple[float, float, float]]]


def oracle(per_query: PerQuery, members: list[str]) -> dict:
    """The fold's figures over `members` (query ids) from each mode's per-query metrics."""
    keyword, vector, hybrid = (per_query[mode] for mode in MODES)
    missed = [q for q in members if hybrid[q][2] < 1.0]
    neither = [q for q in missed if keyword[q][2] < 1.0 and vector[q][2] < 1.0]

    def any_rank_1(q: str) -> float:
        answered = [channel[q][0] for channel in (keyword, vector) if channel[q][2] == 1.0]
        return max([hybrid[q][0], *answered])

    count = len(members) or 1
    return {
        "queries": len(members),
        **{f"{mode}_ndcg@10": round(sum(per_query[mode][q][0] for q in members) / count, 4) for mode in MODES},
        "hybrid_not_rank_1": len(missed),
        "neither_channel_rank_1": len(neither),
        "oracle_any_rank_1": round(sum(any_rank_1(q) for q in members) / count, 4),
        "oracle_best_of_three": round(sum(max(per_query[mode][q][0] for mode in MODES) for q in members) / count, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kb", required=True, help="a KB kept by bench_retrieval --keep of this dataset")
    parser.add_argument("--dataset", required=True, type=Path)
    parser.add_argument("--json", dest="json_path", type=Path, default=None, help="per-query metrics and folds")
    args = parser.parse_args()

    from common import django_setup

    django_setup()
    from apps.knowledge.management.commands.bench_retrieval import Command, _file_for, fold_of, load_dataset
    from apps.knowledge.models import Document, KnowledgeBase

    kb = KnowledgeBase.objects.select_related("embedding_model").get(pk=args.kb)
    corpus, queries, qrels = load_dataset(args.dataset, None)
    doc_of = dict(Document.objects.filter(knowledge_base=kb).values_list("pk", "filename"))
    id_of_file = {_file_for(p).name: p["id"] for p in corpus}
    options = {"top_k": 10, "fusion": None, "dense_weight": None, "candidates": None}
    command = Command()
    per_query: PerQuery = {}
    for mode in MODES:
        runs = command._run_mode(kb, mode, queries, qrels, doc_of, id_of_file, options)
        per_query[mode] = {query_id: run[0] for query_id, run in runs.items()}
    folds = {fold: [q["id"] for q in queries if fold_of(q["id"]) == fold] for fold in "AB"}
    report = {fold: oracle(per_query, members) for fold, members in folds.items()}
    for fold, figures in report.items():
        print(f"{args.dataset.name} {fold}: " + "  ".join(f"{name} {value}" for name, value in figures.items()))
    if args.json_path:
        args.json_path.write_text(json.dumps({"folds": report, "per_query": per_query}, indent=1))


if __name__ == "__main__":
    main()
