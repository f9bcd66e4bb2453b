"""The OpenAPI 3.1 description of the agent and builder APIs (drf-spectacular), served at
/api/schema/ (JSON, or YAML with ?format=yaml).

The views stay plain APIViews: what they take and answer is declared here, per view class, with
spectacular's view extensions. Every operation lists the errors it can answer, each status with
the enum of its `error` codes, built from the error classes themselves; the shared `Error`
component is the one error shape apps.core.exceptions renders.
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from typing import Any

from drf_spectacular import openapi
from drf_spectacular.extensions import (
    OpenApiAuthenticationExtension,
    OpenApiSerializerFieldExtension,
    OpenApiViewExtension,
)
from drf_spectacular.generators import EndpointEnumerator, SchemaGenerator
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_view,
)

from apps.agent_auth import errors as auth_errors
from apps.agent_auth.api import serializers as auth_in
from apps.answers import errors as answer_errors
from apps.core.errors import ApiError
from apps.knowledge import errors as kb_errors
from apps.ledger import errors as ledger_errors
from apps.projects.errors import InsufficientScope, ProjectForbidden, ProjectNotFound
from apps.runtime import errors as runtime_errors
from apps.runtime.api import knowledge as knowledge_views
from apps.runtime.api import tools as tool_views
from apps.runtime.api.serializers import (
    CompletionSerializer,
    ProjectNoteSerializer,
    RouteNoteSerializer,
    TurnSerializer,
)
from apps.tasks import errors as task_errors
from apps.tasks.api import serializers as task_in
from apps.tools import errors as tool_errors
from apps.tools import invocation_errors

PUBLISHED_PREFIXES = ("/agent-auth/v1/", "/agent-api/v1/", "/api/v1/builder/", "/api/v1/routes/")
# Old names kept working for existing clients; new clients learn one name per operation.
LEGACY_ALIASES = {"/api/v1/builder/documents/{document_id}/retry"}

Code = tuple[int, str]


def _code(error: type[ApiError] | Code) -> Code:
    return error if isinstance(error, tuple) else (error.status, error.code)


# Errors any operation can answer, by what it does.
EVERY = [(503, "service_unavailable")]
WITH_BODY = [(400, "invalid_json"), (400, "invalid_request"), (413, "request_too_large"),
             (415, "unsupported_media_type")]
# Agent Auth, the tool contract and so the whole agent API name a body they cannot parse
# invalid_request (malformed_body).
STRICT_BODY = [code for code in WITH_BODY if code != (400, "invalid_json")]
# Agent Auth's error list is closed: another media type or charset, or a body over the limit, is
# invalid_request too, not 415 or 413.
AUTH_BODY = [code for code in STRICT_BODY if code not in ((415, "unsupported_media_type"), (413, "request_too_large"))]
AGENT = [(401, "unauthorized")]
CLIENT = [(401, "unauthorized")]
WORKSPACE = [*AGENT, auth_errors.InvalidRoute, auth_errors.RouteNotAllowed, auth_errors.RouteUnavailable,
             auth_errors.AgentClientDisabled, auth_errors.AudienceNotAllowed]
TOOL_ROUTE = [*WORKSPACE, tool_errors.AgentDirectDisabled]
# Every builder operation refuses a query parameter given more than once (query_repeated_check).
BUILDER = [(401, "unauthorized"), InsufficientScope, (400, "invalid_request")]
BUILDER_PAGE = [(400, "invalid_request")]
KB_VISIBLE = [kb_errors.KnowledgeBaseNotFound]
KB_EDITABLE = [kb_errors.KnowledgeBaseNotFound, kb_errors.KnowledgeForbidden]
DOC_VISIBLE = [kb_errors.DocumentNotFound]
DOC_EDITABLE = [kb_errors.DocumentNotFound, kb_errors.KnowledgeForbidden]
RAG_ROUTE = [answer_errors.RouteNotFound, answer_errors.RouteAmbiguous]
KB_SETTINGS = [kb_errors.KnowledgeBaseInvalid, kb_errors.KnowledgeBaseNameTaken, kb_errors.EmbeddingModelNotFound,
               kb_errors.EmbeddingDimensionMismatch, kb_errors.EmbeddingModelFrozen]
SPEC_REFUSED = [tool_errors.BuilderSpecRefused, (413, "spec_refused")]
PROVIDER_EDITABLE = [tool_errors.ToolProviderNotFound, tool_errors.ToolsForbidden]
ROUTE_VISIBLE = [tool_errors.RouteNotFound, (400, "invalid_request")]  # 400: a key in several projects

# What each view answers besides success: view class path -> errors.
ERRORS: dict[str, list] = {
    "apps.agent_auth.api.views.AuthorizationCreateApi": [
        *AUTH_BODY, auth_errors.InvalidClient, auth_errors.RouteNotAllowed, auth_errors.RateLimited,
        auth_errors.AgentAuthUnavailable],
    "apps.agent_auth.api.views.AuthorizationDetailApi": [*CLIENT, auth_errors.NotFound],
    "apps.agent_auth.api.views.AuthorizationApproveApi": [
        *CLIENT, *AUTH_BODY, auth_errors.NotFound, auth_errors.AccessDenied, auth_errors.RouteNotAllowed,
        auth_errors.AlreadyProcessed, auth_errors.AuthorizationExpired],
    "apps.agent_auth.api.views.AuthorizationDenyApi": [
        *CLIENT, *AUTH_BODY, auth_errors.NotFound, auth_errors.AccessDenied, auth_errors.AlreadyProcessed,
        auth_errors.AuthorizationExpired],
    "apps.agent_auth.api.views.TokenApi": [
        *AUTH_BODY, auth_errors.InvalidClient, auth_errors.InvalidGrant, auth_errors.UnsupportedGrantType],
    "apps.agent_auth.api.views.SessionDetailApi": [*AGENT],
    "apps.agent_auth.api.views.RevokeApi": [*AGENT, *AUTH_BODY, auth_errors.InvalidClient, auth_errors.InvalidGrant],
    "apps.agent_auth.api.views.ClientSessionRevokeApi": [*CLIENT, *AUTH_BODY, auth_errors.NotFound],
    "apps.runtime.api.views.WorkspaceListApi": [*AGENT],
    "apps.runtime.api.views.WorkspaceSystemInfoApi": [*WORKSPACE],
    "apps.runtime.api.views.WorkspaceBootstrapApi": [*WORKSPACE],
    "apps.runtime.api.turns.TurnOpenApi": [*WORKSPACE, *STRICT_BODY, ledger_errors.TurnConflict,
                                           runtime_errors.KnowledgeUnavailable],
    "apps.runtime.api.turns.RunCompleteApi": [*WORKSPACE, *STRICT_BODY, ledger_errors.RunNotFound,
                                              ledger_errors.CompletionConflict],
    "apps.runtime.api.memories.RouteMemoriesApi": [*WORKSPACE, *STRICT_BODY],
    "apps.runtime.api.memories.RouteMemoryApi": [*WORKSPACE, *STRICT_BODY, ledger_errors.MemoryNotFound],
    "apps.runtime.api.memories.ProjectMemoriesApi": [*WORKSPACE, *STRICT_BODY],
    "apps.runtime.api.memories.ProjectMemoryApi": [*WORKSPACE, *STRICT_BODY, ledger_errors.MemoryNotFound],
    "apps.runtime.api.knowledge.KnowledgeCapabilitiesApi": [*WORKSPACE],
    "apps.runtime.api.knowledge.KnowledgeSearchApi": [
        *WORKSPACE, *STRICT_BODY, ledger_errors.RunNotFound, runtime_errors.RunNotActive,
        runtime_errors.KnowledgeUnavailable],
    "apps.runtime.api.knowledge.KnowledgeReadApi": [
        *WORKSPACE, *STRICT_BODY, runtime_errors.KnowledgeReferenceInvalid, runtime_errors.KnowledgeReferenceExpired,
        runtime_errors.KnowledgeScopeChanged, runtime_errors.KnowledgeChanged, ledger_errors.RunNotFound,
        runtime_errors.RunNotActive, runtime_errors.KnowledgeUnavailable],
    "apps.runtime.api.tools.CapabilitySearchApi": [*TOOL_ROUTE, *STRICT_BODY, ledger_errors.RunNotFound],
    "apps.runtime.api.tools.ToolCatalogApi": [*TOOL_ROUTE, (400, "invalid_request")],
    "apps.runtime.api.invocations.ToolInvocationApi": [
        *TOOL_ROUTE, (400, "invalid_request"), (415, "unsupported_media_type"), invocation_errors.ArgumentsTooLarge,
        ledger_errors.RunNotFound, invocation_errors.RunNotActive, tool_errors.ToolNotFound,
        tool_errors.CapabilityChanged, invocation_errors.InvocationConflict, invocation_errors.ExecutionPaused],
    "apps.runtime.api.invocations.ToolInvocationResumeApi": [
        *TOOL_ROUTE, (400, "invalid_request"), (413, "request_too_large"), (415, "unsupported_media_type"),
        invocation_errors.InvocationNotFound, tool_errors.ToolNotFound, tool_errors.CapabilityChanged,
        invocation_errors.ExecutionPaused],
    "apps.runtime.api.invocations.ToolInvocationReceiptApi": [
        *TOOL_ROUTE, (400, "invalid_request"), invocation_errors.InvocationNotFound, tool_errors.ToolNotFound],
    "apps.runtime.api.invocations.ToolInvocationInspectionApi": [*AGENT, (400, "invalid_request")],
    "apps.runtime.api.tools.ToolDetailApi": [*TOOL_ROUTE, (400, "invalid_request"), tool_errors.ToolNotFound,
                                             tool_errors.CapabilityChanged],
    "apps.knowledge.api.views.EmbeddingModelListApi": [*BUILDER],
    "apps.knowledge.api.views.KnowledgeBaseListApi": [*BUILDER, *BUILDER_PAGE],
    "apps.knowledge.api.views.KnowledgeBaseCreateApi": [
        *BUILDER, *WITH_BODY, ProjectNotFound, ProjectForbidden, *KB_SETTINGS],
    "apps.knowledge.api.views.KnowledgeBaseGetApi": [*BUILDER, *KB_VISIBLE],
    "apps.knowledge.api.views.KnowledgeBaseUpdateApi": [*BUILDER, *WITH_BODY, *KB_EDITABLE, *KB_SETTINGS],
    "apps.knowledge.api.views.KnowledgeBaseRebuildApi": [*BUILDER, *KB_EDITABLE, kb_errors.RebuildInProgress],
    "apps.knowledge.api.views.KnowledgeBaseRebuildGetApi": [*BUILDER, *KB_VISIBLE],
    "apps.knowledge.api.views.KnowledgeBaseReportApi": [*BUILDER, *KB_VISIBLE],
    "apps.knowledge.api.views.DocumentListApi": [*BUILDER, *KB_VISIBLE, *BUILDER_PAGE],
    "apps.knowledge.api.views.DocumentUploadApi": [
        *BUILDER, *KB_EDITABLE, (400, "invalid_multipart"), (400, "invalid_json"), (400, "invalid_request"),
        (415, "unsupported_media_type"), kb_errors.FileRequired, kb_errors.TooManyFiles,
        kb_errors.UnsupportedFileType, kb_errors.FileTooLarge, kb_errors.DocumentConversionFailed,
        kb_errors.UrlInvalid, kb_errors.UrlAddressRefused, kb_errors.UrlUnresolvable],
    "apps.knowledge.api.views.DocumentGetApi": [*BUILDER, *DOC_VISIBLE],
    "apps.knowledge.api.views.DocumentUpdateApi": [*BUILDER, *WITH_BODY, *DOC_EDITABLE, kb_errors.DocumentInvalid],
    "apps.knowledge.api.views.DocumentDeleteApi": [*BUILDER, *DOC_EDITABLE, kb_errors.DocumentVectorsRemovalFailed],
    "apps.knowledge.api.views.DocumentChunkListApi": [*BUILDER, *DOC_VISIBLE, *BUILDER_PAGE],
    "apps.knowledge.api.views.DocumentConfirmApi": [*BUILDER, *DOC_EDITABLE, kb_errors.InvalidDocumentState],
    "apps.knowledge.api.views.DocumentRetryApi": [*BUILDER, *DOC_EDITABLE, kb_errors.InvalidDocumentState],
    "apps.knowledge.api.views.DocumentReportApi": [*BUILDER, *DOC_VISIBLE],
    "apps.knowledge.api.views.DocumentRefetchApi": [*BUILDER, *DOC_EDITABLE, kb_errors.NotUrlSource,
                                                    kb_errors.InvalidDocumentState],
    "apps.knowledge.api.search.KnowledgeBaseSearchApi": [
        *BUILDER, *WITH_BODY, *KB_VISIBLE, (422, "invalid_search"), kb_errors.SearchUnavailable],
    "apps.answers.api.views.RagQueryApi": [*BUILDER, *WITH_BODY, *RAG_ROUTE, answer_errors.RagQueryInvalid],
    "apps.answers.api.views.RagQueryListApi": [*BUILDER, *BUILDER_PAGE, *RAG_ROUTE],
    "apps.answers.api.views.RagFeedbackApi": [*BUILDER, *WITH_BODY, *RAG_ROUTE, answer_errors.RagQueryNotFound,
                                              answer_errors.RagFeedbackInvalid],
    "apps.answers.api.views.RagReportApi": [*BUILDER, *BUILDER_PAGE, *RAG_ROUTE],
    "apps.tools.api.views.ToolProviderListApi": [*BUILDER, *BUILDER_PAGE],
    "apps.tools.api.views.ToolProviderCreateApi": [
        *BUILDER, *WITH_BODY, ProjectNotFound, ProjectForbidden, tool_errors.InvalidToolProvider,
        tool_errors.ProviderNameTaken, *SPEC_REFUSED],
    "apps.tools.api.views.ToolProviderGetApi": [*BUILDER, tool_errors.ToolProviderNotFound],
    "apps.tools.api.views.ToolProviderDeleteApi": [*BUILDER, *PROVIDER_EDITABLE],
    "apps.tools.api.views.ToolProviderSpecApi": [
        *BUILDER, *WITH_BODY, *PROVIDER_EDITABLE, tool_errors.InvalidToolProvider, *SPEC_REFUSED],
    "apps.tools.api.views.RouteConfigGetApi": [*BUILDER, *ROUTE_VISIBLE],
    "apps.tools.api.views.RouteConfigUpdateApi": [
        *BUILDER, *WITH_BODY, *ROUTE_VISIBLE, tool_errors.ToolsForbidden, tool_errors.InvalidRouteSettings],
    "apps.tools.api.views.RouteDryRunApi": [*BUILDER, *ROUTE_VISIBLE],
    "apps.tools.api.approvals.ApprovalDecisionApi": [
        *BUILDER, *WITH_BODY, (422, "invalid_request"), invocation_errors.ApprovalNotFound,
        invocation_errors.ApprovalAlreadyDecided, invocation_errors.ApprovalExpired],
}


BODY_ONLY = {"invalid_json", "invalid_multipart", "request_too_large", "unsupported_media_type"}


def error_codes(view_path: str, *, has_body: bool = True) -> dict[int, list[str]]:
    """{status: [code, ...]} a view can answer, the shared ones included; without a request body,
    none of the body's errors."""
    by_status: dict[int, set[str]] = defaultdict(set)
    for error in [*ERRORS.get(view_path, []), *EVERY]:
        status, code = _code(error)
        if has_body or code not in BODY_ONLY:
            by_status[status].add(code)
    return {status: sorted(codes) for status, codes in sorted(by_status.items())}


