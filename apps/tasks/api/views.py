"""Builder API for task control: list (cursor pages by stable order), create (idempotent by
request_id), read with runs and ledger, control with compare-and-set. Scope `tasks:write` for writes."""

from __future__ import annotations

import uuid
from typing import Any

from rest_framework.response import Response

from apps.core.errors import InvalidRequest
from apps.core.validators import uuid_parse
from apps.projects.builder import BuilderApi, builder_validated, query_integer
from apps.tasks import selectors, services
from apps.tasks.api.serializers import TaskControlIn, TaskCreateIn, task_detail_out, task_out
from apps.tasks.errors import TaskInvalid

SCOPE_WRITE = "tasks:write"
LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX = 50, 200


def _validated(serializer_class: Any, data: Any) -> dict[str, Any]:
    return builder_validated(serializer_class, data, error=TaskInvalid)


def _query_uuid(request: Any, name: str) -> uuid.UUID | None:
    values = request.query_params.getlist(name)
    if not values:
        return None
    value = uuid_parse(values[0]) if len(values) == 1 else None
    if value is None:
        raise InvalidRequest(f"{name}: A UUID is required.", fields={name: ["A UUID is required."]})
    return value


class TaskBuilderApi(BuilderApi):
    scope_family = "tasks"
    invalid_error = TaskInvalid


class TaskListApi(TaskBuilderApi):
    def get(self, request):
        unknown = sorted(set(request.query_params) - {"project_id", "cursor", "limit"})
        if unknown:
            raise InvalidRequest(f"Unknown query parameter: {unknown[0][:64]}.")
        queryset = selectors.task_list_after(user=request.user, project_id=_query_uuid(request, "project_id"),
                                             cursor=_query_uuid(request, "cursor"))
        limit = query_integer(request, "limit", LIST_LIMIT_DEFAULT, 1, LIST_LIMIT_MAX)
        tasks = list(queryset[: limit + 1])
        more = len(tasks) > limit
        tasks = tasks[:limit]
        return Response({"data": [task_out(task) for task in tasks],
                         "meta": {"limit": limit, "next_cursor": str(tasks[-1].pk) if more else None}})


class TaskCreateApi(TaskBuilderApi):
    required_scope = SCOPE_WRITE

    def post(self, request):
        data = _validated(TaskCreateIn, request.data)
        project = selectors.project_editable_get(user=request.user, project_id=str(data["project_id"]))
        if project is None:
            raise TaskInvalid("project_id: No such project you may change.",
                              fields={"project_id": ["No such project you may change."]})
        policy = data.get("policy") or {}
        task, created = services.task_create(
            project=project, user=request.user, request_id=data["request_id"], name=data["name"],
            members=[services.MemberSpec(session_id=m["session_id"], workspace=m["workspace"],
                                         client_conversation_id=m["client_conversation_id"],
                                         allowed_tools=tuple(m["allowed_tools"]),
                                         client_app_id=m.get("client_app_id")) for m in data["members"]],
            policy=services.PolicySpec(max_write_calls=policy.get("max_write_calls"),
                                       max_concurrent=policy.get("max_concurrent", 1),
                                       expires_at=policy.get("expires_at")))
        return Response({"data": task_out(task), "created": created}, status=201 if created else 200)


class TaskGetApi(TaskBuilderApi):
    def get(self, request, task_id):
        task = services.task_state_current(task=selectors.task_get_visible(user=request.user, task_id=task_id))
        return Response({"data": task_detail_out(task, runs=selectors.task_runs_summary(task=task))})


class TaskControlApi(TaskBuilderApi):
    required_scope = SCOPE_WRITE

    def post(self, request, task_id):
        task = selectors.task_get_editable(user=request.user, task_id=task_id)
        data = _validated(TaskControlIn, request.data)
        task = services.task_control(task=task, user=request.user, request_id=data["request_id"],
                                     expected_revision=data["expected_revision"], action=data["action"])
        return Response({"data": task_out(task)})
