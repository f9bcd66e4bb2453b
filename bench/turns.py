"""Turns benchmark: K concurrent agent clients open turns and complete runs against a running server.

    # a server on the same database, e.g.
    python -m bailinghub.embedded exec -- .venv/bin/python manage.py runserver 127.0.0.1:8011 --noreload
    # then
    python -m bailinghub.embedded exec -- .venv/bin/python bench/turns.py \
        [--base-url http://127.0.0.1:8011] [--clients 1,4,8] [--turns 40] [--mode plain,inline] \
        [--kb-chunks 10000] [--embedder use|hashing]

Set-up goes through the services, in the server's database (the configured one, not a scratch
one, since the server must see it): a project `bench-turns` with two routes — `bench-plain`
(knowledge off) and `bench-kb` (inline knowledge from one bound KB) — an agent client and a
fresh session (token shown to nobody). The KB is filled once from the Markdown corpora under
`shared/bench/corpora` with small chunks until it holds at least `--kb-chunks` child chunks, and
is reused by later runs.

Each client thread owns one conversation and, per iteration, opens a turn (a new turn id: the
server reads memory, searches knowledge, freezes the context) and completes its run with a
~300-character answer; every 5th iteration it also re-sends the turn (an idempotent replay).
Queries are the corpora's own headings, in a seeded order. Prints per mode and K: requests/s,
turns/s, and p50/p95/p99 latency of turns, completions and replays (milliseconds, wall clock at
the client; every request is a new HTTP connection). Figures, never assertions.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import http.client
import json
import os
import random
import re
import secrets
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, django_setup, percentiles

CORPORA = Path(os.environ.get("BENCH_CORPORA", ROOT.parent / "shared" / "bench" / "corpora"))
CORPUS_DIRS = [CORPORA / "md-zh-laws-core", CORPORA / "md-zh-vuedocs"]
PROJECT_SLUG = "bench-turns"
PLAIN_ROUTE, KB_ROUTE = "bench-plain", "bench-kb"
KB_NAME = "bench-turns-kb"
CHUNKING = {"strategy": "auto", "min_chars": 0, "max_chars": 160, "overlap_chars": 0}
EMBEDDERS = {"use": "universal-sentence-encoder-multilingual", "hashing": "bench-hashing-512"}
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*(\{#[^}]*\})?\s*$", re.MULTILINE)
ANSWER = ("根据知识库中的相关条款，处理方式如下：先核对当事人的身份与材料，再依照规定的期限办理；"
          "如有争议，可以申请复核。以上内容仅供参考，具体以最新规定为准。") * 3


def corpus_files() -> list[Path]:
    return sorted(path for directory in CORPUS_DIRS for path in (directory / "files").rglob("*.md"))


def corpus_queries(count: int, seed: int = 7) -> list[str]:
    headings = set()
    for path in corpus_files():
        for match in HEADING.finditer(path.read_text(encoding="utf-8")):
            text = match.group(1).strip().strip("#").strip()
            if 2 <= len(text) <= 40:
                headings.add(text)
    ordered = sorted(headings)
    random.Random(seed).shuffle(ordered)
    return ordered[:count]


def setup(*, kb_chunks: int, embedder: str, want_kb: bool, requester_ip: str = "127.0.0.1",
          kb_id: str | None = None) -> dict:
    """Project, routes, KB (filled once) and a fresh session; returns the access token. With
    `kb_id`, the routes are made in that KB's project and read it as it is (nothing ingested)."""
    from django.conf import settings
    from django.core.files.uploadedfile import SimpleUploadedFile

    from apps.agent_auth.models import AgentClient
    from apps.agent_auth.services import (
        agent_client_create,
        authorization_approve,
        authorization_create,
        code_exchange,
    )
    from apps.knowledge import ingest, services
    from apps.knowledge.models import Chunk, EmbeddingModel, KnowledgeBase
    from apps.projects.models import Project
    from apps.projects.services import project_create
    from apps.routes.models import Route
    from apps.routes.services import route_create

    given = KnowledgeBase.objects.select_related("project").get(pk=kb_id) if kb_id else None
    if given is not None:
        project = given.project
    else:
        project = Project.objects.filter(slug=PROJECT_SLUG).first() or project_create(name="Bench turns",
                                                                                       slug=PROJECT_SLUG)
    routes = {}
    for key, knowledge in ((PLAIN_ROUTE, False), (KB_ROUTE, True)):
        routes[key] = Route.objects.filter(project=project, key=key).first() or route_create(
            project=project, key=key, name=f"Bench {key}", system_prompt="你是法律与前端文档助手。",
            agent_client_enabled=True, knowledge_enabled=knowledge, knowledge_top_k=5, knowledge_max_docs=4,
        )
    info = {"kb_chunks": 0, "kb_documents": 0, "kb_embedder": None, "kb_ingest_seconds": None}
    if want_kb:
        kb = given or KnowledgeBase.objects.filter(project=project, name=KB_NAME).first()
        if kb is None:
            if embedder == "hashing":
                model = (EmbeddingModel.objects.filter(name=EMBEDDERS["hashing"]).first()
                         or services.embedding_model_register(name=EMBEDDERS["hashing"], provider="hashing",
                                                              dimension=512))
            else:
                model = EmbeddingModel.objects.get(name=EMBEDDERS[embedder])
            kb = services.knowledge_base_create(project=project, name=KB_NAME, embedding_model=model,
                                                embedding_dim=model.dimension, chunk_strategy=CHUNKING,
                                                require_confirmation=False)
        services.route_knowledge_bind(route=routes[KB_ROUTE], knowledge_base=kb)
        # The route reads this KB alone: one bound by an earlier run (`--kb` another KB of the
        # project) would be searched too, and its time counted as this KB's.
        for other in KnowledgeBase.objects.filter(route_bindings__route=routes[KB_ROUTE]).exclude(pk=kb.pk):
            services.route_knowledge_unbind(route=routes[KB_ROUTE], knowledge_base=other)

        def children() -> int:
            return Chunk.objects.filter(generation__knowledge_base=kb, generation__status="active",
                                        kind=Chunk.Kind.CHILD).count()

        have = children()
        if have < kb_chunks and given is None:
            started = time.perf_counter()
            known = set(kb.documents.values_list("filename", flat=True))
            settings.KNOWLEDGE_UPLOAD_MAX_FILES = 10_000
            for path in corpus_files():
                if have >= kb_chunks:
                    break
                name = f"{path.parent.parent.name}-{path.name}"[:255]
                if name in known:
                    continue
                (document,) = services.document_upload(kb=kb, files=[SimpleUploadedFile(name, path.read_bytes())])
                ingest.document_ingest(document_id=document.pk)
                have = children()
                print(f"  ingested {name}: {have} chunks", file=sys.stderr)
            info["kb_ingest_seconds"] = round(time.perf_counter() - started, 1)
        info.update(kb_chunks=children(), kb_documents=kb.documents.filter(status="completed").count(),
                    kb_embedder=f"{kb.embedding_model.name} ({kb.embedding_model.dimension})")

    app_id = "bench-turns" if given is None else f"bench-turns-{project.pk.hex[:12]}"
    client = AgentClient.objects.filter(app_id=app_id).first()
    if client is None:
        client, _ = agent_client_create(project=project, app_id=app_id, name="Bench turns",
                                        allowed_routes=[PLAIN_ROUTE, KB_ROUTE],
                                        agent_authorize_url="https://bench.example.com/authorize")
    verifier = base64.urlsafe_b64encode(secrets.token_bytes(48)).rstrip(b"=").decode()
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    authorization = authorization_create(
        client_app_id=client.app_id, redirect_uri="http://127.0.0.1:9/callback", state="bench-state-1234",
        requested_routes=[PLAIN_ROUTE, KB_ROUTE], device_label="bench", code_challenge=challenge,
        requester_ip=requester_ip,
    )
    redirect = authorization_approve(client=client, authorization_id=authorization.pk,
                                     principal={"id": "bench-user", "roles": []},
                                     on_behalf_of=f"bench-{uuid.uuid4().hex[:8]}@example.com",
                                     allowed_routes=[PLAIN_ROUTE, KB_ROUTE])
    code = parse_qs(urlsplit(redirect).query)["code"][0]
    issued = code_exchange(client_app_id=client.app_id, code=code, redirect_uri=authorization.redirect_uri,
                           code_verifier=verifier)
    return {"token": issued.access_token, **info}


