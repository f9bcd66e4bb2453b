"""Builder API views: one class per operation, each validating input, calling one service or
selector and answering `{"data": ...}`. Scoping is in the selectors."""

from __future__ import annotations

import uuid

from django.db.models import Prefetch
from django.utils.functional import classproperty
from rest_framework import status
from rest_framework.response import Response

from apps.core.exceptions import validation_extra, validation_message
from apps.core.parsers import StrictJSONParser, StrictMultiPartParser
from apps.knowledge import progress, selectors, services
from apps.knowledge.api.serializers import (
    DocumentRegisterIn,
    DocumentUpdateIn,
    KnowledgeBaseCreateIn,
    KnowledgeBaseUpdateIn,
    chunk_out,
    document_out,
    embedding_model_out,
    generation_out,
    knowledge_base_out,
)
from apps.knowledge.errors import DocumentInvalid, KnowledgeBaseInvalid, UrlInvalid
from apps.knowledge.models import Document, IndexGeneration
from apps.projects.builder import (  # by_method: the URL tables use it as v.by_method
    BuilderApi,
    builder_validated,
    by_method,  # noqa: F401
    newest_first_page,
    query_boolean,
    query_error,
    query_integer,
)
from apps.projects.models import OperatorToken
from apps.projects.selectors import project_get_editable

SCOPE_CREATE = OperatorToken.Scope.KNOWLEDGE_CREATE
SCOPE_INGEST = OperatorToken.Scope.KNOWLEDGE_INGEST
SCOPE_DEBUG = OperatorToken.Scope.KNOWLEDGE_DEBUG
SCOPE_REBUILD = OperatorToken.Scope.KNOWLEDGE_REBUILD
LIST_LIMIT_MAX = 500
OFFSET_MAX = 10**9


def _validated(serializer_class, data, *, partial: bool = False) -> dict:
    return builder_validated(serializer_class, data, error=KnowledgeBaseInvalid, partial=partial)


def _page(request) -> tuple[int, int]:
    """offset (0–OFFSET_MAX) and limit (1–LIST_LIMIT_MAX), plain decimal digits; anything else is 400."""
    return (query_integer(request, "offset", 0, 0, OFFSET_MAX),
            query_integer(request, "limit", 100, 1, LIST_LIMIT_MAX))


def _document_status(request) -> str | None:
    raw = request.query_params.get("status")
    if not raw:
        return None
    if raw not in Document.Status.values:
        raise query_error("status", "One of " + ", ".join(Document.Status.values) + " is required.")
    return raw


def _project_id(request) -> str | None:
    raw = request.query_params.get("project_id")
    if not raw:
        return None
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        raise query_error("project_id", "A project UUID is required.") from None


def _with_generations(queryset):
    return queryset.prefetch_related(Prefetch(
        "generations",
        queryset=IndexGeneration.objects.exclude(status=IndexGeneration.Status.RETIRED).order_by("-number"),
        to_attr="current_generations",
    ))


class EmbeddingModelListApi(BuilderApi):
    def get(self, request):
        return Response({"data": [embedding_model_out(model) for model in selectors.embedding_model_list()]})


class KnowledgeBaseListApi(BuilderApi):
    def get(self, request):
        offset, limit = _page(request)
        queryset = selectors.knowledge_base_list_visible(user=request.user, project_id=_project_id(request))
        total = queryset.count()
        kbs = _with_generations(queryset)[offset : offset + limit]
        return Response({"data": [knowledge_base_out(kb) for kb in kbs],
                         "meta": {"total": total, "offset": offset, "limit": limit}})


class KnowledgeBaseCreateApi(BuilderApi):
    required_scope = SCOPE_CREATE
    invalid_error = KnowledgeBaseInvalid

    def post(self, request):
        data = _validated(KnowledgeBaseCreateIn, request.data)
        project = project_get_editable(user=request.user, project_id=data["project_id"])
        model = selectors.embedding_model_get(model_id=data["embedding_model_id"])
        kb = services.knowledge_base_create(
            project=project, name=data["name"], description=data["description"], embedding_model=model,
            embedding_dim=data["embedding_dim"], chunk_strategy=data["chunk_strategy"],
            require_confirmation=data["require_confirmation"], fusion=data["fusion"], reranker=data["reranker"],
            enabled=data["enabled"], user=request.user,
        )
        return Response({"data": knowledge_base_out(kb)}, status=status.HTTP_201_CREATED)


class KnowledgeBaseGetApi(BuilderApi):
    def get(self, request, kb_id):
        return Response({"data": knowledge_base_out(selectors.knowledge_base_get_visible(user=request.user,
                                                                                        kb_id=kb_id))})


class KnowledgeBaseUpdateApi(BuilderApi):
    required_scope = SCOPE_CREATE
    invalid_error = KnowledgeBaseInvalid

    def patch(self, request, kb_id):
        kb = selectors.knowledge_base_get_editable(user=request.user, kb_id=kb_id)
        data = _validated(KnowledgeBaseUpdateIn, request.data, partial=True)
        kb = services.knowledge_base_update(kb=kb, user=request.user, **data)
        return Response({"data": knowledge_base_out(kb)})


