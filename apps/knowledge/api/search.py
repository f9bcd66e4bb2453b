"""Builder debug search: POST /api/v1/builder/knowledge-bases/{kb_id}/search."""

from __future__ import annotations

from rest_framework.response import Response

from apps.core.exceptions import validation_extra, validation_message
from apps.core.fields import (
    ExactFieldsSerializer,
    JSONBooleanField,
    JSONIntegerField,
    JSONNumberField,
    JSONStringField,
)
from apps.knowledge import selectors
from apps.knowledge.api.serializers import fusion_valid
from apps.knowledge.api.views import SCOPE_DEBUG
from apps.knowledge.errors import SearchInvalid, SearchUnavailable
from apps.knowledge.pipeline.candidates import Hit
from apps.knowledge.pipeline.embedders.base import EmbeddingFailed
from apps.knowledge.pipeline.retrieve import SearchOptions
from apps.projects.builder import BuilderApi


class KnowledgeSearchIn(ExactFieldsSerializer):
    query = JSONStringField(max_length=2000, trim_whitespace=True)
    top_k = JSONIntegerField(min_value=1, max_value=50, default=4)
    score_threshold = JSONNumberField(min_value=-1.0, max_value=1.0, required=False, allow_null=True, default=None)
    hybrid = JSONBooleanField(default=False)
    explain = JSONBooleanField(default=False)
    # null: the KB's own fusion (KnowledgeBase.fusion); applies to hybrid searches.
    fusion = JSONStringField(required=False, allow_null=True, default=None, validators=[fusion_valid])


def hit_out(hit: Hit, *, explain: bool) -> dict:
    out = {
        "chunk_id": str(hit.chunk_id),
        "document_id": str(hit.document_id),
        "chunk_index": hit.chunk_index,
        "content": hit.content,
        "score": hit.score,
        "chapter_path": hit.chapter_path,
        "metadata": {**hit.metadata, "title": hit.title},
    }
    if explain:
        out["explain"] = hit.explain
    return out


class KnowledgeBaseSearchApi(BuilderApi):
    """Search one KB as an agent would: vector only by default, hybrid when asked; `explain` adds
    each channel's rank and score and the matched keyword terms. A KB that is off is searched
    too (no agent reads it): `knowledge_base_enabled` says which."""

    required_scope = SCOPE_DEBUG
    invalid_error = SearchInvalid

    def post(self, request, kb_id):
        kb = selectors.knowledge_base_get_visible(user=request.user, kb_id=kb_id)
        serializer = KnowledgeSearchIn(data=request.data)
        if not serializer.is_valid():
            extra = validation_extra(serializer.errors)
            raise SearchInvalid(validation_message(extra["fields"]), **extra)
        data = serializer.validated_data
        options = SearchOptions(
            top_k=data["top_k"], mode="hybrid" if data["hybrid"] else "vector",
            score_threshold=data["score_threshold"], explain=data["explain"], fusion=data["fusion"],
        )
        try:
            result = selectors.knowledge_search(kbs=[kb], query=data["query"], options=options)
        except EmbeddingFailed as exc:
            raise SearchUnavailable(f"The query could not be embedded: {exc}") from exc
        return Response({"data": {
            "hits": [hit_out(hit, explain=data["explain"]) for hit in result.hits],
            "mode": options.mode,
            "knowledge_base_enabled": kb.enabled,
            "fusion": (result.fusions[0] if len(result.fusions) == 1 else None) if options.mode == "hybrid" else None,
            "trace": result.trace,
            "timings_ms": {name: round(value, 2) for name, value in result.timings_ms.items()},
        }})
