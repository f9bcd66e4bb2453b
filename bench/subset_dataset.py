"""A small dataset cut from a large one, the size of a KB an operator starts with: the gold passages
of N sampled queries plus N other passages; its queries are every query whose relevant passages
all sit in it. Same layout as ../shared/bench/datasets/* (answers.jsonl too, where there is one),
so bench_retrieval, bench/answerability.py and bench/rag.py read it like any other:

    .venv/bin/python bench/subset_dataset.py ../shared/bench/datasets/drcd-dev /tmp/small/drcd-dev-small 30
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]


def subset(source: Path, target: Path, n: int, *, seed: int = 50) -> tuple[int, int]:
    """Write the subset; (passages, queries) written."""
    from apps.knowledge.management.commands.bench_retrieval import load_dataset

    rng = random.Random(seed)
    corpus, queries, qrels = load_dataset(source, None)  # queries: those with a relevant passage
    picked = rng.sample(queries, n)
    gold = set().union(*(qrels[q["id"]] for q in picked))
    kept = gold | {p["id"] for p in rng.sample([p for p in corpus if p["id"] not in gold], n)}
    own = [q for q in queries if qrels[q["id"]] <= kept]
    own_ids = {q["id"] for q in own}
    target.mkdir(parents=True, exist_ok=True)
    with (target / "corpus.jsonl").open("w", encoding="utf-8") as out:
        out.writelines(json.dumps(p, ensure_ascii=False) + "\n" for p in corpus if p["id"] in kept)
    with (target / "queries.jsonl").open("w", encoding="utf-8") as out:
        out.writelines(json.dumps(q, ensure_ascii=False) + "\n" for q in own)
    with (target / "qrels.tsv").open("w", encoding="utf-8") as out:
        out.writelines(f"{q['id']}\t{p}\t1\n" for q in own for p in sorted(qrels[q["id"]]))
    if (source / "answers.jsonl").exists():
        with (target / "answers.jsonl").open("w", encoding="utf-8") as out:
            out.writelines(json.dumps(a, ensure_ascii=False) + "\n" for a in _jsonl(source / "answers.jsonl")
                           if a["id"] in own_ids)
    return len(kept), len(own)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("n", type=int, help="queries sampled; as many other passages join their gold ones")
    parser.add_argument("--seed", type=int, default=50)
    args = parser.parse_args()
    from common import django_setup

    django_setup()
    passages, queries = subset(args.source, args.target, args.n, seed=args.seed)
    print(f"{args.target.name}: {passages} passages, {queries} queries")


if __name__ == "__main__":
    main()