# --- shapes ------------------------------------------------------------------------------------

def _object(properties: dict[str, Any] | None = None, *, required: list[str] | None = None,
            extra: bool = True) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties or {}}
    if required:
        schema["required"] = required
    if not extra:
        schema["additionalProperties"] = False
    return schema


STRING = {"type": "string"}
NULLABLE_STRING = {"type": ["string", "null"]}
INTEGER = {"type": "integer"}
BOOLEAN = {"type": "boolean"}
NUMBER = {"type": "number"}
ANY_OBJECT = {"type": "object"}
UUID = {"type": "string", "format": "uuid"}
TIMESTAMP = {"type": ["string", "null"], "format": "date-time"}


def data_of(schema: dict[str, Any]) -> dict[str, Any]:
    return _object({"data": schema}, required=["data"])


def page_of(schema: dict[str, Any], *, cursor: bool = False) -> dict[str, Any]:
    """A page of a listing by offset; `cursor`: a newest-first listing that also pages after a
    cursor (`next_cursor`; `offset` is null on a cursor's page)."""
    properties: dict[str, Any] = {"total": INTEGER, "offset": INTEGER, "limit": INTEGER}
    if cursor:
        properties |= {"offset": {"type": ["integer", "null"]}, "next_cursor": {"type": ["string", "null"]}}
    meta = _object(properties, required=list(properties))
    return _object({"data": {"type": "array", "items": schema}, "meta": meta}, required=["data", "meta"])


