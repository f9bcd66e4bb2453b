"""Does the KB answer at all: the calibration of pipeline.answerability, fitted on one fold of the
queries and reported on the other.

    python -m bailinghub.embedded exec -- .venv/bin/python bench/answerability.py \
        --kb UUID=../shared/bench/datasets/dureader-robust-a --kb UUID=../shared/bench/datasets/cmrc2018-dev \
        [--kb ...] [--foreign DATASET_DIR] [--sample 400] [--json FILE] [--from-json FILE]

Each KB is one kept by `bench_retrieval --keep` of its dataset. Its own dataset's queries are
questions it answers (label 1); the other given datasets' queries are questions it does not (label
0: another corpus, another topic — a few may be answerable by chance, which only makes the figures
conservative), and so are 132 English requests to an API (`capability_quality`'s). Every query is
searched as routes search (hybrid, the KB's defaults) and the two signals of pipeline.answerability
read off the result. Folds by the query id's hash (`bench_retrieval.fold_of`): a logistic is fitted
on fold A of every KB together and reported on fold B, and the other way round. Printed per KB and
fold: AUC, and at probability 0.2 and 0.5 the share of own questions kept, how many kept-out own
questions had the gold passage at rank 1 (what a threshold costs), and the share of each source's
foreign questions cut. The coefficients to ship are fitted on both folds together only after the
held-out figures are read; `--from-json` refits from a dump without searching. Figures, never
assertions.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import auc as pair_auc


def fit_logistic(rows: list[dict], *, steps: int = 3000, rate: float = 2.0) -> tuple[float, float, float]:
    """(intercept, cosine, coverage) by gradient descent on the log loss, each class weighing the
    same (a KB meets far more foreign than own questions here, and no base rate is known)."""
    import numpy as np

    x = np.array([[1.0, r["cosine"], r["coverage"]] for r in rows])
    y = np.array([r["label"] for r in rows], dtype=float)
    weight = np.where(y == 1, 0.5 / max(y.sum(), 1), 0.5 / max((1 - y).sum(), 1))
    # Centre the cosine for the descent (e5's cosines sit in 0.7–0.95), then fold it back.
    mean = x[:, 1].mean()
    x[:, 1] -= mean
    w = np.zeros(3)
    for _ in range(steps):
        p = 1 / (1 + np.exp(-(x @ w)))
        w -= rate * (x.T @ (weight * (p - y)))
    intercept, cosine, coverage = float(w[0] - w[1] * mean), float(w[1]), float(w[2])
    return intercept, cosine, coverage


Coefs = dict[str, tuple[float, float, float]]  # by the question's script: "cjk", "other"


def fit_per_script(rows: list[dict]) -> Coefs:
    """A logistic for each script among the rows (e5's cosines sit differently for each)."""
    return {script: fit_logistic([r for r in rows if r["script"] == script])
            for script in sorted({r["script"] for r in rows})}


def probability(coefs: Coefs, row: dict) -> float:
    coef = coefs[row["script"]]
    z = coef[0] + coef[1] * row["cosine"] + coef[2] * row["coverage"]
    return 1 / (1 + math.exp(-z)) if z > -700 else 0.0


def auc(rows: list[dict], coefs: Coefs) -> float:
    return pair_auc([(probability(coefs, r), r["label"]) for r in rows])


def kept(coefs: Coefs, row: dict, cut: float) -> bool:
    """Whether a route threshold of `cut` keeps the question's best hit: its fused score times the
    probability, as the engine compares it."""
    return row["top_fused"] * probability(coefs, row) >= cut


def report(rows: list[dict], coefs: Coefs, *, cuts: tuple[float, ...] = (0.2, 0.5)) -> dict:
    own = [r for r in rows if r["label"] == 1]
    foreign = [r for r in rows if r["label"] == 0]
    same = [r for r in rows if r["script"] == r["kb_script"]]
    out: dict = {"own": len(own), "foreign": len(foreign), "auc": round(auc(rows, coefs), 4),
                 "auc_same_script": round(auc(same, coefs), 4)}
    for cut in cuts:
        kept_out = [r for r in own if not kept(coefs, r, cut)]
        out[f"at {cut}"] = {
            "own_kept": round(1 - len(kept_out) / max(len(own), 1), 4),
            "own_cut_with_gold_at_1": sum(1 for r in kept_out if r.get("gold_rank") == 1),
            "foreign_cut": {source: round(sum(not kept(coefs, r, cut) for r in members) / len(members), 3)
                            for source in sorted({r["source"] for r in foreign})
                            for members in [[r for r in foreign if r["source"] == source]]},
        }
    return out


# How people type to an agent: the question inside a greeting and thanks (label unchanged). Each
# query takes one template of its script by its position.
CHAT_ZH = ("你好，请问一下，{q}？麻烦告诉我，谢谢！", "我最近遇到一个问题，想咨询一下：{q}",
           "{q}，这个怎么回事呀？在线等，挺急的")
CHAT_EN = ("Hi there! Quick question: {q}? Thanks so much for your help.",
           "I was wondering if you could help me with something: {q}",
           "{q} - can you explain this to me, please? I'm a bit confused.")


def chat(text: str, i: int) -> str:
    from apps.knowledge.pipeline.terms import has_cjk

    templates = CHAT_ZH if has_cjk(text) else CHAT_EN
    return templates[i % len(templates)].format(q=text.rstrip("?？。. "))


def collect(pairs: list[tuple[str, Path]], foreign: list[Path], sample: int, seed: int) -> list[dict]:
    from common import django_setup

    django_setup()
    from apps.knowledge import selectors
    from apps.knowledge.management.commands.bench_retrieval import _file_for, fold_of, load_dataset
    from apps.knowledge.models import Document, KnowledgeBase
    from apps.knowledge.pipeline.retrieve import SearchOptions
    from apps.knowledge.pipeline.terms import has_cjk

    def script(text: str) -> str:
        return "cjk" if has_cjk(text) else "other"

    datasets = {folder.name: load_dataset(folder, None) for folder in [folder for _, folder in pairs] + foreign}
    # English requests to an API (capability_quality's), foreign to every KB here: the only
    # English questions beside scifact's.
    from capability_quality import GITHUB_QUERIES, MORE_QUERIES

    requests = [{"id": "api:" + hashlib.sha256(text.encode()).hexdigest()[:16], "text": text}
                for text, _tool in GITHUB_QUERIES + MORE_QUERIES]
    rng = random.Random(seed)
    rows: list[dict] = []
    for kb_id, folder in pairs:
        kb = KnowledgeBase.objects.select_related("embedding_model").get(pk=kb_id)
        corpus, own_queries, qrels = datasets[folder.name]
        kb_script = script(" ".join(p["text"][:200] for p in corpus[:20]))
        doc_of = dict(Document.objects.filter(knowledge_base=kb).values_list("pk", "filename"))
        id_of_file = {_file_for(p).name: p["id"] for p in corpus}
        asked = [(q, 1, folder.name) for q in rng.sample(own_queries, min(sample, len(own_queries)))]
        others = [name for name in datasets if name != folder.name]
        for name in others:
            pool = datasets[name][1]
            asked += [(q, 0, name) for q in rng.sample(pool, min(sample // len(others), len(pool)))]
        asked += [(q, 0, "api-requests") for q in requests]
        options = SearchOptions(top_k=10, mode="hybrid", rollup=False, rerank=False, explain=True)
        asked += [({"id": q["id"], "text": chat(q["text"], i)}, label, source + "-chat")
                  for i, (q, label, source) in enumerate(list(asked)) if source != "api-requests"]
        for query, label, source in asked:
            result = selectors.knowledge_search(kbs=[kb], query=query["text"], options=options)
            if not result.answerability:
                raise SystemExit(f"{folder.name}: the KB fuses by RRF or its model has no calibration signal")
            signal = result.answerability[0]
            gold_rank = None
            if label:
                seen: list[str] = []
                for hit in result.hits:
                    passage = id_of_file.get(doc_of.get(hit.document_id, ""))
                    if passage and passage not in seen:
                        seen.append(passage)
                ranks = [i for i, p in enumerate(seen[:10], start=1) if p in qrels[query["id"]]]
                gold_rank = ranks[0] if ranks else None
            rows.append({"kb": folder.name, "source": source, "query": query["id"], "fold": fold_of(query["id"]),
                         "label": label, "script": script(query["text"]), "kb_script": kb_script,
                         "held_idf": signal.held_idf, "present_idf": signal.present_idf,
                         "absent_idf": signal.absent_idf,
                         "top_fused": result.hits[0].explain["fused_score"] if result.hits else 0.0,
                         "cosine": signal.cosine, "coverage": signal.coverage, "gold_rank": gold_rank})
        print(f"{folder.name}: {len(asked)} questions searched", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kb", action="append", default=[], metavar="UUID=DATASET_DIR")
    parser.add_argument("--foreign", action="append", default=[], type=Path, metavar="DATASET_DIR",
                        help="a dataset whose queries are only asked of the KBs (as foreign questions)")
    parser.add_argument("--sample", type=int, default=400, help="own questions per KB, and as many foreign ones")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", dest="json_path", type=Path, default=None, help="write every question's signals")
    parser.add_argument("--from-json", type=Path, default=None, help="refit from an earlier --json dump")
    args = parser.parse_args()
    if args.from_json:
        rows = json.loads(args.from_json.read_text())
    else:
        pairs = [(value.split("=", 1)[0], Path(value.split("=", 1)[1])) for value in args.kb]
        if not pairs or len(pairs) + len(args.foreign) < 2:
            parser.error("give --kb UUID=DATASET_DIR pairs and other datasets (--kb or --foreign): a KB's foreign "
                         "questions are the other datasets'")
        rows = collect(pairs, args.foreign, args.sample, args.seed)
        if args.json_path:
            args.json_path.write_text(json.dumps(rows))

    def shown(coefs: Coefs) -> str:
        return "; ".join(f"{script}: {c[0]:.3f} + {c[1]:.3f}·cosine + {c[2]:.3f}·coverage"
                         for script, c in coefs.items())

    for train, test in (("A", "B"), ("B", "A")):
        coefs = fit_per_script([r for r in rows if r["fold"] == train])
        print(f"fitted on {train}: {shown(coefs)}")
        held = [r for r in rows if r["fold"] == test]
        print(f"  held out {test}, all KBs: {report(held, coefs)}")
        for kb in sorted({r['kb'] for r in held}):
            print(f"  held out {test}, {kb}: {report([r for r in held if r['kb'] == kb], coefs)}")
    print(f"fitted on both folds (to ship): {shown(fit_per_script(rows))}")


if __name__ == "__main__":
    main()
