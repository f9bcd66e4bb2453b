"""RAG answer quality and latency through the real API path.

    nice -n 10 python -m bailinghub.embedded exec -- .venv/bin/python bench/rag.py \
        [--datasets cmrc2018-dev,drcd-dev,dureader-robust-a] [--sample 200] [--embedder local|hashing] \
        [--corpus all|sample] [--fit] [--keep]

In a scratch database (bench_rag, migrated fresh and dropped afterwards), for each dataset
(../shared/bench/datasets/<name>, with answers.jsonl): the corpus is loaded into a scratch KB
through the real pipeline (upload service, then each document's ingestion in this process, as
bench_retrieval does), bound to a scratch route, and a random sample of the questions (seeded) is asked with
`POST /api/v1/routes/{key}/rag/query` through Django's test client — URL routing, authentication,
the view, the service and the record, as an operator's request. Printed per dataset:

- answer contains gold: the answer (citation markers removed; case, width and spaces folded)
  contains one of the gold answer spans;
- evidence recall: a gold passage (qrels) is among the answer's evidence;
- grounded rate (of all answers), answered rate, DEPENDENCY_UNAVAILABLE count;
- latency p50/p95 of the whole request, and the answer's mean length in characters.

`--corpus sample` loads only the sampled questions' gold passages plus as many random others (a
smaller, easier haystack; say so when quoting its figures). `--fit` fits the confidence
calibration (logistic regression of "contains gold" on support and top score) on fold A of the
answered questions and prints expected calibration error on fold B, for the current and the fitted
coefficients.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
import unicodedata
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import django_setup, percentiles, scratch_database

DATASETS = Path(__file__).resolve().parent.parent.parent / "shared" / "bench" / "datasets"


def fold(text: str) -> str:
    return "".join(unicodedata.normalize("NFKC", text).lower().split())


def contains_gold(answer: str, golds: list[str]) -> bool:
    from apps.answers.generators.base import strip_markers

    folded = fold(strip_markers(answer))
    return any(fold(g) and fold(g) in folded for g in golds)


def fit_logistic(rows: list[tuple[float, float, int]], *, steps: int = 4000, rate: float = 0.5) -> tuple[float, ...]:
    """(intercept, support, score) by gradient descent on the log loss."""
    a = b = c = 0.0
    n = len(rows)
    for _ in range(steps):
        ga = gb = gc = 0.0
        for support, score, label in rows:
            p = 1 / (1 + math.exp(-(a + b * support + c * score)))
            ga += p - label
            gb += (p - label) * support
            gc += (p - label) * score
        a -= rate * ga / n
        b -= rate * gb / n
        c -= rate * gc / n
    return a, b, c


def ece(rows: list[tuple[float, int]], bins: int = 10) -> float:
    """Expected calibration error of (confidence, label) pairs over equal-width bins."""
    total = len(rows)
    if not total:
        return float("nan")
    error = 0.0
    for i in range(bins):
        low, high = i / bins, (i + 1) / bins
        members = [(p, y) for p, y in rows if low <= p < high or (i == bins - 1 and p == 1.0)]
        if members:
            error += len(members) / total * abs(sum(p for p, _ in members) / len(members)
                                                - sum(y for _, y in members) / len(members))
    return error


def load(folder: Path, sample: int, seed: int):
    from apps.knowledge.management.commands.bench_retrieval import load_dataset

    corpus, queries, qrels = load_dataset(folder, None)
    answers = {}
    for line in (folder / "answers.jsonl").open(encoding="utf-8"):
        if line.strip():
            row = json.loads(line)
            answers[row["id"]] = [a for a in row["answers"] if a.strip()]
    queries = [q for q in queries if answers.get(q["id"])]
    picked = random.Random(seed).sample(queries, min(sample, len(queries)))
    return corpus, picked, qrels, answers


def run_dataset(name: str, o) -> dict:
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client, override_settings

    from apps.answers import services as answer_services
    from apps.knowledge import ingest, services
    from apps.knowledge.management.commands.bench_retrieval import MODEL_NAMES, _file_for
    from apps.knowledge.models import Document, EmbeddingModel, RouteKnowledgeBinding
    from apps.projects.models import Membership, Project
    from apps.routes.models import Route

    folder = Path(o.datasets_dir) / name
    corpus, picked, qrels, answers = load(folder, o.sample, o.seed)
    if o.corpus == "sample":
        gold = {pid for q in picked for pid in qrels[q["id"]]}
        others = [p for p in corpus if p["id"] not in gold]
        extra = random.Random(o.seed).sample(others, min(len(gold), len(others)))
        corpus = [p for p in corpus if p["id"] in gold] + extra
    project, _ = Project.objects.get_or_create(slug="bench", defaults={"name": "Benchmarks"})
    user, _ = get_user_model().objects.get_or_create(username="bench-rag", defaults={"is_staff": True})
    Membership.objects.get_or_create(project=project, user=user, defaults={"role": Membership.Role.OWNER})
    if o.embedder == "hashing":
        model = (EmbeddingModel.objects.filter(name="bench-hashing-256").first()
                 or services.embedding_model_register(name="bench-hashing-256", provider="hashing", dimension=256))
    else:
        model = EmbeddingModel.objects.get(name=MODEL_NAMES[o.embedder])
    suffix = uuid.uuid4().hex[:6]
    kb = services.knowledge_base_create(project=project, name=f"rag bench {name} {suffix}", embedding_model=model,
                                        embedding_dim=model.dimension)
    route = Route.objects.create(project=project, key=f"rag-bench-{suffix}", name=f"RAG bench {name}")
    RouteKnowledgeBinding.objects.create(route=route, knowledge_base=kb)
    discard = f"bench-discard-{suffix}"
    try:
        started = time.perf_counter()
        with override_settings(KNOWLEDGE_TASK_QUEUE=discard,
                               KNOWLEDGE_UPLOAD_MAX_FILES=max(settings.KNOWLEDGE_UPLOAD_MAX_FILES, 1000)):
            for start in range(0, len(corpus), 500):
                files = [_file_for(p) for p in corpus[start:start + 500]]
                for document in services.document_upload(kb=kb, files=files):
                    outcome = ingest.document_ingest(document_id=document.pk)
                    if outcome != "completed":
                        raise SystemExit(f"{document.filename}: {outcome}")
                print(f"  {name}: {min(start + 500, len(corpus))}/{len(corpus)} passages "
                      f"({time.perf_counter() - started:.0f} s)", flush=True)
        ingest_s = time.perf_counter() - started
        passage_of = {}
        id_of_file = {_file_for(p).name: p["id"] for p in corpus}
        for pk, filename in Document.objects.filter(knowledge_base=kb).values_list("pk", "filename"):
            passage_of[str(pk)] = id_of_file.get(filename)
        client = Client()
        client.force_login(user)
        url = f"/api/v1/routes/{route.key}/rag/query?project_id={project.pk}"
        rows = []
        for query in picked:
            t0 = time.perf_counter()
            response = client.post(url, {"question": query["text"]}, content_type="application/json")
            ms = (time.perf_counter() - t0) * 1000
            body = response.json()
            evidence_passages = {passage_of.get(e["document_id"]) for e in body.get("evidence", [])}
            rows.append({
                "id": query["id"], "status": response.status_code, "ms": ms,
                "gold": contains_gold(body.get("answer", ""), answers[query["id"]]) if body.get("useful") else False,
                "recall": bool(evidence_passages & qrels[query["id"]]),
                "grounded": body.get("grounded") is True, "useful": body.get("useful") is True,
                "unavailable": body.get("error_code") == "DEPENDENCY_UNAVAILABLE",
                "confidence": body.get("confidence", 0.0), "chars": len(body.get("answer", "")),
                "top_score": body["evidence"][0]["score"] if body.get("evidence") else 0.0,
                "support": (body.get("trace") or [{}])[-1].get("support", 0.0),
            })
        n = len(rows)
        answered = [r for r in rows if r["useful"]]
        report = {
            "dataset": name, "embedder": model.name, "corpus_passages": len(corpus), "questions": n,
            "ingest_s": round(ingest_s, 1),
            "answer_contains_gold": round(sum(r["gold"] for r in rows) / n, 4),
            "answer_contains_gold_when_answered": round(sum(r["gold"] for r in answered) / max(1, len(answered)), 4),
            "evidence_recall": round(sum(r["recall"] for r in rows) / n, 4),
            "grounded_rate": round(sum(r["grounded"] for r in rows) / n, 4),
            "answered_rate": round(len(answered) / n, 4),
            "dependency_unavailable": sum(r["unavailable"] for r in rows),
            "http_non_200": sum(r["status"] != 200 for r in rows),
            "latency_ms": percentiles([r["ms"] for r in rows]),
            "answer_chars_mean": round(sum(r["chars"] for r in answered) / max(1, len(answered)), 1),
            "rows": rows,
            "confidence_rows": [(r["confidence"], int(r["gold"])) for r in answered],
        }
        if o.fit:
            report["fit_rows"] = [(r["support"], r["top_score"], int(r["gold"]), r["id"]) for r in answered]
        answer_services.logger.debug("bench %s done", name)
        return report
    finally:
        if not o.keep:
            route.delete()
            services.knowledge_base_delete(kb=kb)
        from apps.core.redis import redis_client

        redis_client().delete(discard)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default="cmrc2018-dev,drcd-dev,dureader-robust-a")
    parser.add_argument("--sample", type=int, default=200)
    parser.add_argument("--datasets-dir", default=str(DATASETS))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--embedder", default="local", choices=["local", "hashing"])
    parser.add_argument("--corpus", default="all", choices=["all", "sample"])
    parser.add_argument("--fit", action="store_true")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--json", dest="json_path", default=None)
    o = parser.parse_args()
    django_setup()
    from apps.answers import services as answer_services
    from apps.knowledge.management.commands.bench_retrieval import fold_of

    with scratch_database("bench_rag"):
        reports = [run_dataset(name.strip(), o) for name in o.datasets.split(",") if name.strip()]
    print()
    print(f"{'dataset':>18}  {'gold':>6}  {'gold|ans':>8}  {'ev.recall':>9}  {'grounded':>8}  {'answered':>8}  "
          f"{'DEP_UNAV':>8}  {'p50 ms':>7}  {'p95 ms':>7}  {'chars':>5}  corpus")
    for r in reports:
        print(f"{r['dataset']:>18}  {r['answer_contains_gold']:>6.3f}  "
              f"{r['answer_contains_gold_when_answered']:>8.3f}  "
              f"{r['evidence_recall']:>9.3f}  {r['grounded_rate']:>8.3f}  {r['answered_rate']:>8.3f}  "
              f"{r['dependency_unavailable']:>8}  {r['latency_ms'].get('p50', 0):>7.1f}  "
              f"{r['latency_ms'].get('p95', 0):>7.1f}  {r['answer_chars_mean']:>5.1f}  "
              f"{r['corpus_passages']} passages, {r['questions']} questions, {r['embedder']}")
    confidence_rows = [row for r in reports for row in r["confidence_rows"]]
    print(f"\nconfidence as served: ECE {ece(confidence_rows):.3f} over {len(confidence_rows)} answered questions")
    if o.fit:
        rows = [row for r in reports for row in r["fit_rows"]]
        train = [(s, t, y) for s, t, y, qid in rows if fold_of(qid) == "A"]
        held = [(s, t, y) for s, t, y, qid in rows if fold_of(qid) == "B"]
        a, b, c = fit_logistic(train)

        def calibrated(coef, data):
            return [(1 / (1 + math.exp(-(coef[0] + coef[1] * s + coef[2] * t))), y) for s, t, y in data]

        current = (answer_services.CONFIDENCE_INTERCEPT, answer_services.CONFIDENCE_SUPPORT,
                   answer_services.CONFIDENCE_SCORE)
        print(f"fit on fold A ({len(train)}): intercept {a:.3f}, support {b:.3f}, score {c:.3f}")
        print(f"held-out fold B ({len(held)}): ECE current {ece(calibrated(current, held)):.3f}, "
              f"fitted {ece(calibrated((a, b, c), held)):.3f}; base rate "
              f"{sum(y for *_, y in held) / max(1, len(held)):.3f}")
    if o.json_path:
        Path(o.json_path).write_text(json.dumps([{k: v for k, v in r.items() if k != "fit_rows"} for r in reports],
                                                ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
