"""The builder API, mounted at /api/v1/builder/."""

from django.urls import path

from apps.knowledge.api import views as v
from apps.knowledge.api.search import KnowledgeBaseSearchApi

urlpatterns = [
    path("embedding-models", v.EmbeddingModelListApi.as_view(), name="knowledge-embedding-models"),
    path("knowledge-bases", v.by_method(get=v.KnowledgeBaseListApi.as_view(), post=v.KnowledgeBaseCreateApi.as_view()),
         name="knowledge-bases"),
    path("knowledge-bases/<uuid:kb_id>",
         v.by_method(get=v.KnowledgeBaseGetApi.as_view(), patch=v.KnowledgeBaseUpdateApi.as_view()),
         name="knowledge-base"),
    path("knowledge-bases/<uuid:kb_id>/documents",
         v.by_method(get=v.DocumentListApi.as_view(), post=v.DocumentUploadApi.as_view()),
         name="knowledge-base-documents"),
    path("knowledge-bases/<uuid:kb_id>/documents/report", v.KnowledgeBaseReportApi.as_view(),
         name="knowledge-base-report"),
    path("knowledge-bases/<uuid:kb_id>/rebuild",
         v.by_method(get=v.KnowledgeBaseRebuildGetApi.as_view(), post=v.KnowledgeBaseRebuildApi.as_view()),
         name="knowledge-base-rebuild"),
    path("knowledge-bases/<uuid:kb_id>/search", KnowledgeBaseSearchApi.as_view(), name="knowledge-base-search"),
    path("documents/<uuid:document_id>",
         v.by_method(get=v.DocumentGetApi.as_view(), patch=v.DocumentUpdateApi.as_view(),
                    delete=v.DocumentDeleteApi.as_view()), name="document"),
    path("documents/<uuid:document_id>/chunks", v.DocumentChunkListApi.as_view(), name="document-chunks"),
    path("documents/<uuid:document_id>/confirm", v.DocumentConfirmApi.as_view(), name="document-confirm"),
    path("documents/<uuid:document_id>/retry-index", v.DocumentRetryApi.as_view(), name="document-retry"),
    path("documents/<uuid:document_id>/retry", v.DocumentRetryApi.as_view()),
    path("documents/<uuid:document_id>/report", v.DocumentReportApi.as_view(), name="document-report"),
    path("documents/<uuid:document_id>/refetch", v.DocumentRefetchApi.as_view(), name="document-refetch"),
]