def versioned(version: str, properties: dict[str, Any] | None = None, required: list[str] | None = None
              ) -> dict[str, Any]:
    """An agent-facing body: `schema_version` names its contract."""
    return _object({"schema_version": {"const": version}, **(properties or {})},
                   required=["schema_version", *(required or [])])


TOOL_INVOCATION_RESULT = versioned("bailing.agent-tool-invocation.v1", {
    "invocation_id": STRING, "route": STRING, "tool": STRING,
    "state": {"enum": ["executed", "business_rejected", "awaiting_approval", "denied", "rejected_before_dispatch",
                       "reconciliation_required", "in_progress"]},
    "ok": BOOLEAN, "auto_retry_allowed": BOOLEAN, "text": {"type": "string", "maxLength": 8192},
    "business_status": INTEGER, "approval_id": STRING, "retry_after_ms": INTEGER, "rate_limit": ANY_OBJECT},
    ["invocation_id", "route", "tool", "state", "ok", "auto_retry_allowed", "text"])

GENERATION = {"type": ["object", "null"], "properties": {
    "id": UUID, "number": INTEGER, "status": STRING, "chunk_strategy": ANY_OBJECT, "progress": ANY_OBJECT,
    "error_code": NULLABLE_STRING, "error_message": NULLABLE_STRING, "started_at": TIMESTAMP,
    "activated_at": TIMESTAMP, "failed_at": TIMESTAMP}}
KNOWLEDGE_BASE = _object({
    "id": UUID, "project_id": UUID, "name": STRING, "description": STRING, "enabled": BOOLEAN,
    "embedding_model_id": UUID, "embedding_model": ANY_OBJECT, "embedding_dim": INTEGER, "chunk_strategy": ANY_OBJECT,
    "require_confirmation": BOOLEAN, "index": ANY_OBJECT, "created_at": TIMESTAMP, "updated_at": TIMESTAMP,
}, required=["id", "project_id", "name", "embedding_model_id", "embedding_dim", "index"])
DOCUMENT = _object({
    "id": UUID, "knowledge_base_id": UUID, "filename": STRING, "file_type": STRING, "size": INTEGER,
    "content_hash": STRING, "enabled": BOOLEAN, "status": STRING, "error_code": NULLABLE_STRING,
    "error_message": NULLABLE_STRING, "attempts": INTEGER, "progress": ANY_OBJECT, "created_at": TIMESTAMP,
}, required=["id", "knowledge_base_id", "filename", "status"])
CHUNK = _object({
    "chunk_id": UUID, "document_id": UUID, "chunk_index": INTEGER, "content": STRING,
    "chapter_path": {"type": ["string", "null"]}, "parent_id": {"type": ["string", "null"]},
    "metadata": ANY_OBJECT, "embedded": BOOLEAN,
}, required=["chunk_id", "document_id", "chunk_index", "content"])
EMBEDDING_MODEL = _object({"id": UUID, "name": STRING, "provider": STRING, "dimension": INTEGER},
                          required=["id", "name", "provider", "dimension"])
SEARCH_RESULT = data_of(_object({"hits": {"type": "array", "items": ANY_OBJECT}, "mode": STRING,
                                 "knowledge_base_enabled": BOOLEAN, "timings_ms": ANY_OBJECT},
                                required=["hits", "mode", "knowledge_base_enabled"]))
TOOL = _object({"name": STRING, "method": STRING, "path": STRING, "scope": STRING, "risk": STRING,
                "readonly": BOOLEAN, "approval_required": BOOLEAN, "has_acc": BOOLEAN, "enabled": BOOLEAN},
               required=["name", "method", "path", "readonly", "enabled"])
