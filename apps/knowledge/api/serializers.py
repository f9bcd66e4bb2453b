"""Builder API input validation and output shapes."""

from __future__ import annotations

from rest_framework import serializers

from apps.core.fields import (
    ExactFieldsSerializer,
    JSONBooleanField,
    JSONIntegerField,
    JSONObjectField,
    JSONStringField,
    JSONUUIDField,
)
from apps.core.validators import validate_shown_name
from apps.knowledge.models import Chunk, Document, EmbeddingModel, Fusion, IndexGeneration, KnowledgeBase
from apps.knowledge.pipeline.rerank import RerankConfig
from apps.knowledge.progress import document_stage_times, document_state

# pgvector indexes (HNSW) take at most 2,000 dimensions; a stored vector at most 16,000.
EMBEDDING_DIM_MAX = 16_000


def fusion_valid(value: str) -> None:
    if value not in Fusion.values:
        raise serializers.ValidationError(f"One of {', '.join(Fusion.values)} is required.")


class KnowledgeBaseCreateIn(ExactFieldsSerializer):
    project_id = JSONUUIDField()
    name = JSONStringField(max_length=200, validators=[validate_shown_name])
    description = JSONStringField(max_length=2000, required=False, allow_blank=True, default="")
    enabled = JSONBooleanField(required=False, default=True)
    embedding_model_id = JSONUUIDField()
    embedding_dim = JSONIntegerField(min_value=1, max_value=EMBEDDING_DIM_MAX)
    chunk_strategy = JSONObjectField(required=False, default=None, allow_null=True)
    require_confirmation = JSONBooleanField(required=False, default=False)
    fusion = JSONStringField(required=False, default=Fusion.CONVEX, validators=[fusion_valid])
    reranker = JSONObjectField(required=False, default=None, allow_null=True)


class DocumentUpdateIn(ExactFieldsSerializer):
    enabled = JSONBooleanField(required=False)


class DocumentRegisterIn(ExactFieldsSerializer):
    url = JSONStringField(max_length=2000)


class KnowledgeBaseUpdateIn(ExactFieldsSerializer):
    name = JSONStringField(max_length=200, required=False, validators=[validate_shown_name])
    description = JSONStringField(max_length=2000, required=False, allow_blank=True)
    enabled = JSONBooleanField(required=False)
    chunk_strategy = JSONObjectField(required=False)
    require_confirmation = JSONBooleanField(required=False)
    embedding_model_id = JSONUUIDField(required=False)
    embedding_dim = JSONIntegerField(required=False, min_value=1, max_value=EMBEDDING_DIM_MAX)
    fusion = JSONStringField(required=False, validators=[fusion_valid])
    reranker = JSONObjectField(required=False, allow_null=True)


def generation_out(generation: IndexGeneration | None) -> dict | None:
    if generation is None:
        return None
    return {
        "id": str(generation.pk),
        "number": generation.number,
        "status": generation.status,
        "chunk_strategy": {key: generation.chunk_strategy.get(key)
                           for key in ("strategy", "min_chars", "max_chars", "overlap_chars")},
        "progress": {"documents_done": generation.progress_done, "documents_total": generation.progress_total},
        "error_code": generation.error_code or None,
        "error_message": generation.error_message or None,
        "started_at": generation.started_at,
        "activated_at": generation.activated_at,
        "failed_at": generation.failed_at,
    }


def knowledge_base_out(kb: KnowledgeBase) -> dict:
    """Expects `kb.current_generations` (non-retired, newest first) prefetched by the view."""
    generations = getattr(kb, "current_generations", None)
    if generations is None:
        generations = list(kb.generations.exclude(status=IndexGeneration.Status.RETIRED).order_by("-number"))
    active = next((g for g in generations if g.status == IndexGeneration.Status.ACTIVE), None)
    latest = generations[0] if generations else None
    rebuild = latest if latest is not None and latest.status != IndexGeneration.Status.ACTIVE else None
    return {
        "id": str(kb.pk),
        "project_id": str(kb.project_id),
        "name": kb.name,
        "description": kb.description,
        "enabled": kb.enabled,
        "embedding_model_id": str(kb.embedding_model_id),
        "embedding_model": {"name": kb.embedding_model.name, "provider": kb.embedding_model.provider},
        "embedding_dim": kb.embedding_dim,
        "chunk_strategy": kb.chunk_strategy,
        "require_confirmation": kb.require_confirmation,
        "fusion": kb.fusion,
        "reranker": config.public if (config := RerankConfig.of(kb)) else None,
        "index": {"active_generation": generation_out(active), "rebuild": generation_out(rebuild)},
        "created_at": kb.created_at,
        "updated_at": kb.updated_at,
    }


def document_out(document: Document) -> dict:
    return {
        "id": str(document.pk),
        "knowledge_base_id": str(document.knowledge_base_id),
        "filename": document.filename,
        "file_type": document.file_type,
        "source_url": document.source_url or None,
        "fetched_at": document.fetched_at,
        "size": document.size,
        "content_hash": document.content_hash,
        "enabled": document.enabled,
        **document_state(document),
        **document_stage_times(document),
    }


def chunk_out(chunk: Chunk) -> dict:
    return {
        "chunk_id": str(chunk.pk),
        "document_id": str(chunk.document_id),
        "chunk_index": chunk.index,
        "content": chunk.text,
        "chapter_path": chunk.chapter_path,
        "parent_id": str(chunk.parent_id) if chunk.parent_id else None,
        "metadata": chunk.metadata,
        "embedded": chunk.embedding_model_id is not None,
    }


def embedding_model_out(model: EmbeddingModel) -> dict:
    return {"id": str(model.pk), "name": model.name, "provider": model.provider, "dimension": model.dimension}