class KnowledgeBaseRebuildApi(BuilderApi):
    required_scope = SCOPE_REBUILD

    def post(self, request, kb_id):
        kb = selectors.knowledge_base_get_editable(user=request.user, kb_id=kb_id)
        generation = services.knowledge_base_rebuild(kb=kb)
        return Response({"data": generation_out(generation)}, status=status.HTTP_202_ACCEPTED)


class KnowledgeBaseRebuildGetApi(BuilderApi):
    def get(self, request, kb_id):
        kb = selectors.knowledge_base_get_visible(user=request.user, kb_id=kb_id)
        return Response({"data": generation_out(selectors.generation_latest(kb=kb))})


class KnowledgeBaseReportApi(BuilderApi):
    def get(self, request, kb_id):
        kb = selectors.knowledge_base_get_visible(user=request.user, kb_id=kb_id)
        return Response({"data": progress.knowledge_base_report(kb=kb)})


class DocumentListApi(BuilderApi):
    def get(self, request, kb_id):
        kb = selectors.knowledge_base_get_visible(user=request.user, kb_id=kb_id)
        queryset = selectors.document_list(kb=kb, status=_document_status(request),
                                           enabled=query_boolean(request, "enabled"))
        documents, meta = newest_first_page(request, queryset, limit_max=LIST_LIMIT_MAX, offset_max=OFFSET_MAX)
        return Response({"data": [document_out(d) for d in documents], "meta": meta})


class DocumentUploadApi(BuilderApi):
    required_scope = SCOPE_INGEST
    parser_classes = [StrictMultiPartParser, StrictJSONParser]

    @classproperty
    def body_max_bytes(cls) -> int:
        # The whole multipart body; each file is held to KNOWLEDGE_UPLOAD_MAX_BYTES by the service.
        return services.upload_body_max_bytes()

    @staticmethod
    def body_too_large_payload(*, max_bytes: int, observed_bytes: int) -> dict:
        return {"code": "file_too_large", "message": f"File too large: the upload exceeds {max_bytes} bytes.",
                "max_bytes": max_bytes}

    def post(self, request, kb_id):
        kb = selectors.knowledge_base_get_editable(user=request.user, kb_id=kb_id)
        if request.content_type.split(";", 1)[0].strip().lower() == "application/json":
            # An external source: {"url": "https://..."}, fetched by the worker.
            serializer = DocumentRegisterIn(data=request.data)
            if not serializer.is_valid():
                extra = validation_extra(serializer.errors)
                raise UrlInvalid(validation_message(extra["fields"]), **extra)
            document = services.document_register_url(kb=kb, url=serializer.validated_data["url"], user=request.user)
            return Response({"data": [document_out(document)]}, status=status.HTTP_201_CREATED)
        files = request.FILES.getlist("files") + request.FILES.getlist("file")
        documents = services.document_upload(kb=kb, files=files, user=request.user)
        return Response({"data": [document_out(d) for d in documents]}, status=status.HTTP_201_CREATED)


class DocumentGetApi(BuilderApi):
    def get(self, request, document_id):
        return Response({"data": document_out(selectors.document_get_visible(user=request.user,
                                                                             document_id=document_id))})


class DocumentUpdateApi(BuilderApi):
    """PATCH a document: `enabled` turns it on or off for every search and agent read."""

    required_scope = SCOPE_INGEST
    invalid_error = DocumentInvalid

    def patch(self, request, document_id):
        document = selectors.document_get_editable(user=request.user, document_id=document_id)
        data = builder_validated(DocumentUpdateIn, request.data, error=DocumentInvalid, partial=True)
        if "enabled" in data:
            document = services.document_set_enabled(document=document, enabled=data["enabled"])
        return Response({"data": document_out(document)})


class DocumentDeleteApi(BuilderApi):
    required_scope = SCOPE_INGEST

    def delete(self, request, document_id):
        services.document_delete(document=selectors.document_get_editable(user=request.user,
                                                                          document_id=document_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class DocumentChunkListApi(BuilderApi):
    required_scope = SCOPE_DEBUG

    def get(self, request, document_id):
        document = selectors.document_get_visible(user=request.user, document_id=document_id)
        offset, limit = _page(request)
        queryset = selectors.chunk_list_preview(document=document).defer("embedding", "search_vector")
        total = queryset.count()
        return Response({"data": [chunk_out(c) for c in queryset[offset : offset + limit]],
                         "meta": {"total": total, "offset": offset, "limit": limit}})


class DocumentConfirmApi(BuilderApi):
    required_scope = SCOPE_INGEST

    def post(self, request, document_id):
        document = selectors.document_get_editable(user=request.user, document_id=document_id)
        return Response({"data": document_out(services.document_confirm(document=document))})


class DocumentRetryApi(BuilderApi):
    required_scope = SCOPE_INGEST

    def post(self, request, document_id):
        document = selectors.document_get_editable(user=request.user, document_id=document_id)
        return Response({"data": document_out(services.document_retry(document=document))})


class DocumentRefetchApi(BuilderApi):
    required_scope = SCOPE_INGEST

    def post(self, request, document_id):
        document = selectors.document_get_editable(user=request.user, document_id=document_id)
        return Response({"data": document_out(services.document_refetch(document=document))},
                        status=status.HTTP_202_ACCEPTED)


class DocumentReportApi(BuilderApi):
    def get(self, request, document_id):
        document = selectors.document_get_visible(user=request.user, document_id=document_id)
        return Response({"data": progress.document_report(document=document)})