TOOL_PROVIDER = _object({
    "id": UUID, "project_id": UUID, "name": STRING, "base_url": STRING, "enabled": BOOLEAN, "title": STRING,
    "openapi_version": STRING, "spec_sha256": STRING, "spec_filename": STRING, "warning_count": INTEGER,
    "tool_count": INTEGER, "enabled_tool_count": INTEGER, "compiled_at": TIMESTAMP, "created_at": TIMESTAMP,
    "updated_at": TIMESTAMP,
}, required=["id", "project_id", "name", "base_url", "enabled", "spec_sha256", "tool_count"])
TOOL_PROVIDER_DETAIL = {"allOf": [TOOL_PROVIDER, _object({
    "tools": {"type": "array", "items": TOOL}, "compile_report": ANY_OBJECT,
    "signing_secret": {"type": "string", "description": "Only when the hub generated the secret; shown once."},
}, required=["tools", "compile_report"])]}
NAMES = {"type": "array", "items": STRING}
ROUTE_CONFIG = _object({
    "route_key": STRING, "project_id": UUID, "name": STRING, "enabled": BOOLEAN,
    "tools": _object({
        "sources": {"type": "array", "items": _object({"provider_id": UUID, "provider": STRING,
                                                       "allowed_tools": NAMES})},
        "permission": {"enum": ["full", "read_only"]},
        "agent_direct": _object({"enabled": BOOLEAN, "write_tools": NAMES, "force_approval_tools": NAMES,
                                 "unattended_write_tools": {"type": ["array", "null"], "items": STRING},
                                 "max_tool_calls": INTEGER}),
    }, required=["sources", "permission", "agent_direct"]),
    "bindings": _object({"knowledge_base_ids": {"type": "array", "items": UUID}}, required=["knowledge_base_ids"]),
    "updated_at": TIMESTAMP,
}, required=["route_key", "project_id", "tools", "bindings"])
REVISION_CHANGE = _object({"route_key": STRING, "before": STRING, "after": STRING},
                          required=["route_key", "before", "after"])
SPEC_REPLACED = _object({
    "provider": TOOL_PROVIDER_DETAIL,
    "diff": _object({"added": NAMES, "removed": NAMES, "changed": NAMES, "switched_off": NAMES, "switched_on": NAMES,
                     # per route key, the tools it allows that the new spec removes or switches off
                     "routes_losing_tools": {"type": "object", "additionalProperties": NAMES}},
                    required=["added", "removed", "changed", "switched_off", "switched_on", "routes_losing_tools"]),
    "capability_revisions_changed": {"type": "array", "items": REVISION_CHANGE},
}, required=["provider", "diff", "capability_revisions_changed"])
ROUTE_DRY_RUN = _object({
    "route_key": STRING, "kb_count": INTEGER, "knowledge_enabled": BOOLEAN, "agent_direct_enabled": BOOLEAN,
    "capabilities": _object({"revision": STRING, "authorized_total": INTEGER, "active_limit": INTEGER,
                             "readonly": INTEGER, "writes": INTEGER, "approval_required": INTEGER},
                            required=["revision", "authorized_total", "active_limit", "readonly", "writes",
                                      "approval_required"]),
    "builtin_tools": {"type": "array", "items": STRING},
}, required=["route_key", "kb_count", "capabilities", "builtin_tools"])
REDIRECT = _object({"redirect_uri": STRING}, required=["redirect_uri"])
REVOKED = _object({"revoked": {"const": True}}, required=["revoked"])
# Optional subject display (Agent Auth 0.5.0+): the name the business shows; it grants nothing.
SUBJECT_DISPLAY = {"subject_display": _object({"name": STRING}, required=["name"]),
                   "subject_display_status": {"enum": ["provided", "missing"]}}
TOKENS = _object({"token_type": {"const": "Bearer"}, "access_token": STRING, "expires_in": INTEGER,
                  "refresh_token": STRING, "refresh_expires_in": INTEGER, "session_id": UUID,
                  "client_app_id": STRING, **SUBJECT_DISPLAY},
                 required=["token_type", "access_token", "expires_in", "refresh_token", "refresh_expires_in",
                           "session_id", "client_app_id"])
MEMORY_SAVED = _object({"status": STRING, "memory_id": STRING, "content": STRING},
                       required=["status", "memory_id"])
MEMORY_LIST = versioned("bailing.agent-memories.v1", {
    "scope": STRING, "memories": {"type": "array", "items": ANY_OBJECT}, "truncated": BOOLEAN, "omitted": INTEGER,
}, ["scope", "memories"])

SESSION = _object({
    "session_id": UUID, "client_app_id": STRING, "device_label": STRING, "principal": ANY_OBJECT,
    "on_behalf_of": STRING, "allowed_routes": {"type": "array", "items": STRING}, "created_at": TIMESTAMP,
    "expires_at": TIMESTAMP, "refresh_expires_at": TIMESTAMP, **SUBJECT_DISPLAY,
}, required=["session_id", "client_app_id", "principal", "on_behalf_of", "allowed_routes"])
AUTHORIZATION = _object({
    "authorization_id": UUID, "client": ANY_OBJECT, "device": ANY_OBJECT,
    "requested_routes": {"type": "array", "items": STRING}, "status": STRING, "expires_at": TIMESTAMP,
}, required=["authorization_id", "client", "requested_routes", "status"])


NOTE_LIMIT = OpenApiParameter("limit", int, description="How many notes, newest first.")
PAGE = [OpenApiParameter("offset", int, description="0–1,000,000,000; default 0."),
        OpenApiParameter("limit", int, description="1–500; default 100.")]
# Newest-first listings also page by position, which rows added meanwhile do not shift.
NEWEST_PAGE = [*PAGE, OpenApiParameter("cursor", str, description=(
    "The next_cursor of the page before (not with offset): rows added meanwhile shift offset pages, "
    "never a cursor's."))]
ROUTE_QUERY = OpenApiParameter("route", str, required=True, description="The route (workspace) key.")
ROUTE_PROJECT = OpenApiParameter("project_id", str, description="Which project's route, when several of "
                                                               "the caller's projects have one with this key.")

MULTIPART_FILES = {"multipart/form-data": _object({
    "files": {"type": "array", "items": {"type": "string", "contentEncoding": "binary"}},
    "file": {"type": "string", "contentEncoding": "binary"},
})}

RAG_EVIDENCE = _object({"ref": INTEGER, "document_title": STRING, "chapter_path": NULLABLE_STRING, "quote": STRING,
                        "score": NUMBER, "cited": BOOLEAN, "document_id": STRING, "chunk_id": STRING},
                       required=["ref", "document_title", "chapter_path", "quote", "score"])
RAG_TRACE_STEP = _object({"step": {"enum": ["retrieve", "rerank", "generate"]}, "ms": NUMBER, "status": STRING},
                         required=["step", "ms"])
RAG_ANSWER_FIELDS = {
    "query_id": {"type": ["string", "null"], "format": "uuid",
                 "description": "null when the record could not be written; the answer still stands."},
    "answer": STRING,
    "evidence": {"type": "array", "items": RAG_EVIDENCE},
    "confidence": {"type": "number", "minimum": 0, "maximum": 1,
                   "description": "Calibrated probability that the answer holds the answer (logistic fit)."},
    "used_web_search": {"const": False},
    "trace": {"type": "array", "items": RAG_TRACE_STEP},
    "grounded": BOOLEAN,
    "useful": BOOLEAN,
    "missing_points": {"type": "array", "items": STRING},
    "error_code": {"type": ["string", "null"], "enum": ["DEPENDENCY_UNAVAILABLE", "FAILED_RETRIEVAL", None],
                   "description": "DEPENDENCY_UNAVAILABLE: the database, embedder or answer generator failed "
                                  "(safe message, recorded); FAILED_RETRIEVAL: the knowledge holds no answer."},
    "error_message": NULLABLE_STRING,
    "interaction_mode": STRING,
}
RAG_ANSWER = _object(RAG_ANSWER_FIELDS, required=list(RAG_ANSWER_FIELDS))
RAG_RECORD = _object({**RAG_ANSWER_FIELDS, "created_at": STRING, "question": STRING,
                      "conversation_id": NULLABLE_STRING, "generator": STRING, "latency_ms": INTEGER,
                      "feedback": {"type": ["object", "null"]}},
                     required=["query_id", "created_at", "question", "answer", "grounded", "useful", "feedback"])