def post(base: str, path: str, body: dict, token: str) -> tuple[int, dict, float]:
    parts = urlsplit(base)
    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    started = time.perf_counter()
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        connection.request("POST", path, body=data, headers={
            "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        response = connection.getresponse()
        payload = response.read()
    finally:
        connection.close()
    elapsed = (time.perf_counter() - started) * 1000
    return response.status, json.loads(payload or b"{}"), elapsed


def drive(*, base: str, token: str, route: str, clients: int, turns: int, queries: list[str]) -> dict:
    tag = uuid.uuid4().hex[:8]
    series: dict[str, list[float]] = {"turn": [], "complete": [], "replay": []}
    failures: list[str] = []
    context_bytes: list[int] = []
    knowledge_entries: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients)

    def client(index: int) -> None:
        conversation = f"bench-{tag}-{index}"
        barrier.wait()
        for n in range(turns):
            query = queries[(index * turns + n) % len(queries)]
            body = {"client_conversation_id": conversation, "client_turn_id": f"t{n}",
                    "user_message_id": f"u{n}", "user_input": f"{query}是怎么规定的？"}
            status, answer, turn_ms = post(base, f"/agent-api/v1/workspaces/{route}/turns", body, token)
            if status != 200:
                with lock:
                    failures.append(f"turn {status} {answer.get('error')}")
                continue
            status, done, complete_ms = post(base, f"/agent-api/v1/runs/{answer['run_id']}/complete",
                                             {"assistant_message_id": f"a{n}", "status": "completed",
                                              "content": ANSWER}, token)
            replay_ms = None
            if n % 5 == 4:
                replay_status, _, replay_ms = post(base, f"/agent-api/v1/workspaces/{route}/turns", body, token)
                if replay_status != 200:
                    with lock:
                        failures.append(f"replay {replay_status}")
            size = len(json.dumps(answer["context"], ensure_ascii=False, separators=(",", ":")).encode())
            with lock:
                series["turn"].append(turn_ms)
                context_bytes.append(size)
                knowledge_entries.append(len(answer["context"]["knowledge"]))
                if status == 200:
                    series["complete"].append(complete_ms)
                else:
                    failures.append(f"complete {status} {done.get('error')}")
                if replay_ms is not None:
                    series["replay"].append(replay_ms)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    requests = sum(len(values) for values in series.values())
    return {
        "clients": clients,
        "seconds": round(seconds, 2),
        "requests_per_s": round(requests / seconds, 1),
        "turns_per_s": round(len(series["turn"]) / seconds, 1),
        **{name: percentiles(values) for name, values in series.items()},
        "context_bytes_median": int(statistics.median(context_bytes)) if context_bytes else 0,
        "knowledge_entries_mean": round(statistics.mean(knowledge_entries), 2) if knowledge_entries else 0,
        "failures": failures[:5],
        "failure_count": len(failures),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", default="http://127.0.0.1:8011")
    parser.add_argument("--clients", default="1,4,8")
    parser.add_argument("--turns", type=int, default=40, help="turns per client (each also completed)")
    parser.add_argument("--mode", default="plain,inline", help="plain (knowledge off) and/or inline")
    parser.add_argument("--kb-chunks", type=int, default=10_000)
    parser.add_argument("--embedder", choices=sorted(EMBEDDERS), default="use")
    parser.add_argument("--warmup", type=int, default=5, help="untimed turns first (loads the embedder)")
    args = parser.parse_args()
    modes = [mode.strip() for mode in args.mode.split(",") if mode.strip()]
    django_setup()
    info = setup(kb_chunks=args.kb_chunks, embedder=args.embedder, want_kb="inline" in modes)
    token = info.pop("token")
    print(json.dumps({"setup": info}, ensure_ascii=False))
    queries = corpus_queries(2000)
    print(f"{'mode':<7} {'K':>3} {'req/s':>6} {'turns/s':>7} {'turn p50':>8} {'p95':>7} {'p99':>7} "
          f"{'compl p50':>9} {'p95':>6} {'replay p50':>10} {'p95':>6} {'ctx B':>6} {'kn':>4} {'fail':>4}")
    for mode in modes:
        route = KB_ROUTE if mode == "inline" else PLAIN_ROUTE
        drive(base=args.base_url, token=token, route=route, clients=1, turns=args.warmup, queries=queries[::-1])
        for clients in [int(k) for k in args.clients.split(",")]:
            result = drive(base=args.base_url, token=token, route=route, clients=clients, turns=args.turns,
                           queries=queries)
            turn, complete, replay = result["turn"], result["complete"], result["replay"]
            print(f"{mode:<7} {clients:>3} {result['requests_per_s']:>6} {result['turns_per_s']:>7} "
                  f"{turn.get('p50', '-'):>8} {turn.get('p95', '-'):>7} {turn.get('p99', '-'):>7} "
                  f"{complete.get('p50', '-'):>9} {complete.get('p95', '-'):>6} "
                  f"{replay.get('p50', '-'):>10} {replay.get('p95', '-'):>6} "
                  f"{result['context_bytes_median']:>6} {result['knowledge_entries_mean']:>4} "
                  f"{result['failure_count']:>4}")
            print(json.dumps({"mode": mode, **result}, ensure_ascii=False), file=sys.stderr)


if __name__ == "__main__":
    main()
