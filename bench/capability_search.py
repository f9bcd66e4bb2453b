"""Capability search over a large surface: one provider of N compiled read-only operations on one route.

    python -m bailinghub.embedded exec -- .venv/bin/python bench/capability_search.py [--tools 1000] [--queries 200]

Set-up goes through the services in a scratch database: a generated OpenAPI 3.0 spec of N GET
operations (operationIds, summaries and descriptions drawn from a fixed business vocabulary,
seeded), compiled into a provider; a route allowing every tool, direct tools on. Then, per query
(English and Chinese, seeded): the surface selector (the database reads and the definitions, as
every request does) and the lexical order over the whole surface, as the search endpoint runs
them. Prints p50/p95/p99 in milliseconds for the surface, the ranking and both together.

Then the real endpoint path: an agent client and a session made through the agent_auth services,
and ``POST /agent-api/v1/workspaces/bench-tools/capabilities/search`` through Django's test
client (URL routing, middleware, token check, route checks, serializer, view, renderer — no
socket), first while the provider has no tool index (``lexical``), then after the index is built
(``semantic``: query embedding by TOOL_EMBEDDER, cosine by pgvector, fusion). Queries are fresh
per phase (semantic: each distinct query's first embedding is paid; repeats hit the query cache,
counted apart). Figures, never assertions.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import django_setup, peak_rss_mib, percentiles, scratch_database

NOUNS = ["order", "invoice", "customer", "product", "stock", "refund", "shipment", "coupon", "payment", "store",
         "employee", "ticket", "review", "address", "cart", "warehouse", "supplier", "price", "report", "account"]
VERBS = ["get", "list", "search", "lookup", "status", "history", "summary", "detail", "count", "export"]
ZH = {"order": "订单", "invoice": "发票", "customer": "客户", "product": "商品", "stock": "库存", "refund": "退款",
      "shipment": "物流", "coupon": "优惠券", "payment": "支付", "store": "门店"}


def spec_of(n: int, rng: random.Random) -> bytes:
    paths = {}
    for i in range(n):
        noun, verb, other = rng.choice(NOUNS), rng.choice(VERBS), rng.choice(NOUNS)
        summary = f"{verb.title()} {noun} {other} records"
        description = f"Returns the {noun}'s {verb} for one {other}." + (f" {ZH[noun]}查询。" if noun in ZH else "")
        paths[f"/{noun}/{i}"] = {"get": {
            "operationId": f"{noun}_{other}_{verb}_{i}", "summary": summary, "description": description,
            "parameters": [{"name": f"{noun}_id", "in": "query", "schema": {"type": "string"}}],
            "x-agent-capability": {"version": 1, "scope": f"{noun}.read", "execution": {"readonly": True}},
            "responses": {"200": {"description": "ok"}},
        }}
    return json.dumps({"openapi": "3.0.3", "info": {"title": "bench", "version": "1"}, "paths": paths}).encode()


def queries_of(count: int, rng: random.Random) -> list[str]:
    out = []
    for _ in range(count):
        if rng.random() < 0.3:
            out.append(f"帮我查一下{ZH[rng.choice(list(ZH))]}的情况")
        else:
            out.append(f"{rng.choice(VERBS)} the {rng.choice(NOUNS)} of my {rng.choice(NOUNS)}")
    return out


def session_token(project, route_key: str) -> str:
    import base64
    import hashlib
    import secrets
    from urllib.parse import parse_qs, urlsplit

    from apps.agent_auth.models import AgentClient
    from apps.agent_auth.services import agent_client_create, authorization_approve, authorization_create, code_exchange

    client = AgentClient.objects.filter(app_id="bench-tools").first()
    if client is None:
        client, _ = agent_client_create(project=project, app_id="bench-tools", name="Bench tools",
                                        allowed_routes=[route_key],
                                        agent_authorize_url="https://bench.example.com/authorize")
    verifier = base64.urlsafe_b64encode(secrets.token_bytes(48)).rstrip(b"=").decode()
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    authorization = authorization_create(
        client_app_id=client.app_id, redirect_uri="http://127.0.0.1:9/callback", state="bench-state-1234",
        requested_routes=[route_key], device_label="bench", code_challenge=challenge, requester_ip="127.0.0.1",
    )
    redirect = authorization_approve(client=client, authorization_id=authorization.pk,
                                     principal={"id": "bench-user", "roles": []}, on_behalf_of="bench@example.com",
                                     allowed_routes=[route_key])
    code = parse_qs(urlsplit(redirect).query)["code"][0]
    return code_exchange(client_app_id=client.app_id, code=code, redirect_uri=authorization.redirect_uri,
                         code_verifier=verifier).access_token


def endpoint_phases(*, project, route, provider, queries: list[str], more: list[str]) -> dict:
    from django.test import Client

    from apps.tools.semantic import _QUERY_CACHE, embedder_label, index_rebuild

    client = Client(HTTP_AUTHORIZATION=f"Bearer {session_token(project, route.key)}")
    path = f"/agent-api/v1/workspaces/{route.key}/capabilities/search"

    def phase(batch: list[str]) -> dict:
        first_ms, repeat_ms, rankings = [], [], set()
        seen: set[str] = set()
        for query in batch:
            t0 = time.perf_counter()
            response = client.post(path, {"query": query, "limit": 8}, content_type="application/json")
            elapsed = (time.perf_counter() - t0) * 1000
            assert response.status_code == 200, response.content[:300]
            rankings.add(response.json()["discovery"]["ranking"])
            (repeat_ms if query in seen else first_ms).append(elapsed)
            seen.add(query)
        out = {"ranking": sorted(rankings), "search_ms": percentiles(first_ms + repeat_ms),
               "distinct_queries": len(first_ms)}
        if repeat_ms:
            out["repeated_query_ms"] = percentiles(repeat_ms)
        return out

    phase(queries[:5])  # warm-up: imports, first embedder load, connection
    lexical = phase(queries)
    print(json.dumps({"lexical": lexical}), file=sys.stderr)
    started = time.perf_counter()
    built = index_rebuild(provider_id=provider.pk)
    index_s = time.perf_counter() - started
    _QUERY_CACHE.clear()
    # A new session: the first one's access token may have expired while the index was built.
    client = Client(HTTP_AUTHORIZATION=f"Bearer {session_token(project, route.key)}")
    semantic = phase(more)
    return {"path": path, "lexical": lexical, "semantic": semantic,
            "index_build": {**built, "seconds": round(index_s, 1), "embedder": embedder_label()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    django_setup()
    from django.conf import settings

    from apps.tools.catalog import capability_search
    from apps.tools.route_tools import SourceSpec, route_tools_set
    from apps.tools.services import provider_create
    from apps.tools.surface import route_surface

    if not getattr(settings, "TOOL_SECRET_KEYS", None):
        from cryptography.fernet import Fernet
        settings.TOOL_SECRET_KEYS = [Fernet.generate_key().decode()]
    rng = random.Random(7)
    with scratch_database("bench_capability_search"):
        from apps.projects.models import Project
        from apps.routes.services import route_create

        project = Project.objects.create(name="bench-tools", slug="bench-tools")
        route = route_create(project=project, key="bench-tools", name="Bench tools", tools_direct_enabled=True,
                             agent_client_enabled=True)
        started = time.perf_counter()
        imported = provider_create(project=project, name="bench", base_url="http://127.0.0.1:9/bench",
                                   secret="bench-secret", spec=spec_of(args.tools, rng))  # noqa: S106
        compile_s = time.perf_counter() - started
        names = [tool.name for tool in imported.result.tools]
        route_tools_set(route=route, sources=[SourceSpec(provider=imported.provider, allowed_tools=names)])
        surface_ms, rank_ms, total_ms = [], [], []
        for query in queries_of(args.queries, rng):
            t0 = time.perf_counter()
            surface = route_surface(route=route, session=None)
            t1 = time.perf_counter()
            answer = capability_search(surface=surface, query=query, limit=8)
            t2 = time.perf_counter()
            surface_ms.append((t1 - t0) * 1000)
            rank_ms.append((t2 - t1) * 1000)
            total_ms.append((t2 - t0) * 1000)
            assert answer["discovery"]["authorized_total"] == len(names)
        endpoint = endpoint_phases(project=project, route=route, provider=imported.provider,
                                   queries=queries_of(args.queries, rng), more=queries_of(args.queries, rng))
        print(json.dumps({
            "tools": len(names), "queries": args.queries, "compile_and_import_s": round(compile_s, 2),
            "surface_ms": percentiles(surface_ms), "lexical_rank_ms": percentiles(rank_ms),
            "search_ms": percentiles(total_ms), "endpoint": endpoint, "peak_rss_mib": round(peak_rss_mib(), 1),
        }, indent=2))


if __name__ == "__main__":
    main()