RAG_RATES = {"volume": INTEGER, "feedback_count": INTEGER, "helpful_rate": {"type": ["number", "null"]},
             "ungrounded_rate": {"type": ["number", "null"]}, "no_answer_rate": {"type": ["number", "null"]},
             "dependency_unavailable": INTEGER, "latency_ms": ANY_OBJECT}
RAG_REPORT = data_of(_object({
    **RAG_RATES, "route": STRING, "days": INTEGER, "from": STRING, "to": STRING,
    "top_unanswered": {"type": "array", "items": _object({"question": STRING, "count": INTEGER})},
    "per_day": {"type": "array", "items": _object({"date": STRING, **RAG_RATES})}},
    required=["volume", "helpful_rate", "ungrounded_rate", "no_answer_rate", "latency_ms", "top_unanswered",
              "per_day"]))
RAG_PROJECT = OpenApiParameter("project_id", str, description="The project, when the route key is in several of "
                                                              "yours.")

# View class path -> {method: extend_schema keyword arguments}.
OPERATIONS: dict[str, dict[str, dict[str, Any]]] = {
    "apps.agent_auth.api.views.AuthorizationCreateApi": {"post": {
        "request": auth_in.AuthorizationCreateSerializer,
        "responses": {201: _object({"authorization_id": UUID, "authorization_url": STRING, "expires_in": INTEGER},
                                   required=["authorization_id", "authorization_url", "expires_in"])}}},
    "apps.agent_auth.api.views.AuthorizationDetailApi": {"get": {"responses": {200: AUTHORIZATION}}},
    "apps.agent_auth.api.views.AuthorizationApproveApi": {"post": {
        "request": auth_in.AuthorizationApproveSerializer, "responses": {200: REDIRECT}}},
    "apps.agent_auth.api.views.AuthorizationDenyApi": {"post": {
        "request": auth_in.AuthorizationDenySerializer, "responses": {200: REDIRECT}}},
    "apps.agent_auth.api.views.TokenApi": {"post": {
        "request": PolymorphicProxySerializer(
            component_name="TokenRequest", resource_type_field_name="grant_type",
            serializers={"authorization_code": auth_in.CodeGrantSerializer,
                         "refresh_token": auth_in.RefreshGrantSerializer}),
        "responses": {200: TOKENS}}},
    "apps.agent_auth.api.views.SessionDetailApi": {"get": {"responses": {200: SESSION}}},
    "apps.agent_auth.api.views.RevokeApi": {"post": {
        "request": auth_in.RevokeSerializer, "responses": {200: REVOKED},
        "description": "With the access token as bearer, or without an Authorization header and the "
                       "refresh token in the body. With the bearer, the body is empty, {} or this object "
                       "whole; the bearer names the session."}},
    "apps.agent_auth.api.views.ClientSessionRevokeApi": {"post": {
        "request": auth_in.SessionRevokeSerializer, "responses": {200: REVOKED},
        "description": "The body is empty or {}."}},
    "apps.runtime.api.views.WorkspaceListApi": {"get": {"responses": {
        200: versioned("bailing.agent-workspaces.v1", {"workspaces": {"type": "array", "items": ANY_OBJECT}},
                       ["workspaces"]), 304: None}}},
    "apps.runtime.api.views.WorkspaceSystemInfoApi": {"get": {"responses": {
        200: versioned("bailing.agent-system-info.v1", {"binding": ANY_OBJECT}, ["binding"])}}},
    "apps.runtime.api.views.WorkspaceBootstrapApi": {"get": {"responses": {
        200: versioned("bailing.agent-runtime-profile.v1", {"workspace": ANY_OBJECT, "profile": ANY_OBJECT,
                                                            "capabilities": ANY_OBJECT,
                                                            "active_tools": {"type": "array", "items": ANY_OBJECT}},
                       ["workspace", "profile", "capabilities", "active_tools"]), 304: None}}},
    "apps.runtime.api.turns.TurnOpenApi": {"post": {"request": TurnSerializer, "responses": {
        200: versioned("bailing.agent-turn-context.v1", {"run_id": UUID, "context": ANY_OBJECT}, ["run_id"])}}},
    "apps.runtime.api.turns.RunCompleteApi": {"post": {"request": CompletionSerializer, "responses": {
        200: versioned("bailing.agent-run-completion.v1", {"run_id": UUID, "status": STRING}, ["run_id", "status"])}}},
    "apps.runtime.api.memories.RouteMemoriesApi": {
        "get": {"parameters": [NOTE_LIMIT], "responses": {200: MEMORY_LIST}},
        "post": {"request": RouteNoteSerializer, "responses": {200: MEMORY_SAVED}}},
    "apps.runtime.api.memories.RouteMemoryApi": {
        "patch": {"request": RouteNoteSerializer, "responses": {200: MEMORY_SAVED}},
        "delete": {"responses": {200: MEMORY_SAVED}}},
    "apps.runtime.api.memories.ProjectMemoriesApi": {
        "get": {"parameters": [NOTE_LIMIT], "responses": {200: MEMORY_LIST}},
        "post": {"request": ProjectNoteSerializer, "responses": {200: MEMORY_SAVED}}},
    "apps.runtime.api.memories.ProjectMemoryApi": {
        "patch": {"request": ProjectNoteSerializer, "responses": {200: MEMORY_SAVED}},
        "delete": {"responses": {200: MEMORY_SAVED}}},
    "apps.runtime.api.knowledge.KnowledgeCapabilitiesApi": {"get": {"responses": {
        200: versioned("bailing.agent-knowledge-capabilities.v1")}}},
    "apps.runtime.api.knowledge.KnowledgeSearchApi": {"post": {
        "request": knowledge_views.KnowledgeSearchSerializer,
        "responses": {200: versioned("bailing.agent-knowledge-search.v1", {"route": STRING}, ["route"])}}},
    "apps.runtime.api.knowledge.KnowledgeReadApi": {"post": {
        "request": knowledge_views.KnowledgeReadSerializer,
        "responses": {200: versioned("bailing.agent-knowledge-read.v1", {"route": STRING}, ["route"])}}},
    "apps.runtime.api.tools.CapabilitySearchApi": {"post": {
        "request": tool_views.CapabilitySearchSerializer,
        "responses": {200: versioned("bailing.agent-capability-search.v1")}}},
    "apps.runtime.api.tools.ToolCatalogApi": {"get": {
        "parameters": [ROUTE_QUERY], "responses": {200: versioned("bailing.agent-tool-catalog.v1")}}},
    "apps.runtime.api.invocations.ToolInvocationApi": {"post": {
        "request": "apps.runtime.api.invocations.InvocationSerializer",
        "responses": {200: TOOL_INVOCATION_RESULT}}},
    # The body is optional and empty, so the empty ResumeSerializer described none, and the body's
    # own errors (413 past 1 KiB, 415 for another media type) went unlisted: described as a schema.
    "apps.runtime.api.invocations.ToolInvocationResumeApi": {"post": {
        "request": {"application/json": {
            "type": "object", "properties": {}, "additionalProperties": False,
            "description": "Empty: {} or no body at all, at most 1 KiB."}},
        "responses": {200: TOOL_INVOCATION_RESULT}}},
    "apps.runtime.api.invocations.ToolInvocationReceiptApi": {"get": {"responses": {
        200: versioned("bailing.agent-invocation-receipt.v1", {
            "read_only": {"const": True}, "business_operation_performed": {"const": False},
            "invocation_id": STRING, "agent_run_id": UUID, "route": STRING, "tool": STRING, "observed_at": STRING,
            "result": {"type": ["object", "null"]}, "result_source": {"enum": ["job", "journal", "none"]},
            "dispatch_state": {"enum": ["not_dispatched", "attempted", "unknown"]}, "approval": ANY_OBJECT,
            "journal_state": {"enum": ["absent", "dispatching", "response_recorded", "completed", "uncertain",
                                       "evidence_degraded", "unknown"]}},
            ["read_only", "business_operation_performed", "invocation_id", "agent_run_id", "route", "tool",
             "observed_at", "result", "result_source", "dispatch_state", "approval", "journal_state"])}}},
    "apps.runtime.api.invocations.ToolInvocationInspectionApi": {"get": {"responses": {
        200: versioned("bailing.agent-invocation-inspection-capabilities.v1",
                       {"receipt_schema": STRING, "read_only": {"const": True}}, ["receipt_schema", "read_only"])}}},
    "apps.tools.api.approvals.ApprovalDecisionApi": {"post": {
        "request": "apps.tools.api.approvals.DecisionIn", "responses": {200: data_of(ANY_OBJECT)}}},
    "apps.runtime.api.tools.ToolDetailApi": {"get": {
        "parameters": [ROUTE_QUERY, OpenApiParameter("capability_revision", str, required=True,
                                                     pattern="^[0-9a-f]{64}$")],
        "responses": {200: versioned("bailing.agent-tool-detail.v1")}}},
    "apps.knowledge.api.views.EmbeddingModelListApi": {"get": {
        "responses": {200: data_of({"type": "array", "items": EMBEDDING_MODEL})}}},
    "apps.knowledge.api.views.KnowledgeBaseListApi": {"get": {
        "parameters": [*PAGE, OpenApiParameter("project_id", str)], "responses": {200: page_of(KNOWLEDGE_BASE)}}},
    "apps.knowledge.api.views.KnowledgeBaseCreateApi": {"post": {
        "request": "apps.knowledge.api.serializers.KnowledgeBaseCreateIn",
        "responses": {201: data_of(KNOWLEDGE_BASE)}}},
    "apps.knowledge.api.views.KnowledgeBaseGetApi": {"get": {"responses": {200: data_of(KNOWLEDGE_BASE)}}},
    "apps.knowledge.api.views.KnowledgeBaseUpdateApi": {"patch": {
        "request": "apps.knowledge.api.serializers.KnowledgeBaseUpdateIn",
        "responses": {200: data_of(KNOWLEDGE_BASE)}}},
    "apps.knowledge.api.views.KnowledgeBaseRebuildApi": {"post": {"request": None,
                                                                  "responses": {202: data_of(GENERATION)}}},
    "apps.knowledge.api.views.KnowledgeBaseRebuildGetApi": {"get": {"responses": {200: data_of(GENERATION)}}},
    "apps.knowledge.api.views.KnowledgeBaseReportApi": {"get": {"responses": {200: data_of(ANY_OBJECT)}}},
    "apps.knowledge.api.views.DocumentListApi": {"get": {
        "parameters": [*NEWEST_PAGE, OpenApiParameter("status", str),
                       OpenApiParameter("enabled", str, enum=["true", "false"],
                                        description="Only the documents that are on (true) or off (false).")],
        "responses": {200: page_of(DOCUMENT, cursor=True)}}},
    "apps.knowledge.api.views.DocumentUploadApi": {"post": {
        "request": MULTIPART_FILES, "responses": {201: data_of({"type": "array", "items": DOCUMENT})},
        "description": "Upload files (multipart), or register an external source with a JSON body "
                       "{\"url\": \"https://...\"} that the worker fetches."}},
    "apps.knowledge.api.views.DocumentGetApi": {"get": {"responses": {200: data_of(DOCUMENT)}}},
    "apps.knowledge.api.views.DocumentUpdateApi": {"patch": {
        "request": "apps.knowledge.api.serializers.DocumentUpdateIn", "responses": {200: data_of(DOCUMENT)},
        "description": "`enabled`: false turns the document off for every search and agent read (its chunks and "
                       "index stay); true turns it on again."}},
    "apps.knowledge.api.views.DocumentDeleteApi": {"delete": {"responses": {204: None}}},
    "apps.knowledge.api.views.DocumentChunkListApi": {"get": {"parameters": PAGE, "responses": {200: page_of(CHUNK)}}},
    "apps.knowledge.api.views.DocumentConfirmApi": {"post": {"request": None, "responses": {200: data_of(DOCUMENT)}}},
    "apps.knowledge.api.views.DocumentRetryApi": {"post": {"request": None, "responses": {200: data_of(DOCUMENT)}}},
    "apps.knowledge.api.views.DocumentReportApi": {"get": {"responses": {200: data_of(ANY_OBJECT)}}},
    "apps.knowledge.api.views.DocumentRefetchApi": {"post": {"request": None,
                                                             "responses": {202: data_of(DOCUMENT)}}},
    "apps.knowledge.api.search.KnowledgeBaseSearchApi": {"post": {
        "request": "apps.knowledge.api.search.KnowledgeSearchIn", "responses": {200: SEARCH_RESULT}}},
    "apps.answers.api.views.RagQueryApi": {"post": {
        "request": "apps.answers.api.serializers.RagQueryIn", "parameters": [RAG_PROJECT],
        "responses": {200: RAG_ANSWER},
        "description": "Answer a question from the route's knowledge with cited evidence. A dependency failure "
                       "is an answer with error_code DEPENDENCY_UNAVAILABLE, never a 5xx."}},
    "apps.answers.api.views.RagQueryListApi": {"get": {
        "parameters": [*NEWEST_PAGE, RAG_PROJECT,
                       OpenApiParameter("feedback", str, enum=["helpful", "unhelpful", "none", "any"]),
                       OpenApiParameter("grounded", str, enum=["true", "false"])],
        "responses": {200: page_of(RAG_RECORD, cursor=True)}}},
    "apps.answers.api.views.RagFeedbackApi": {"post": {
        "request": "apps.answers.api.serializers.RagFeedbackIn", "parameters": [RAG_PROJECT],
        "responses": {200: data_of(RAG_RECORD)}}},
    "apps.answers.api.views.RagReportApi": {"get": {
        "parameters": [RAG_PROJECT, OpenApiParameter("days", int, description="1–365; default 30.")],
        "responses": {200: RAG_REPORT}}},
    "apps.tools.api.views.ToolProviderListApi": {"get": {
        "parameters": [*PAGE, OpenApiParameter("project_id", str)], "responses": {200: page_of(TOOL_PROVIDER)}}},
    "apps.tools.api.views.ToolProviderCreateApi": {"post": {
        "request": "apps.tools.api.serializers.ToolProviderCreateIn",
        "responses": {201: data_of(TOOL_PROVIDER_DETAIL)}}},
    "apps.tools.api.views.ToolProviderGetApi": {"get": {"responses": {200: data_of(TOOL_PROVIDER_DETAIL)}}},
    "apps.tools.api.views.ToolProviderDeleteApi": {"delete": {"responses": {204: None}}},
    "apps.tools.api.views.ToolProviderSpecApi": {"put": {
        "request": "apps.tools.api.serializers.ToolProviderSpecIn", "responses": {200: data_of(SPEC_REPLACED)},
        "description": "Re-import the spec: the tool diff, and the routes whose capability revision changed."}},
    "apps.tools.api.views.RouteConfigGetApi": {"get": {
        "parameters": [ROUTE_PROJECT], "responses": {200: data_of(ROUTE_CONFIG)}}},
    "apps.tools.api.views.RouteConfigUpdateApi": {"patch": {
        "parameters": [ROUTE_PROJECT], "request": "apps.tools.api.serializers.RouteUpdateIn",
        "responses": {200: data_of(ROUTE_CONFIG)}}},
    "apps.tools.api.views.RouteDryRunApi": {"get": {
        "parameters": [ROUTE_PROJECT], "responses": {200: data_of(ROUTE_DRY_RUN)}}},
}


