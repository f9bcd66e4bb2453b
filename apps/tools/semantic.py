"""Semantic capability search: an embedding index of the compiled tool text, and its ranking.

Each tool has one ``ToolEmbedding`` per embedder (``settings.TOOL_EMBEDDER``), built in the
background (``tools.index_rebuild``) after a provider is created or re-imported. A row is fresh
when its ``text_sha256`` is the hash of the text the tool would be indexed with today and its
``model`` is the configured embedder; while any business tool of a surface has no fresh row, or
the embedder cannot embed the query, the whole search keeps the deterministic lexical order.

The index text is written for short tool texts whose words are not the users' words: the
operationId split into words (``listRepoForks`` → ``list repo forks``), summary, description,
tags, the path's literal segments, ACC ``when_to_use``, and the parameters' names and
descriptions. e5 models get their ``passage:`` / ``query:`` prefixes from the embedder itself.

Ranking fuses two rank lists with reciprocal-rank fusion: the semantic order (cosine similarity,
computed by pgvector) and a keyword order (FUSION_KEYWORDS: the contract's lexical order, or BM25
over the same index texts) counted only over the tools it found some evidence for, since the rest
of a keyword order is alphabetical. Ties go by name. The weights were chosen on one half of
bench/capability_quality.py's proxy query set; its other half reports the figures.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from celery import current_app
from django.conf import settings
from django.db import transaction

from apps.knowledge.pipeline.embedders import Embedder, EmbeddingFailed, embedder_class
from apps.knowledge.pipeline.terms import keyword_terms

from .models import Tool, ToolEmbedding, ToolProvider

if TYPE_CHECKING:
    from .surface import Surface

logger = logging.getLogger("bailinghub.tools")

INDEX_REBUILD = "tools.index_rebuild"
SEMANTIC = "semantic"
# The words that matter come first; a local model's cost grows with the text faster than what it
# learns from parameter prose (about 100 tokens keep a 2,000-tool rebuild in minutes on 2 cores).
INDEX_TEXT_MAX_CHARS = 400
MAX_PARAMETERS = 12
# Reciprocal-rank fusion: weight of the lexical list and the rank offset. Chosen on the tuning half
# of bench/capability_quality.py's query set (its held-out half reports the figures).
# On the 2,064-tool proxy the tune half chose the contract's order at weight 0.1, k 60 (nDCG@10
# 0.413 against 0.383 for the semantic order alone and 0.399 for BM25 fused at its best).
FUSION_KEYWORDS = "tiers"  # the keyword channel: "tiers" (the contract's order) or "bm25" over the index text
FUSION_LEXICAL_WEIGHT = 0.1
FUSION_K = 60

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NON_WORD = re.compile(r"[\W_]+")
_SPACES = re.compile(r"\s+")


def name_words(name: str) -> str:
    """``listRepoForks`` / ``list_repo_forks`` / ``repos/list-forks`` → ``list repo forks``."""
    return _SPACES.sub(" ", _NON_WORD.sub(" ", _CAMEL.sub(" ", name))).strip().lower()


def _clean(text: Any) -> str:
    return _SPACES.sub(" ", text).strip() if isinstance(text, str) else ""


def _sentence(text: str) -> str:
    return text if not text or text[-1] in ".!?。" else f"{text}."


def index_text(compiled: dict[str, Any]) -> str:
    """The text a compiled tool is embedded with (bounded, deterministic)."""
    parts = [_sentence(name_words(str(compiled.get("name", ""))))]
    summary = _clean(compiled.get("summary"))
    description = _clean(compiled.get("description"))
    for text in dict.fromkeys(filter(None, (summary, description))):
        parts.append(_sentence(text))
    when = _clean(compiled.get("when_to_use"))
    if when:
        parts.append(_sentence(when))
    tags = [name_words(str(tag)) for tag in compiled.get("tags") or [] if str(tag).strip()]
    if tags:
        parts.append(f"Topics: {', '.join(tags)}.")
    segments = [name_words(segment) for segment in str(compiled.get("path", "")).split("/")
                if segment and not segment.startswith("{")]
    if segments:
        parts.append(f"Path: {' '.join(segments)}.")
    properties = (compiled.get("input_schema") or {}).get("properties") or {}
    parameters = []
    for key in list(properties)[:MAX_PARAMETERS]:
        schema = properties[key] if isinstance(properties[key], dict) else {}
        about = _clean(schema.get("description"))[:48]
        parameters.append(f"{name_words(key)} ({about})" if about else name_words(key))
    if parameters:
        parts.append(f"Parameters: {'; '.join(parameters)}.")
    return " ".join(parts)[:INDEX_TEXT_MAX_CHARS]


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def embedder_config() -> dict[str, Any]:
    config: dict[str, Any] = dict(getattr(settings, "TOOL_EMBEDDER", None) or {})
    return {"provider": str(config.get("provider", "local")), "name": str(config.get("name", "multilingual-e5-small")),
            "dimension": int(config.get("dimension", 384)), "options": dict(config.get("options") or {})}


def embedder_label() -> str:
    """The ``ToolEmbedding.model`` of the configured embedder: a change of any part is a new index."""
    config = embedder_config()
    return f"{config['provider']}:{config['name']}:{config['dimension']}"


_embedders: dict[str, Embedder] = {}
_embedders_lock = threading.Lock()


def tool_embedder() -> Embedder:
    config = embedder_config()
    key = f"{embedder_label()}:{sorted(config['options'].items())!r}"
    with _embedders_lock:
        embedder = _embedders.get(key)
        if embedder is None:
            embedder = embedder_class(config["provider"])(name=config["name"], dimension=config["dimension"],
                                                          options=config["options"])
            _embedders[key] = embedder
    return embedder


def index_send(provider_id: Any) -> None:
    """After commit: (re)build the index of a provider's tools in the background. A lost message
    only leaves the search lexical until the next send; nothing else depends on it."""

    def send() -> None:
        # Nobody reads its result: see apps.knowledge.dispatch._send on ignore_result.
        current_app.send_task(INDEX_REBUILD, args=[str(provider_id)], ignore_result=True)

    transaction.on_commit(send, robust=True)


def index_rebuild(*, provider_id: Any) -> dict[str, int]:
    """Embed every tool of the provider whose index row is missing or stale for the configured
    embedder, and drop its rows of other embedders. Safe to run twice or concurrently (upserts by
    tool and model); a provider deleted meanwhile is nothing to do."""
    label = embedder_label()
    tools = list(Tool.objects.filter(provider_id=provider_id).order_by("position").values_list("id", "compiled"))
    texts = {pk: index_text(compiled) for pk, compiled in tools}
    hashes = {pk: text_sha256(text) for pk, text in texts.items()}
    fresh = set(ToolEmbedding.objects.filter(tool_id__in=hashes, model=label)
                .values_list("tool_id", "text_sha256"))
    todo = [pk for pk in hashes if (pk, hashes[pk]) not in fresh]
    embedder = tool_embedder()
    built = 0
    for start in range(0, len(todo), embedder.batch_size):
        batch = todo[start:start + embedder.batch_size]
        vectors = embedder.embed_documents([texts[pk] for pk in batch])
        with transaction.atomic():
            # The provider's row, locked as its delete and re-import lock it: the tools read here stay
            # until these rows are written (a delete between the two failed on the foreign key).
            if ToolProvider.objects.select_for_update(no_key=True).filter(pk=provider_id).first() is None:
                break  # deleted meanwhile: nothing to do
            existing = set(Tool.objects.filter(pk__in=batch).values_list("pk", flat=True))
            ToolEmbedding.objects.bulk_create(
                [ToolEmbedding(tool_id=pk, model=label, text_sha256=hashes[pk], embedding=vector)
                 for pk, vector in zip(batch, vectors, strict=True) if pk in existing],
                update_conflicts=True, unique_fields=["tool", "model"], update_fields=["text_sha256", "embedding",
                                                                                      "updated_at"],
            )
        built += len(existing)
    dropped, _ = ToolEmbedding.objects.filter(tool_id__in=hashes).exclude(model=label).delete()
    return {"tools": len(tools), "embedded": built, "dropped": dropped}


# Query vectors by (embedder, text): a turn and the searches of its run ask with the same words.
_QUERY_CACHE: OrderedDict[tuple[str, str], list[float]] = OrderedDict()
_QUERY_CACHE_MAX = 2048
_query_lock = threading.Lock()
# Expected index hashes of a surface, by revision and tool ids: the revision covers the spec's
# SHA-256 of every source and every tool's projection, so one revision has the same index texts.
_EXPECTED: OrderedDict[tuple[str, tuple[Any, ...]], dict[Any, str]] = OrderedDict()
_EXPECTED_MAX = 64
_FRESH: OrderedDict[tuple[str, tuple[str, tuple[Any, ...]]], bool] = OrderedDict()
# Built-in tools are not rows: their vectors are computed in-process from their fixed text.
_BUILTIN: dict[tuple[str, str], list[float]] = {}


def _query_vector(label: str, query: str) -> list[float]:
    key = (label, query)
    with _query_lock:
        vector = _QUERY_CACHE.get(key)
        if vector is not None:
            _QUERY_CACHE.move_to_end(key)
            return vector
    vector = tool_embedder().embed_query(query)
    with _query_lock:
        _QUERY_CACHE[key] = vector
        while len(_QUERY_CACHE) > _QUERY_CACHE_MAX:
            _QUERY_CACHE.popitem(last=False)
    return vector


def _surface_key(surface: Surface) -> tuple[str, tuple[Any, ...]]:
    # The revision does not cover row ids: a provider deleted and imported again from the same
    # spec has the same revision and other tools.
    return surface.revision, tuple(tool.tool.id for tool in surface.tools if tool.tool is not None)


def _expected(surface: Surface) -> dict[Any, str]:
    key = _surface_key(surface)
    expected = _EXPECTED.get(key)
    if expected is None:
        expected = {tool.tool.id: text_sha256(index_text(tool.tool.compiled))
                    for tool in surface.tools if tool.tool is not None}
        _EXPECTED[key] = expected
        while len(_EXPECTED) > _EXPECTED_MAX:
            _EXPECTED.popitem(last=False)
    return expected


def _builtin_vector(label: str, definition: dict[str, Any]) -> list[float]:
    text = index_text(definition)
    key = (label, text_sha256(text))
    vector = _BUILTIN.get(key)
    if vector is None:
        vector = tool_embedder().embed_documents([text])[0]
        _BUILTIN[key] = vector
    return vector


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = (sum(x * x for x in a) ** 0.5) * (sum(y * y for y in b) ** 0.5)
    return dot / norm if norm else 0.0


def _index_fresh(surface: Surface, label: str, expected: dict[Any, str]) -> bool:
    # Fresh stays fresh for one revision: its texts are fixed, and rows only change by a rebuild
    # writing the same hash. So once seen fresh, a revision is not checked again in this process.
    key = (label, _surface_key(surface))
    if key in _FRESH:
        return True
    found = set(ToolEmbedding.objects.filter(model=label, tool_id__in=list(expected))
                .values_list("tool_id", "text_sha256"))
    if len(found & set(expected.items())) != len(expected):
        return False
    _FRESH[key] = True
    while len(_FRESH) > _EXPECTED_MAX:
        _FRESH.popitem(last=False)
    return True


def similarities(surface: Surface, query: str) -> list[float] | None:
    """Cosine similarity of ``query`` to each tool of the surface (in its order), or ``None`` when
    the search must stay lexical: an empty query or surface, a business tool without a fresh index
    row, or an embedder that cannot embed."""
    if not query or not surface.tools:
        return None
    from pgvector.django import CosineDistance

    label = embedder_label()
    expected = _expected(surface)
    if expected and not _index_fresh(surface, label, expected):
        return None
    try:
        vector = _query_vector(label, query)
        builtin = {tool.name: _builtin_vector(label, tool.definition) for tool in surface.tools if tool.tool is None}
    except (EmbeddingFailed, ImportError, OSError, RuntimeError, ValueError):
        logger.warning("Tool search embedder %s unavailable; the search stays lexical.", label, exc_info=True)
        return None
    scores: dict[Any, float] = {}
    if expected:
        providers = {tool.tool.provider_id for tool in surface.tools if tool.tool is not None}
        rows = (ToolEmbedding.objects.filter(model=label, tool__provider_id__in=providers)
                .annotate(distance=CosineDistance("embedding", vector))
                .values_list("tool_id", "text_sha256", "distance"))
        for pk, sha, distance in rows:
            if expected.get(pk) == sha:
                scores[pk] = 1.0 - float(distance)
        if len(scores) != len(expected):
            return None  # a rebuild replaced rows since the check (another embedder): stay lexical
    return [scores[tool.tool.id] if tool.tool is not None else _cosine(vector, builtin[tool.name])
            for tool in surface.tools]


class KeywordIndex:
    """Okapi BM25 (k1 1.2, b 0.75) over the index texts of a surface, with the knowledge index's
    stemmed terms (CJK as characters and bigrams): the keyword channel fusion may use instead of
    the contract's tiered order, which ranks thin texts by substring tiers."""

    K1 = 1.2
    B = 0.75

    def __init__(self, texts: Sequence[str]) -> None:
        self.size = len(texts)
        postings: dict[str, list[tuple[int, int]]] = {}
        lengths = []
        for index, text in enumerate(texts):
            terms = keyword_terms(text)
            lengths.append(len(terms))
            counts: dict[str, int] = {}
            for term in terms:
                counts[term] = counts.get(term, 0) + 1
            for term, count in counts.items():
                postings.setdefault(term, []).append((index, count))
        average = sum(lengths) / max(1, len(lengths))
        self.norms = [self.K1 * (1 - self.B + self.B * length / (average or 1)) for length in lengths]
        self.postings = postings

    def scores(self, query: str) -> list[float]:
        scores = [0.0] * self.size
        for term in dict.fromkeys(keyword_terms(query)):
            hits = self.postings.get(term)
            if not hits:
                continue
            idf = math.log(1 + (self.size - len(hits) + 0.5) / (len(hits) + 0.5))
            for index, count in hits:
                scores[index] += idf * count * (self.K1 + 1) / (count + self.norms[index])
        return scores

    def ranking(self, query: str, names: Sequence[str]) -> tuple[list[int], int]:
        """Indexes by score then name, and how many scored above zero."""
        scores = self.scores(query)
        order = sorted(range(self.size), key=lambda i: (-scores[i], names[i]))
        return order, sum(1 for score in scores if score > 0)


