"""Governed tool invocations for agents (`bailing.agent-tool-invocation.v1`): invoke, resume,
receipt and inspection capabilities. The budgets come first — the raw body is streamed and
refused past 2 MiB by the body-size middleware in this endpoint's own 413 shape, the arguments past
1 MiB here, before authentication or any check — then the route checks in the tool contract's
order, the run, and the engine (apps.tools.invocations)."""

from __future__ import annotations

import re
from typing import Any

from rest_framework import serializers
from rest_framework.exceptions import ParseError
from rest_framework.request import Request
from rest_framework.response import Response

from apps.core.errors import InvalidRequest, malformed_body
from apps.core.fields import ExactFieldsSerializer, JSONObjectField, JSONUUIDField, StrictCharField
from apps.core.jsonbytes import CompactJSONRenderer
from apps.ledger.models import Run
from apps.ledger.selectors import run_get_for_route
from apps.routes.validators import TOOL_NAME_RE
from apps.runtime.api.base import AgentApi, tool_route_get
from apps.runtime.tool_builtins import builtin_run
from apps.tasks.metering import receipt_task_check
from apps.tools import invocations
from apps.tools.invocation_errors import (
    ARGUMENTS_MAX_BYTES,
    REQUEST_BODY_MAX_BYTES,
    ArgumentsTooLarge,
    body_too_large_payload,
)

RESUME_BODY_MAX_BYTES = 1024
HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _hex64(value: str) -> None:
    if not HEX64.fullmatch(value):
        raise serializers.ValidationError("Give 64 lower-case hex characters.")


def _tool_name(value: str) -> None:
    if not TOOL_NAME_RE.fullmatch(value):
        raise serializers.ValidationError("A tool name is ^[A-Za-z_][A-Za-z0-9_]{0,63}$.")


class InvocationSerializer(ExactFieldsSerializer):
    invocation_id = StrictCharField(max_length=64, trim_whitespace=False, validators=[_hex64])
    route = StrictCharField(max_length=64, trim_whitespace=False)
    capability_revision = StrictCharField(max_length=64, trim_whitespace=False, validators=[_hex64])
    agent_run_id = JSONUUIDField()
    tool = StrictCharField(max_length=64, trim_whitespace=False, validators=[_tool_name])
    arguments = JSONObjectField()


class ResumeSerializer(ExactFieldsSerializer):
    """The resume body: exactly ``{}``."""


def _body(request: Request) -> Any:
    data = request.data
    if not isinstance(data, dict):
        raise InvalidRequest("The body must be a JSON object.")
    return data


def _no_query(request: Request) -> None:
    if request.query_params:
        name = next(iter(request.query_params))
        raise InvalidRequest("This endpoint takes no query parameters.", field=name[:64])


class InvocationApi(AgentApi):
    renderer_classes = [CompactJSONRenderer]


class ToolInvocationApi(InvocationApi):
    body_max_bytes = REQUEST_BODY_MAX_BYTES
    body_too_large_payload = staticmethod(body_too_large_payload)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # Budgets before anything else, authentication included: a call over budget is refused
        # the same way whoever sends it. A body that cannot be read at all is refused after
        # authentication, so a caller whose token has expired hears 401 and refreshes. Only a
        # POST's body is a call: another method is answered 405 unread.
        if request.method != "POST":
            super().initial(request, *args, **kwargs)
            return
        try:
            data = request.data
        except ParseError as exc:
            super().initial(request, *args, **kwargs)
            raise malformed_body(exc.detail) from None
        if isinstance(data, dict) and "arguments" in data:
            size = invocations.arguments_bytes(data["arguments"])
            if size > ARGUMENTS_MAX_BYTES:
                raise ArgumentsTooLarge.arguments(actual_bytes=size)
        super().initial(request, *args, **kwargs)

    def post(self, request: Request) -> Response:
        data = _body(request)
        route = tool_route_get(session=self.session, key=data.get("route"), require_runtime=True)
        serializer = InvocationSerializer(data=data)
        serializer.is_valid(raise_exception=True)
        valid = serializer.validated_data
        run = run_get_for_route(session=self.session, route=route, run_id=valid["agent_run_id"])
        call = invocations.InvokeCall(invocation_id=valid["invocation_id"], tool=valid["tool"],
                                      capability_revision=valid["capability_revision"], arguments=valid["arguments"])
        return Response(invocations.invocation_invoke(session=self.session, route=route, run=run,
                                                      run_active=run.state == Run.State.CONTEXT_READY, call=call,
                                                      builtin=builtin_run))


class ToolInvocationResumeApi(InvocationApi):
    body_max_bytes = RESUME_BODY_MAX_BYTES

    def post(self, request: Request, invocation_id: str) -> Response:
        data = _body(request) if request.stream is not None else {}
        ResumeSerializer(data=data).is_valid(raise_exception=True)
        inv = invocations.invocation_get_for_session(session=self.session, invocation_id=invocation_id)
        tool_route_get(session=self.session, key=inv.route.key, require_runtime=True)
        return Response(invocations.invocation_resume(session=self.session, inv=inv))


class ToolInvocationReceiptApi(InvocationApi):
    def get(self, request: Request, invocation_id: str) -> Response:
        _no_query(request)
        inv = invocations.invocation_get_for_session(session=self.session, invocation_id=invocation_id)
        tool_route_get(session=self.session, key=inv.route.key, require_runtime=True)
        invocations.invocation_tool_check(session=self.session, inv=inv)
        receipt_task_check(run_id=inv.run_id)
        return Response(invocations.invocation_receipt(inv=inv))


class ToolInvocationInspectionApi(InvocationApi):
    def get(self, request: Request) -> Response:
        _no_query(request)
        return Response(invocations.inspection_capabilities())