def _import(path: str):
    from django.utils.module_loading import import_string

    return import_string(path)


def _response(schema: Any) -> Any:
    return schema if schema is None or not isinstance(schema, dict) else OpenApiResponse(response=schema)


def _snake(name: str) -> str:
    return "".join(f"_{ch.lower()}" if ch.isupper() else ch for ch in name).lstrip("_")


def _view_extension(view_path: str, methods: dict[str, dict[str, Any]]) -> type[OpenApiViewExtension]:
    def view_replacement(self):
        described = {}
        name = _snake(self.target.__name__.removesuffix("Api"))
        for method, options in methods.items():
            options = dict(options)
            options.setdefault("operation_id", name if len(methods) == 1 else f"{name}_{method}")
            if isinstance(options.get("request"), str):
                options["request"] = _import(options["request"])
            options["responses"] = {status: _response(schema) for status, schema in options["responses"].items()}
            described[method] = extend_schema(**options)
        return extend_schema_view(**described)(type(self.target.__name__, (self.target,), {
            "__module__": self.target.__module__, "__doc__": self.target.__doc__, "described_view": self.target}))

    name = "Describe" + view_path.rsplit(".", 1)[1]
    return type(name, (OpenApiViewExtension,), {"target_class": view_path, "view_replacement": view_replacement})


