"""The builder API's approval decision: ``POST /api/v1/builder/approvals/{id}/decision``, operator
token scope ``approvals:decide``, scoped to the projects the operator may edit (another project's
approval is 404). The decision is ``apps.tools.approvals.approval_decide``, as in the admin."""

from __future__ import annotations

import re
from typing import Any

from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from apps.core.errors import InvalidRequest
from apps.core.exceptions import validation_extra, validation_message
from apps.core.fields import ExactFieldsSerializer, JSONStringField
from apps.core.validators import validate_shown_text
from apps.projects.builder import BuilderApi
from apps.projects.models import OperatorToken
from apps.projects.selectors import project_list_editable
from apps.tools.approvals import approval_answer, approval_decide

DECISION_BODY_MAX_BYTES = 16 * 1024
_DECISION_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def _decision_id(value: str) -> None:
    if not _DECISION_ID.fullmatch(value):
        raise serializers.ValidationError("1–128 characters of letters, digits and . _ : -")


class DecisionIn(ExactFieldsSerializer):
    decision_id = JSONStringField(max_length=128, trim_whitespace=False, validators=[_decision_id])
    decision = serializers.ChoiceField(choices=["approved", "denied"])
    comment = JSONStringField(max_length=2000, required=False, allow_blank=True, default="", trim_whitespace=False,
                              validators=[validate_shown_text])

    def validate_decision(self, value: Any) -> str:
        if not isinstance(self.initial_data.get("decision"), str):
            raise serializers.ValidationError("Give \"approved\" or \"denied\".")
        return str(value)


class ApprovalDecisionApi(BuilderApi):
    required_scope = OperatorToken.Scope.APPROVALS_DECIDE
    scope_family = "approvals"
    body_max_bytes = DECISION_BODY_MAX_BYTES

    def post(self, request: Request, approval_id: str) -> Response:
        serializer = DecisionIn(data=request.data)
        if not serializer.is_valid():
            extra = validation_extra(serializer.errors)
            raise InvalidRequest(validation_message(extra["fields"]), **extra)
        data = serializer.validated_data
        approval = approval_decide(approval_id=approval_id, projects=project_list_editable(user=request.user),
                                   decision_id=data["decision_id"], decision=data["decision"],
                                   comment=data["comment"], approver=request.user)
        return Response({"data": approval_answer(approval)})
