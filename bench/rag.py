"""RAG answer quality and latency through the real API path.

    nice -n 10 python -m bailinghub.embedded exec -- .venv/bin/python bench/rag.py \
        [--datasets cmrc2018-dev,drcd-dev,dureader-robust-a] [--sample 200] [--embedder local|hashing] \
        [--corpus all|sample] [--fit] [--keep] [--kb UUID=DATASET ...] [--foreign N]

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

`--kb UUID=DATASET` asks a KB kept by `bench_retrieval --keep` (full corpus, its own embedder) in the
configured database instead of loading one in a scratch database; the scratch route is deleted
afterwards, the KB kept. `--foreign N` also asks each route N questions it cannot answer: the other
datasets' questions of the run and English requests to an API, in equal shares. Printed per dataset
beside the above: the share of them answered and their mean confidence; they enter the fit with
label 0 (an answer from the wrong knowledge holds no gold).

`--corpus sample` loads only the sampled questions' gold passages plus as many random others (a
smaller, easier haystack; say so when quoting its figures).

Every question reaches the generator (RAG_EVIDENCE_SCORE_MIN 0 while asking); the figures printed
"as served" apply the configured floor afterwards — exactly what the route does, since the floor is
judged before generation. `--fit` chooses the floor (of 0, 0.05, ... 0.95, the one with the largest
share of own questions answered right less the share of questions it cannot answer that are
answered) and fits the confidence (logistic
regression of "contains gold" on support and the best evidence score where scores are calibrated, on
support alone for all) on the questions answered above it — on fold A, scored on fold B, and the
other way round — then on both folds, to ship. `--from-json FILE` prints and fits from an earlier
`--json` dump without asking anything again.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import sys
import time
import unicodedata
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import auc, django_setup, percentiles, scratch_database

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


def foreign_questions(name: str, o, count: int) -> list[dict]:
    """`count` questions the dataset's KB cannot answer: the run's other datasets' and English
    requests to an API (capability_quality's), in equal shares, seeded."""
    from apps.knowledge.management.commands.bench_retrieval import load_dataset

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from capability_quality import GITHUB_QUERIES, MORE_QUERIES

    # Ids as bench/answerability.py gives them, so a request falls in the same fold in both.
    pools = [[{"id": "api:" + hashlib.sha256(text.encode()).hexdigest()[:16], "text": text, "source": "api-requests"}
              for text, _tool in GITHUB_QUERIES + MORE_QUERIES]]
    for other in o.dataset_names:
        if other != name:
            _corpus, queries, _qrels = load_dataset(Path(o.datasets_dir) / other, None)
            pools.append([dict(q, source=other) for q in queries])
    rng = random.Random(f"{o.seed}:{name}")
    share, extra = divmod(count, len(pools))
    picked: list[dict] = []
    for i, pool in enumerate(pools):
        picked += rng.sample(pool, min(share + (i < extra), len(pool)))
    return picked


def _loaded_kb(name: str, o, *, project, corpus: list[dict], picked: list[dict], qrels: dict):
    """A scratch KB holding the corpus (or the sample's haystack), ingested in this process."""
    from django.conf import settings
    from django.test import override_settings

    from apps.knowledge import ingest, services
    from apps.knowledge.management.commands.bench_retrieval import MODEL_NAMES, _file_for
    from apps.knowledge.models import EmbeddingModel

    if o.corpus == "sample":
        gold = {pid for q in picked for pid in qrels[q["id"]]}
        others = [p for p in corpus if p["id"] not in gold]
        extra = random.Random(o.seed).sample(others, min(len(gold), len(others)))
        corpus[:] = [p for p in corpus if p["id"] in gold] + extra
    if o.embedder == "hashing":
        model = (EmbeddingModel.objects.filter(name="bench-hashing-256").first()
                 or services.embedding_model_register(name="bench-hashing-256", provider="hashing", dimension=256))
    else:
        model = EmbeddingModel.objects.get(name=MODEL_NAMES[o.embedder])
    kb = services.knowledge_base_create(project=project, name=f"rag bench {name} {uuid.uuid4().hex[:6]}",
                                        embedding_model=model, embedding_dim=model.dimension)
    discard = f"bench-discard-{uuid.uuid4().hex[:6]}"
    started = time.perf_counter()
    try:
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
    except BaseException:
        services.knowledge_base_delete(kb=kb)
        raise
    finally:
        from apps.core.redis import redis_client

        redis_client().delete(discard)
    return kb, time.perf_counter() - started


def run_dataset(name: str, o) -> dict:
    from django.contrib.auth import get_user_model
    from django.test import Client, override_settings

    from apps.knowledge import services
    from apps.knowledge.management.commands.bench_retrieval import _file_for, fold_of
    from apps.knowledge.models import Document, KnowledgeBase, RouteKnowledgeBinding
    from apps.projects.models import Membership, Project
    from apps.routes.models import Route
    from bench.answerability import chat as typed_as_chat

    def chat(text: str, i: int) -> str:
        if not o.chat_templates:
            return typed_as_chat(text, i)
        from apps.knowledge.pipeline.terms import has_cjk

        templates = o.chat_templates["zh" if has_cjk(text) else "en"]
        return templates[i % len(templates)].format(q=text.rstrip("?？。. "))

    folder = Path(o.datasets_dir) / name
    corpus, picked, qrels, answers = load(folder, o.sample, o.seed)
    kept = o.kept.get(name)
    if kept:
        kb = KnowledgeBase.objects.select_related("embedding_model", "project").get(pk=kept)
        project, ingest_s = kb.project, 0.0
    else:
        project, _ = Project.objects.get_or_create(slug="bench", defaults={"name": "Benchmarks"})
        kb, ingest_s = _loaded_kb(name, o, project=project, corpus=corpus, picked=picked, qrels=qrels)
    user, _ = get_user_model().objects.get_or_create(username="bench-rag", defaults={"is_staff": True})
    Membership.objects.get_or_create(project=project, user=user, defaults={"role": Membership.Role.OWNER})
    suffix = uuid.uuid4().hex[:6]
    route = Route.objects.create(project=project, key=f"rag-bench-{suffix}", name=f"RAG bench {name}")
    RouteKnowledgeBinding.objects.create(route=route, knowledge_base=kb)
    try:
        passage_of = {}
        id_of_file = {_file_for(p).name: p["id"] for p in corpus}
        for pk, filename in Document.objects.filter(knowledge_base=kb).values_list("pk", "filename"):
            passage_of[str(pk)] = id_of_file.get(filename)
        client = Client()
        client.force_login(user)
        url = f"/api/v1/routes/{route.key}/rag/query?project_id={project.pk}"

        def ask(query: dict) -> tuple[dict, dict]:
            t0 = time.perf_counter()
            # Every question reaches the generator; the evidence floor is applied afterwards
            # (`answered`), so one run can choose it.
            with override_settings(RAG_EVIDENCE_SCORE_MIN=0.0):
                response = client.post(url, {"question": query["text"]}, content_type="application/json")
            ms = (time.perf_counter() - t0) * 1000
            body = response.json()
            retrieve = next((step for step in body.get("trace", []) if step.get("step") == "retrieve"), {})
            generate = next((step for step in body.get("trace", []) if step.get("step") == "generate"), {})
            return body, {
                "id": query["id"], "fold": fold_of(query["id"]), "status": response.status_code, "ms": ms,
                "grounded": body.get("grounded") is True, "useful": body.get("useful") is True,
                "unavailable": body.get("error_code") == "DEPENDENCY_UNAVAILABLE",
                "confidence": body.get("confidence", 0.0), "chars": len(body.get("answer", "")),
                "top_score": max((e["score"] for e in body.get("evidence", [])), default=0.0),
                "calibrated": retrieve.get("scores_calibrated") is True,
                "support": generate.get("support", 0.0),
            }

        rows = []
        typed = [("plain", query) for query in picked]
        if o.chat:
            typed += [("chat", dict(query, text=chat(query["text"], i))) for i, query in enumerate(picked)]
        for typing, query in typed:
            body, row = ask(query)
            evidence_passages = {passage_of.get(e["document_id"]) for e in body.get("evidence", [])}
            row["gold"] = contains_gold(body.get("answer", ""), answers[query["id"]]) if row["useful"] else False
            row["recall"] = bool(evidence_passages & qrels[query["id"]])
            rows.append(dict(row, own=True, typed=typing))
        for i, query in enumerate(foreign_questions(name, o, o.foreign) if o.foreign else []):
            _body, row = ask(query)
            rows.append(dict(row, gold=False, recall=False, own=False, source=query["source"], typed="plain"))
            if o.chat and query["source"] != "api-requests":
                _body, row = ask(dict(query, text=chat(query["text"], i)))
                rows.append(dict(row, gold=False, recall=False, own=False, source=query["source"], typed="chat"))
        return {"dataset": name, "embedder": kb.embedding_model.name, "corpus_passages": len(corpus),
                "kept_kb": str(kb.pk) if kept else None, "ingest_s": round(ingest_s, 1), "rows": rows}
    finally:
        route.delete()
        if not kept and not o.keep:
            services.knowledge_base_delete(kb=kb)


FLOORS = [round(0.05 * i, 2) for i in range(20)]


def answered(row: dict, floor: float) -> bool:
    """Whether the route answers the question with RAG_EVIDENCE_SCORE_MIN = floor."""
    return row["useful"] and not (row["calibrated"] and row["top_score"] < floor)


def floor_worth(rows: list[dict], floor: float) -> float:
    """The share of the own questions answered right less the share of the questions the KB cannot
    answer that are answered at all: a wrong answer to a question off the knowledge costs as much
    as a right one lost."""
    own = [r for r in rows if r["own"]]
    foreign = [r for r in rows if not r["own"]]
    right = sum(r["gold"] and answered(r, floor) for r in own) / max(1, len(own))
    return right - sum(answered(r, floor) for r in foreign) / max(1, len(foreign))


def choose_floor(rows: list[dict]) -> float:
    """The floor worth most (floor_worth); of equals, the lowest."""
    return max(FLOORS, key=lambda floor: (floor_worth(rows, floor), -floor))


def fit_confidence(rows: list[dict], floor: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(calibrated: intercept, support, score; relative: intercept, support, 0), each fitted on the
    answers it will be served for: the calibrated rows answered above `floor`, and every answered
    row for the relative one (where scores are relative no floor applies, so off-topic questions
    answered are among them)."""
    calibrated = fit_logistic([(r["support"], r["top_score"], int(r["gold"])) for r in rows
                               if r["calibrated"] and answered(r, floor)])
    relative = fit_logistic([(r["support"], 0.0, int(r["gold"])) for r in rows if r["useful"]])
    return calibrated, relative


def confidence(row: dict, calibrated: tuple[float, ...], relative: tuple[float, ...]) -> float:
    a, b, c = calibrated if row["calibrated"] else relative
    return 1 / (1 + math.exp(-(a + b * row["support"] + c * (row["top_score"] if row["calibrated"] else 0.0))))


def summary(report: dict, floor: float, typed: str = "plain") -> dict:
    """The printed figures of one dataset's run with RAG_EVIDENCE_SCORE_MIN = floor, over the
    questions typed `typed` (plain, or chat with --chat)."""
    rows = [r for r in report["rows"] if r.get("typed", "plain") == typed]
    own = [r for r in rows if r["own"]]
    foreign = [r for r in rows if not r["own"]]
    said = [r for r in own if answered(r, floor)]
    foreign_said = [r for r in foreign if answered(r, floor)]
    n = max(1, len(own))
    return {
        "questions": len(own), "answer_contains_gold": round(sum(r["gold"] for r in said) / n, 4),
        "answer_contains_gold_when_answered": round(sum(r["gold"] for r in said) / max(1, len(said)), 4),
        "evidence_recall": round(sum(r["recall"] for r in own) / n, 4),
        "grounded_rate": round(sum(r["grounded"] for r in own) / n, 4),
        "answered_rate": round(len(said) / n, 4),
        "dependency_unavailable": sum(r["unavailable"] for r in rows),
        "http_non_200": sum(r["status"] != 200 for r in rows),
        "latency_ms": percentiles([r["ms"] for r in own]),
        "answer_chars_mean": round(sum(r["chars"] for r in said) / max(1, len(said)), 1),
        "foreign_questions": len(foreign),
        "foreign_answered_rate": round(len(foreign_said) / max(1, len(foreign)), 4),
        "foreign_answered_without_floor": round(sum(r["useful"] for r in foreign) / max(1, len(foreign)), 4),
        "foreign_confidence_mean": round(sum(r["confidence"] for r in foreign_said) / max(1, len(foreign_said)), 4),
        "own_confidence_mean": round(sum(r["confidence"] for r in said) / max(1, len(said)), 4),
    }


def held_out(rows: list[dict], *, train: str, current: tuple) -> str:
    """Floor and confidence chosen on fold `train`, scored on the other."""
    fitted_on = [r for r in rows if r["fold"] == train]
    scored_on = [r for r in rows if r["fold"] != train]
    floor = choose_floor(fitted_on)
    calibrated, relative = fit_confidence(fitted_on, floor)
    own = [r for r in scored_on if r["own"]]
    foreign = [r for r in scored_on if not r["own"]]
    lost = sum(r["gold"] and not answered(r, floor) for r in own)
    kept = [r for r in scored_on if answered(r, floor)]

    def scored(coefs: tuple) -> str:
        pairs = [(confidence(r, *coefs), int(r["gold"])) for r in kept]
        relative = [(confidence(dict(r, calibrated=False), *coefs), int(r["gold"])) for r in scored_on if r["useful"]]
        return f"ECE {ece(pairs):.3f}, AUC {auc(pairs):.3f} (support alone over every answer: ECE {ece(relative):.3f})"

    return (f"chosen on {train}: floor {floor:.2f}, confidence {tuple(round(x, 3) for x in calibrated)} / "
            f"support alone {tuple(round(x, 3) for x in relative[:2])}\n"
            f"  scored on the other fold: own right answers lost {lost} of {len(own)}; foreign answered "
            f"{sum(r['useful'] for r in foreign) / max(1, len(foreign)):.3f} -> "
            f"{sum(answered(r, floor) for r in foreign) / max(1, len(foreign)):.3f}; confidence over the "
            f"{len(kept)} answered (base rate {sum(r['gold'] for r in kept) / max(1, len(kept)):.3f}): "
            f"current {scored(current)}, fitted {scored((calibrated, relative))}")


def main() -> None:
    import argparse
    import contextlib

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default="cmrc2018-dev,drcd-dev,dureader-robust-a")
    parser.add_argument("--sample", type=int, default=200)
    parser.add_argument("--datasets-dir", default=str(DATASETS))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--embedder", default="local", choices=["local", "hashing"])
    parser.add_argument("--corpus", default="all", choices=["all", "sample"])
    parser.add_argument("--kb", action="append", default=[], metavar="UUID=DATASET",
                        help="ask a KB kept by bench_retrieval --keep for DATASET, in the configured database")
    parser.add_argument("--foreign", type=int, default=0, metavar="N",
                        help="also ask each route N questions it cannot answer (other datasets', API requests)")
    parser.add_argument("--chat", action="store_true",
                        help="also ask every question typed as chat (bench/answerability.py's templates)")
    parser.add_argument("--chat-templates", type=Path, default=None, metavar="FILE",
                        help='with --chat, other phrasings: JSON {"zh": [...], "en": [...]} of format strings with {q}')
    parser.add_argument("--fit", action="store_true")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--json", dest="json_path", default=None, help="write every question's figures")
    parser.add_argument("--from-json", default=None, help="print and fit from an earlier --json dump, asking nothing")
    o = parser.parse_args()
    o.kept = {}
    for pair in o.kb:
        kb_id, _, dataset = pair.partition("=")
        if not dataset:
            parser.error(f"--kb {pair}: give UUID=DATASET")
        o.kept[dataset] = kb_id
    o.dataset_names = [name.strip() for name in o.datasets.split(",") if name.strip()]
    o.chat_templates = json.loads(o.chat_templates.read_text(encoding="utf-8")) if o.chat_templates else None
    if o.kept:
        o.dataset_names = list(o.kept)
    django_setup()
    from django.conf import settings

    from apps.answers import services as answer_services

    if o.from_json:
        reports = json.loads(Path(o.from_json).read_text())
    else:
        where = contextlib.nullcontext() if o.kept else scratch_database("bench_rag")
        with where:
            reports = [run_dataset(name, o) for name in o.dataset_names]
    floor = settings.RAG_EVIDENCE_SCORE_MIN
    print(f"\nas served (RAG_EVIDENCE_SCORE_MIN {floor}):")
    print(f"{'dataset':>18}  {'gold':>6}  {'gold|ans':>8}  {'ev.recall':>9}  {'grounded':>8}  {'answered':>8}  "
          f"{'DEP_UNAV':>8}  {'p50 ms':>7}  {'p95 ms':>7}  {'chars':>5}  corpus")
    for report in reports:
        for typed in ("plain", "chat"):
            r = summary(report, floor, typed)
            if not r["questions"]:
                continue
            print(f"{report['dataset'] + (' (chat)' if typed == 'chat' else ''):>18}  "
                  f"{r['answer_contains_gold']:>6.3f}  {r['answer_contains_gold_when_answered']:>8.3f}  "
                  f"{r['evidence_recall']:>9.3f}  {r['grounded_rate']:>8.3f}  {r['answered_rate']:>8.3f}  "
                  f"{r['dependency_unavailable']:>8}  {r['latency_ms'].get('p50', 0):>7.1f}  "
                  f"{r['latency_ms'].get('p95', 0):>7.1f}  {r['answer_chars_mean']:>5.1f}  "
                  f"{report['corpus_passages']} passages, {r['questions']} questions, {report['embedder']}")
            if r["foreign_questions"]:
                print(f"{'':>18}  {r['foreign_questions']} questions it cannot answer: "
                      f"answered {r['foreign_answered_rate']:.3f} "
                      f"({r['foreign_answered_without_floor']:.3f} without the floor), mean confidence "
                      f"{r['foreign_confidence_mean']:.3f} (own answered: {r['own_confidence_mean']:.3f})")
    rows = [row for report in reports for row in report["rows"]]
    served = [(r["confidence"], int(r["gold"])) for r in rows if answered(r, floor)]
    print(f"\nconfidence as served: ECE {ece(served):.3f}, AUC {auc(served):.3f} over {len(served)} answered questions")
    if o.fit:
        current = ((answer_services.CONFIDENCE_CALIBRATED.intercept, answer_services.CONFIDENCE_CALIBRATED.support,
                    answer_services.CONFIDENCE_CALIBRATED.score),
                   (answer_services.CONFIDENCE_RELATIVE.intercept, answer_services.CONFIDENCE_RELATIVE.support, 0.0))
        for train in ("A", "B"):
            print(held_out(rows, train=train, current=current))
        chosen = choose_floor(rows)
        calibrated, relative = fit_confidence(rows, chosen)
        print(f"on both folds, to ship: RAG_EVIDENCE_SCORE_MIN {chosen:.2f}; CONFIDENCE_CALIBRATED "
              f"{tuple(round(x, 3) for x in calibrated)}; "
              f"CONFIDENCE_RELATIVE {tuple(round(x, 3) for x in relative[:2])}")
    if o.json_path:
        Path(o.json_path).write_text(json.dumps(reports, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