# Task control (contracts-beyond-seeds §5): the agent's view and the builder API.
TASK_BOUND = [task_errors.TaskRequired, task_errors.TaskNotFound, task_errors.TaskScopeBlocked,
              task_errors.TaskCancelled, task_errors.TaskExpired]
ERRORS["apps.runtime.api.turns.TurnOpenApi"] += TASK_BOUND
for _view in ("apps.runtime.api.knowledge.KnowledgeSearchApi", "apps.runtime.api.knowledge.KnowledgeReadApi"):
    ERRORS[_view] += [task_errors.TaskRequired, task_errors.TaskScopeBlocked, task_errors.TaskCancelled,
                      task_errors.TaskExpired]
TASK_METERED = [task_errors.TaskRequired, task_errors.TaskToolNotAllowed, task_errors.TaskPaused,
                task_errors.TaskConcurrencyExhausted, task_errors.TaskWriteBudgetExhausted,
                task_errors.TaskScopeBlocked, task_errors.TaskCancelled, task_errors.TaskExpired]
ERRORS["apps.runtime.api.invocations.ToolInvocationApi"] += TASK_METERED
ERRORS["apps.runtime.api.invocations.ToolInvocationResumeApi"] += TASK_METERED
ERRORS["apps.runtime.api.invocations.ToolInvocationReceiptApi"] += [task_errors.TaskScopeBlocked]
ERRORS["apps.runtime.api.tools.CapabilitySearchApi"] += [task_errors.TaskRequired, task_errors.TaskScopeBlocked,
                                                         task_errors.TaskCancelled, task_errors.TaskExpired]
ERRORS.update({
    "apps.runtime.api.tasks.TaskControlCapabilitiesApi": [*AGENT, (400, "invalid_request")],
    "apps.runtime.api.tasks.TaskSnapshotApi": [*AGENT, (400, "invalid_request"), task_errors.TaskNotFound],
    "apps.tasks.api.views.TaskListApi": [*BUILDER, (400, "invalid_request")],
    "apps.tasks.api.views.TaskCreateApi": [*BUILDER, *WITH_BODY, task_errors.TaskInvalid,
                                           task_errors.TaskRequestConflict],
    "apps.tasks.api.views.TaskGetApi": [*BUILDER, task_errors.TaskNotFound],
    "apps.tasks.api.views.TaskControlApi": [*BUILDER, *WITH_BODY, task_errors.TaskNotFound, task_errors.ProjectReadOnly,
                                            task_errors.TaskInvalid, task_errors.TaskRequestConflict,
                                            task_errors.TaskRevisionConflict, task_errors.TaskTransitionInvalid],
})
TASK_COUNTERS = _object({"write_reserved": INTEGER, "write_consumed": INTEGER, "active_permits": INTEGER})
TASK_OUT = _object({"id": UUID, "project_id": UUID, "name": STRING, "state": STRING, "revision": INTEGER,
                    "ledger_sequence": INTEGER, "scope_hash": STRING, "member_count": INTEGER, "policy": ANY_OBJECT,
                    "counters": TASK_COUNTERS}, required=["id", "state", "revision", "scope_hash", "counters"])
OPERATIONS.update({
    "apps.runtime.api.tasks.TaskControlCapabilitiesApi": {"get": {"responses": {
        200: versioned("bailing.agent-task-control-capabilities.v1", {"supported": {"type": "boolean"},
                                                                      "mode": STRING}, ["supported", "mode"])}}},
    "apps.runtime.api.tasks.TaskSnapshotApi": {"get": {
        "parameters": [OpenApiParameter("workspace", str, required=True),
                       OpenApiParameter("client_conversation_id", str, required=True)],
        "responses": {200: versioned("bailing.agent-task.v1", {"task_id": UUID, "state": STRING,
                                                               "revision": INTEGER, "member": ANY_OBJECT,
                                                               "counters": TASK_COUNTERS},
                                     ["task_id", "state", "revision", "member", "counters"])}}},
    "apps.tasks.api.views.TaskListApi": {"get": {
        "parameters": [OpenApiParameter("project_id", str), OpenApiParameter("cursor", str),
                       OpenApiParameter("limit", int)],
        "responses": {200: _object({"data": {"type": "array", "items": TASK_OUT}, "meta": ANY_OBJECT},
                                   required=["data", "meta"])}}},
    "apps.tasks.api.views.TaskCreateApi": {"post": {"request": task_in.TaskCreateIn,
                                                    "responses": {201: data_of(TASK_OUT), 200: data_of(TASK_OUT)}}},
    "apps.tasks.api.views.TaskGetApi": {"get": {"responses": {200: data_of(TASK_OUT)}}},
    "apps.tasks.api.views.TaskControlApi": {"post": {"request": task_in.TaskControlIn,
                                                     "responses": {200: data_of(TASK_OUT)}}},
})


