"""Memory notes for agents: the principal's route notes (`/memories`) and project notes
(`/project-memories`) on a workspace. Every success is 200 with a JSON body."""

from __future__ import annotations

from rest_framework.response import Response

from apps.core.errors import InvalidRequest
from apps.core.jsonbytes import iso_utc, json_bytes
from apps.core.query import query_repeated_check
from apps.ledger.models import MemoryNote
from apps.ledger.selectors import (
    PROJECT_NOTES_LIMIT_DEFAULT,
    ROUTE_NOTES_LIMIT_DEFAULT,
    project_note_get,
    project_note_list,
    route_note_get,
    route_note_list,
)
from apps.ledger.services import memory_note_create, memory_note_delete, memory_note_update
from apps.runtime.api.base import WorkspaceApi
from apps.runtime.api.serializers import ProjectNoteSerializer, RouteNoteSerializer

MEMORIES_SCHEMA = "bailing.agent-memories.v1"


def _limit(request, default: int) -> int:
    query_repeated_check(request.query_params)  # `?limit=1&limit=50` read the last one
    raw = request.query_params.get("limit")
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise InvalidRequest("limit must be an integer.", fields={"limit": ["A valid integer is required."]}) from exc


def _note(note: MemoryNote) -> dict:
    return {"id": str(note.pk), "content": note.content, "updated_at": iso_utc(note.updated_at)}


# Agent hosts refuse answers over 1 MiB; a listing stays well under it whatever the notes hold.
LISTING_MAX_BYTES = 1024 * 1024 - 16 * 1024


def _listing(scope: str, notes: list[MemoryNote], *, max_bytes: int = LISTING_MAX_BYTES) -> dict:
    """The newest notes that fit `max_bytes` of JSON, whole notes only; when some are left out,
    `truncated` is true and `omitted` counts them (ask again with a smaller `limit`)."""
    listing: dict = {"schema_version": MEMORIES_SCHEMA, "scope": scope, "memories": []}
    used = json_bytes({**listing, "truncated": True, "omitted": len(notes)})
    for index, note in enumerate(notes):
        entry = _note(note)
        size = json_bytes(entry) + 1  # and its comma
        if used + size > max_bytes:
            listing.update(truncated=True, omitted=len(notes) - index)
            break
        listing["memories"].append(entry)
        used += size
    return listing


def _saved(status: str, note: MemoryNote) -> dict:
    return {"status": status, "memory_id": str(note.pk), "content": note.content}


def _content(serializer_class, request) -> str:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data["content"]


class RouteMemoriesApi(WorkspaceApi):
    """GET lists (limit 1–100, default 20, most recently updated first); POST saves."""

    def get(self, request, route):
        notes = route_note_list(route=self.route, session=request.auth,
                                limit=_limit(request, ROUTE_NOTES_LIMIT_DEFAULT))
        return Response(_listing(MemoryNote.Scope.ROUTE, notes))

    def post(self, request, route):
        content = _content(RouteNoteSerializer, request)
        note = memory_note_create(session=request.auth, project=self.route.project, route=self.route, content=content)
        return Response(_saved("saved", note))


class _MemoryNoteApi(WorkspaceApi):
    """PATCH updates, DELETE deletes one of the principal's notes of one scope; any other id is 404."""

    serializer_class: type[RouteNoteSerializer] | type[ProjectNoteSerializer]

    def _get(self, request, memory_id) -> MemoryNote:
        raise NotImplementedError

    def patch(self, request, route, memory_id):
        note = self._get(request, memory_id)
        note = memory_note_update(note=note, content=_content(self.serializer_class, request))
        return Response(_saved("updated", note))

    def delete(self, request, route, memory_id):
        note = self._get(request, memory_id)
        memory_note_delete(note=note)
        return Response({"status": "deleted", "memory_id": str(note.pk)})


class RouteMemoryApi(_MemoryNoteApi):
    """PATCH updates, DELETE deletes one of the principal's route notes; any other id is 404."""

    serializer_class = RouteNoteSerializer

    def _get(self, request, memory_id) -> MemoryNote:
        return route_note_get(route=self.route, session=request.auth, note_id=memory_id)


class ProjectMemoriesApi(WorkspaceApi):
    """GET lists (limit 1–50, default 12, newest first); POST saves (at most 2000 characters)."""

    def get(self, request, route):
        notes = project_note_list(project=self.route.project, session=request.auth,
                                  limit=_limit(request, PROJECT_NOTES_LIMIT_DEFAULT))
        return Response(_listing(MemoryNote.Scope.PROJECT, notes))

    def post(self, request, route):
        content = _content(ProjectNoteSerializer, request)
        note = memory_note_create(session=request.auth, project=self.route.project, route=None, content=content)
        return Response(_saved("saved", note))


class ProjectMemoryApi(_MemoryNoteApi):
    """PATCH updates, DELETE deletes one of the principal's project notes; any other id is 404."""

    serializer_class = ProjectNoteSerializer

    def _get(self, request, memory_id) -> MemoryNote:
        return project_note_get(project=self.route.project, session=request.auth, note_id=memory_id)
