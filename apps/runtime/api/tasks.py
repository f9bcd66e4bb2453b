"""Task control for agents (contracts-beyond-seeds §5): the capabilities document and the caller's
own view of a task. Only operators create and control tasks."""

from __future__ import annotations

from rest_framework.response import Response

from apps.core.errors import InvalidRequest
from apps.runtime.api.base import AgentApi
from apps.tasks.selectors import task_control_capabilities, task_member_get, task_snapshot
from apps.tasks.services import session_task_enforced, task_state_current

_SNAPSHOT_PARAMS = {"workspace", "client_conversation_id"}


class TaskControlCapabilitiesApi(AgentApi):
    def get(self, request):
        if request.query_params:
            raise InvalidRequest("This endpoint takes no query parameters.")
        return Response(task_control_capabilities(enforced=session_task_enforced(session=self.session)))


class TaskSnapshotApi(AgentApi):
    def get(self, request, task_id):
        params = request.query_params
        unknown = sorted(set(params) - _SNAPSHOT_PARAMS)
        if unknown:
            raise InvalidRequest(f"Unknown query parameter: {unknown[0][:64]}.")
        values = {}
        for name in sorted(_SNAPSHOT_PARAMS):
            given = params.getlist(name)
            # Printable: a NUL reached the database, which refuses it (500).
            if len(given) != 1 or not given[0] or len(given[0]) > 255 or not given[0].isprintable():
                raise InvalidRequest(f"{name}: exactly one value of 1 to 255 printable characters is required.",
                                     fields={name: ["Exactly one value of 1 to 255 printable characters is "
                                                    "required."]})
            values[name] = given[0]
        member = task_member_get(session=self.session, task_id=task_id, **values)
        # A revoked or expired member blocks the task: the snapshot says so (§5), as a bound call would.
        return Response(task_snapshot(member=member, task=task_state_current(task=member.task)))