VIEW_EXTENSIONS = [_view_extension(path, methods) for path, methods in OPERATIONS.items()]


# --- authentication ----------------------------------------------------------------------------

class AgentBearerScheme(OpenApiAuthenticationExtension):
    target_class = "apps.agent_auth.authentication.AgentBearerAuthentication"
    name = "agentBearer"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "An agent session's access token (bha_…)."}


class ClientTokenScheme(OpenApiAuthenticationExtension):
    target_class = "apps.agent_auth.authentication.ClientTokenAuthentication"
    name = "clientToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "A business backend's client token (bhc_…)."}


class OperatorTokenScheme(OpenApiAuthenticationExtension):
    target_class = "apps.projects.authentication.OperatorTokenAuthentication"
    name = "operatorToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "An operator's personal API token (bhop_…), limited to its scopes."}


class PageContextFieldSchema(OpenApiSerializerFieldExtension):
    target_class = "apps.runtime.api.serializers.PageContextField"

    def map_serializer_field(self, auto_schema, direction):
        return {"type": "object", "description": "At most 16 KiB of canonical JSON."}


class TaskBindingFieldSchema(OpenApiSerializerFieldExtension):
    target_class = "apps.runtime.api.serializers.TaskBindingField"

    def map_serializer_field(self, auto_schema, direction):
        return {"type": "object", "additionalProperties": False,
                "required": ["schema_version", "task_id", "scope_hash"],
                "properties": {"schema_version": {"const": "bailing.agent-task-binding.v1"},
                               "task_id": {"type": "string", "format": "uuid"},
                               "scope_hash": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}}


class SpecFieldSchema(OpenApiSerializerFieldExtension):
    target_class = "apps.tools.api.serializers.SpecField"

    def map_serializer_field(self, auto_schema, direction):
        return {"oneOf": [{"type": "string", "description": "The OpenAPI 3.0/3.1 document's text, JSON or YAML."},
                          {"type": "object", "description": "The OpenAPI 3.0/3.1 document itself."}],
                "description": "At most 20 MiB; a refused spec is spec_refused with its reason."}


class UsageFieldSchema(OpenApiSerializerFieldExtension):
    target_class = "apps.runtime.api.serializers.UsageField"

    def map_serializer_field(self, auto_schema, direction):
        from apps.runtime.api.serializers import USAGE_KEYS, USAGE_MAX

        counter = {"type": "integer", "minimum": 0, "maximum": USAGE_MAX}
        return {"type": ["object", "null"], "properties": {key: counter for key in sorted(USAGE_KEYS)},
                "additionalProperties": False}


# --- generation --------------------------------------------------------------------------------

class AutoSchema(openapi.AutoSchema):
    def get_description(self) -> str:  # type: ignore[override]  # as drf-spectacular's own
        """An operation's own words: its handler's docstring, else its view's own. drf-spectacular
        fell back on a base class's, which says how the views are built ("`self.route` is checked
        by `tool_route_get`…", "Base of every builder API view…"), not what the operation does."""
        view_class = type(self.view)
        view_class = getattr(view_class, "described_view", view_class)  # a _view_extension's subclass
        handler = view_class.__dict__.get(self.method.lower())
        doc = (handler.__doc__ if handler is not None else None) or view_class.__dict__.get("__doc__")
        return inspect.cleandoc(doc) if doc else ""


class Enumerator(EndpointEnumerator):
    """Knows the builder API's one-URL-several-views dispatchers (`by_method`)."""

    def get_allowed_methods(self, callback):
        views = getattr(callback, "views", None)
        if views is None:
            return super().get_allowed_methods(callback)
        return [method for method in views if method not in ("OPTIONS", "HEAD")]

    def should_include_endpoint(self, path, callback):
        if not path.startswith(PUBLISHED_PREFIXES) or path in LEGACY_ALIASES:
            return False
        if getattr(callback, "views", None) is not None:
            return True
        return super().should_include_endpoint(path, callback)


class Generator(SchemaGenerator):
    endpoint_inspector_cls = Enumerator

    def _initialise_endpoints(self):
        super()._initialise_endpoints()
        self.endpoints = [
            (path, path_regex, method, callback.views[method] if getattr(callback, "views", None) else callback)
            for path, path_regex, method, callback in self.endpoints
        ]


def _view_path(view) -> str:
    cls = type(view)
    for klass in cls.__mro__:
        path = f"{klass.__module__}.{klass.__qualname__}"
        if path in ERRORS:
            return path
    return f"{cls.__module__}.{cls.__qualname__}"


ERROR_COMPONENT = "Error"


def error_schema(codes: list[str]) -> dict[str, Any]:
    return {"allOf": [{"$ref": f"#/components/schemas/{ERROR_COMPONENT}"},
                      {"type": "object", "properties": {"error": {"enum": codes}}}]}


# Operations whose body may be left out though its serializer has required fields (drf-spectacular
# then marks the body required): the agent's revoke with its bearer sends none.
OPTIONAL_BODIES = {"apps.agent_auth.api.views.RevokeApi"}


def complete_operations(result, generator, request, public):
    """One pass over the operations with the views that answer them: each lists its error answers
    (`Error.error` is the enum of every code), and a body OPTIONAL_BODIES names is not required."""
    every_code: set[str] = set()
    views = {(path, method.lower()): view for path, _regex, method, view in _described(generator)}
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            view = views.get((path, method))
            if view is None:
                continue
            view_path = _view_path(view)
            every_code.update(_list_errors(operation, view_path))
            if view_path in OPTIONAL_BODIES and "requestBody" in operation:
                operation["requestBody"].pop("required", None)
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas[ERROR_COMPONENT] = {
        "type": "object",
        "description": "Every error: a stable code, a human message, and extra fields some codes carry "
                       "(`fields` with the first field errors, `field_errors_total`, `retry_after`, …).",
        "properties": {"error": {"type": "string", "enum": sorted(every_code)}, "message": STRING,
                       "fields": {"type": "object", "additionalProperties": {"type": "array", "items": STRING}}},
        "required": ["error", "message"],
    }
    return result


def _list_errors(operation: dict[str, Any], view_path: str) -> set[str]:
    """The operation's error answers, one response per status; the codes it lists."""
    has_path = any(p.get("in") == "path" for p in operation.get("parameters", []))
    codes_by_status = error_codes(view_path, has_body="requestBody" in operation)
    if has_path:  # a segment its URL pattern does not match is the router's 404
        codes_by_status[404] = sorted({*codes_by_status.get(404, []), "not_found"})
    listed: set[str] = set()
    for status, codes in sorted(codes_by_status.items()):
        listed.update(codes)
        operation.setdefault("responses", {})[str(status)] = {
            "description": ", ".join(codes),
            "content": {"application/json": {"schema": error_schema(codes)}},
        }
    return listed


def _described(generator):
    for path, path_regex, method, callback in generator.endpoints:
        view = generator.create_view(callback, method)
        yield generator.coerce_path(path, method, view), path_regex, method, view
