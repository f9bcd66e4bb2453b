"""Turn and completion endpoints of Agent Client Runtime v1 (512 KiB raw bodies, streamed check)."""

from __future__ import annotations

from rest_framework.response import Response

from apps.agent_auth.selectors import session_route_get
from apps.ledger.selectors import run_get_for_session
from apps.ledger.services import run_complete
from apps.runtime.api.base import AgentApi, WorkspaceApi
from apps.runtime.api.serializers import CompletionSerializer, TurnSerializer
from apps.runtime.turns import TurnRequest, completion_response, turn_open, turn_response

TURN_BODY_MAX_BYTES = 512 * 1024


class TurnOpenApi(WorkspaceApi):
    body_max_bytes = TURN_BODY_MAX_BYTES

    def post(self, request, route):
        serializer = TurnSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        turn = TurnRequest(**serializer.validated_data)
        run = turn_open(session=request.auth, route=self.route, request=turn)
        return Response(turn_response(run=run))


class RunCompleteApi(AgentApi):
    body_max_bytes = TURN_BODY_MAX_BYTES

    def post(self, request, run_id):
        run = run_get_for_session(session=request.auth, run_id=run_id)
        # Authorization is recomputed on every request: the run's route must still be usable.
        session_route_get(session=request.auth, key=run.route.key, require_runtime=True)
        serializer = CompletionSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        run = run_complete(run=run, **serializer.validated_data)
        return Response(completion_response(run=run))
