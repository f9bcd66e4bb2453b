"""An optional reranker over a KB's fused candidates: any HTTP rerank API of the common shape,
`POST {base_url}/rerank` with `{model, query, documents, top_n}` answering
`{"results": [{"index", "relevance_score"}, ...]}`.

A KB turns it on with a base URL and a model (KnowledgeBase.rerank_*); the key is read at call
time from the environment variable the KB names, so it is never stored nor shown. The call has a
bounded timeout, and goes to a public address, or to another one only inside the deployment's
KNOWLEDGE_RERANK_ALLOWED_NETWORKS (apps.core.outbound.pinned): an operator's base URL cannot make
searches probe the hub's own network. Whatever goes wrong (no key, a timeout, a refused or
malformed answer), the search keeps the fused order and its trace says so: a reranker never fails
a search. Each call, answered or not, writes one CostRecord (`call_kind: "rerank"`), and a failing
record write never fails the search either.
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.db import DatabaseError, transaction

from apps.core import outbound
from apps.core.outbound import AddressPolicy, AddressRefused, deadline_client
from apps.core.outbound import deadline as outbound_deadline
from apps.knowledge.models import Chunk, CostRecord, KnowledgeBase
from apps.knowledge.pipeline.index import embedding_text

logger = logging.getLogger("bailinghub.knowledge")

# The key is read from an environment variable the KB names, and only from one named RERANK_…:
# the deployment puts a reranker's key there. Any other variable of the server (SECRET_KEY,
# DATABASE_URL, TOOL_SECRET_KEYS) would otherwise go, as a bearer token, to whatever base URL a
# project's operator typed.
ENV_NAME = re.compile(r"RERANK_[A-Z0-9_]{1,93}")
CANDIDATES_MAX = 100
TIMEOUT_MS_MIN, TIMEOUT_MS_MAX = 100, 10_000
# A rerank answer is small (an index and a score per document); anything far larger is not one.
RESPONSE_MAX_BYTES = 1024 * 1024
# Each document sent is cut to this many characters: rerankers score passages, not books.
DOCUMENT_MAX_CHARS = 4000


class RerankConfigInvalid(ValueError):
    def __init__(self, fields: dict[str, list[str]]):
        super().__init__("; ".join(f"{name}: {' '.join(messages)}" for name, messages in fields.items()))
        self.fields = fields


def reranker_validate(value: Any) -> dict[str, Any]:
    """A reranker setting as the builder API takes it — null (off) or {base_url, model,
    api_key_env?, candidates?, timeout_ms?} — checked and returned as KnowledgeBase field values."""
    off = {"rerank_base_url": "", "rerank_model": "", "rerank_api_key_env": "", "rerank_candidates": 20,
           "rerank_timeout_ms": 3000}
    if value is None:
        return off
    if not isinstance(value, dict):
        raise RerankConfigInvalid({"reranker": ["An object or null is required."]})
    errors: dict[str, list[str]] = {}
    unknown = sorted(set(value) - {"base_url", "model", "api_key_env", "candidates", "timeout_ms"})
    for name in unknown:
        errors[f"reranker.{name}"] = ["Unknown field."]
    base_url = value.get("base_url")
    if not isinstance(base_url, str) or not base_url_valid(base_url):
        errors["reranker.base_url"] = ["An http(s) URL without credentials, query or fragment is required "
                                       "(at most 500 characters)."]
    elif base_url_refused(base_url):
        errors["reranker.base_url"] = [ADDRESS_REFUSED]
    model = value.get("model")
    if not isinstance(model, str) or not model.strip() or len(model) > 200 or not model.isprintable():
        errors["reranker.model"] = ["A model name of 1–200 printable characters is required."]
    key_env = value.get("api_key_env", "")
    if not isinstance(key_env, str) or (key_env and not ENV_NAME.fullmatch(key_env)):
        errors["reranker.api_key_env"] = ["The name of an environment variable that starts with RERANK_ "
                                          "(A–Z, 0–9, _), such as RERANK_API_KEY, is required; never the key "
                                          "itself. Only those variables are ever sent to a reranker."]
    candidates = value.get("candidates", 20)
    if isinstance(candidates, bool) or not isinstance(candidates, int) or not 1 <= candidates <= CANDIDATES_MAX:
        errors["reranker.candidates"] = [f"An integer from 1 to {CANDIDATES_MAX} is required."]
    timeout_ms = value.get("timeout_ms", 3000)
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or not (
            TIMEOUT_MS_MIN <= timeout_ms <= TIMEOUT_MS_MAX):
        errors["reranker.timeout_ms"] = [f"An integer from {TIMEOUT_MS_MIN} to {TIMEOUT_MS_MAX} is required."]
    if errors or not isinstance(base_url, str) or not isinstance(model, str):
        raise RerankConfigInvalid(errors)
    return {"rerank_base_url": base_url.rstrip("/"), "rerank_model": model.strip(), "rerank_api_key_env": key_env,
            "rerank_candidates": candidates, "rerank_timeout_ms": timeout_ms}


def base_url_valid(url: str) -> bool:
    if len(url) > 500 or not url.isprintable() or any(ch.isspace() for ch in url):
        return False
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises on a malformed port
    except ValueError:
        return False
    return (parts.scheme in ("http", "https") and bool(parts.hostname) and not parts.username
            and not parts.password and not parts.query and not parts.fragment)


ADDRESS_REFUSED = ("The base URL's host resolves to a private, loopback, link-local or otherwise non-public "
                   "address: a reranker there is called only inside the deployment's "
                   "KNOWLEDGE_RERANK_ALLOWED_NETWORKS.")


def _policy() -> AddressPolicy:
    return AddressPolicy(public_only=True, allowed=settings.KNOWLEDGE_RERANK_ALLOWED_NETWORKS)


def base_url_refused(url: str) -> bool:
    """Whether the host of a (valid) base URL resolves now to an address a search would not call."""
    return outbound.url_refused(url, _policy())


@dataclass(frozen=True)
class RerankConfig:
    knowledge_base_id: Any
    base_url: str
    model: str
    api_key_env: str
    candidates: int
    timeout_ms: int

    @classmethod
    def of(cls, kb: KnowledgeBase) -> RerankConfig | None:
        if not kb.rerank_base_url or not kb.rerank_model:
            return None
        return cls(knowledge_base_id=kb.pk, base_url=kb.rerank_base_url, model=kb.rerank_model,
                   api_key_env=kb.rerank_api_key_env, candidates=kb.rerank_candidates,
                   timeout_ms=kb.rerank_timeout_ms)

    @property
    def public(self) -> dict[str, Any]:
        """What an operator may see: never the key, only the name of its variable."""
        return {"base_url": self.base_url, "model": self.model, "api_key_env": self.api_key_env or None,
                "candidates": self.candidates, "timeout_ms": self.timeout_ms}


class RerankFailed(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def _parse(payload: Any, *, count: int) -> list[tuple[int, float]]:
    results = payload.get("results") if isinstance(payload, dict) else None
    if not isinstance(results, list):
        raise RerankFailed("rerank_bad_response", "The reranker's answer has no results list.")
    scored: dict[int, float] = {}
    for item in results:
        index = item.get("index") if isinstance(item, dict) else None
        score = item.get("relevance_score") if isinstance(item, dict) else None
        if (isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count or index in scored
                or isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score)):
            raise RerankFailed("rerank_bad_response", "The reranker's answer has an invalid result.")
        scored[index] = float(score)
    return sorted(scored.items(), key=lambda pair: (-pair[1], pair[0]))


def rerank_call(*, config: RerankConfig, query: str, documents: Sequence[str]) -> tuple[list[tuple[int, float]],
                                                                                         dict[str, Any]]:
    """[(document index, relevance score)] best first, and the usage the provider reported."""
    headers = {"Content-Type": "application/json"}
    if config.api_key_env:
        if not ENV_NAME.fullmatch(config.api_key_env):  # saved before the RERANK_ rule
            raise RerankFailed("rerank_key_refused", f"The environment variable {config.api_key_env} may not be "
                               "sent to a reranker: name one that starts with RERANK_.")
        key = os.environ.get(config.api_key_env, "")
        if not key:
            raise RerankFailed("rerank_key_missing", f"The environment variable {config.api_key_env} is not set.")
        headers["Authorization"] = f"Bearer {key}"
    body = {"model": config.model, "query": query, "documents": list(documents), "top_n": len(documents)}
    timeout = httpx.Timeout(config.timeout_ms / 1000)
    deadline = time.monotonic() + config.timeout_ms / 1000
    try:
        target = outbound.pinned(f"{config.base_url}/rerank", _policy())
    except AddressRefused as exc:
        if exc.code == "unresolvable":
            raise RerankFailed("rerank_unreachable", "The reranker's host does not resolve.") from exc
        raise RerankFailed("rerank_address_refused", ADDRESS_REFUSED) from exc
    try:
        with outbound_deadline(deadline), deadline_client(timeout=timeout, follow_redirects=False) as client, \
                client.stream("POST", target.url, json=body, headers={**headers, **target.headers},
                              extensions=target.extensions) as response:
            if response.status_code != 200:
                raise RerankFailed("rerank_http_error", f"The reranker answered HTTP {response.status_code}.")
            data = bytearray()
            for piece in response.iter_bytes():
                data += piece
                if len(data) > RESPONSE_MAX_BYTES:
                    raise RerankFailed("rerank_bad_response", "The reranker's answer is too large.")
                if time.monotonic() > deadline:
                    raise RerankFailed("rerank_timeout", f"The reranker took over {config.timeout_ms} ms.")
    except httpx.TimeoutException as exc:
        raise RerankFailed("rerank_timeout", f"The reranker took over {config.timeout_ms} ms.") from exc
    except httpx.HTTPError as exc:
        raise RerankFailed("rerank_unreachable", f"The reranker could not be reached ({type(exc).__name__}).") from exc
    try:
        payload = httpx.Response(200, content=bytes(data)).json()
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past json's stack
        raise RerankFailed("rerank_bad_response", "The reranker's answer is not JSON.") from exc
    usage = payload.get("usage") or payload.get("meta") if isinstance(payload, dict) else None
    return _parse(payload, count=len(documents)), usage if isinstance(usage, dict) else {}


def _record(*, config: RerankConfig, route_id: Any, units: int, usage: dict, latency_ms: int,
            error_code: str) -> None:
    try:
        with transaction.atomic():
            CostRecord.objects.create(call_kind=CostRecord.CallKind.RERANK, knowledge_base_id=config.knowledge_base_id,
                                      route_id=route_id, model=config.model, units=units, usage=usage,
                                      latency_ms=latency_ms, ok=not error_code, error_code=error_code)
    except DatabaseError as exc:
        logger.warning("A rerank cost record was not written: %s", type(exc).__name__)


def rerank(ranked: list, *, query: str, config: RerankConfig, route_id: Any = None) -> tuple[list, dict[str, Any]]:
    """The candidates with the first `config.candidates` reordered by the reranker (each given its
    `rerank_score`), the rest after them in fused order; and the step for the trace. On failure,
    the fused order unchanged and the trace says why."""
    head = ranked[: config.candidates]
    step: dict[str, Any] = {"step": "rerank", "knowledge_base_id": str(config.knowledge_base_id),
                            "model": config.model, "candidates": len(head), "status": "ok", "error_code": None,
                            "message": None, "fallback": None, "latency_ms": 0.0}
    if not head:
        step["status"] = "skipped"
        return ranked, step
    rows = dict((cid, embedding_text(text=text, chapter_path=path)[:DOCUMENT_MAX_CHARS]) for cid, text, path in
                Chunk.objects.filter(id__in=[c.chunk_id for c in head]).values_list("id", "text", "chapter_path"))
    head = [c for c in head if c.chunk_id in rows]
    started = time.perf_counter()
    usage: dict[str, Any] = {}
    error_code = ""
    try:
        order, usage = rerank_call(config=config, query=query, documents=[rows[c.chunk_id] for c in head])
    except RerankFailed as exc:
        error_code = exc.code
        step.update(status="failed", error_code=exc.code, message=exc.message, fallback="fused_order")
        logger.warning("Reranking for knowledge base %s failed: %s", config.knowledge_base_id, exc.code)
    latency_ms = (time.perf_counter() - started) * 1000
    step["latency_ms"] = round(latency_ms, 2)
    _record(config=config, route_id=route_id, units=len(head), usage=usage, latency_ms=round(latency_ms),
            error_code=error_code)
    if error_code:
        return ranked, step
    reordered = []
    for index, score in order:
        head[index].rerank_score = score
        reordered.append(head[index])
    placed = {c.chunk_id for c in reordered}
    rest = [c for c in ranked if c.chunk_id not in placed]
    return reordered + rest, step