_KEYWORDS: OrderedDict[tuple[str, tuple[Any, ...]], KeywordIndex] = OrderedDict()


def keyword_ranking(surface: Surface, query: str, *, tiers: tuple[list[int], int]) -> tuple[list[int], int]:
    """The keyword channel of the fusion for ``surface``: the contract's order (``tiers``, already
    computed) or BM25 over the index texts, as FUSION_KEYWORDS says."""
    if FUSION_KEYWORDS != "bm25":
        return tiers
    key = _surface_key(surface)
    index = _KEYWORDS.get(key)
    if index is None:
        index = KeywordIndex([index_text(tool.tool.compiled if tool.tool is not None else tool.definition)
                              for tool in surface.tools])
        _KEYWORDS[key] = index
        while len(_KEYWORDS) > _EXPECTED_MAX:
            _KEYWORDS.popitem(last=False)
    return index.ranking(query, [tool.name for tool in surface.tools])


def fused_order(*, names: Sequence[str], lexical: Sequence[int], lexical_matched: int,
                semantic: Sequence[float], lexical_weight: float = FUSION_LEXICAL_WEIGHT,
                k: int = FUSION_K) -> list[int]:
    """Indexes in the fused order: reciprocal-rank fusion of the semantic order (by similarity,
    then name) and the first ``lexical_matched`` entries of the lexical order; ties by name."""
    semantic_order = sorted(range(len(names)), key=lambda i: (-semantic[i], names[i]))
    score = [0.0] * len(names)
    for rank, index in enumerate(semantic_order):
        score[index] += (1 - lexical_weight) / (k + rank + 1)
    for rank, index in enumerate(lexical[:lexical_matched]):
        score[index] += lexical_weight / (k + rank + 1)
    return sorted(range(len(names)), key=lambda i: (-score[i], names[i]))
