"""The RAG answers API, mounted at /api/v1/routes/."""

from django.urls import path

from apps.answers.api import views as v

urlpatterns = [
    path("<str:route_key>/rag/query", v.RagQueryApi.as_view(), name="rag-query"),
    path("<str:route_key>/rag/queries", v.RagQueryListApi.as_view(), name="rag-queries"),
    path("<str:route_key>/rag/queries/<str:query_id>/feedback", v.RagFeedbackApi.as_view(), name="rag-feedback"),
    path("<str:route_key>/rag/report", v.RagReportApi.as_view(), name="rag-report"),
]
