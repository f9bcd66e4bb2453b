"""Request shapes of turns, completions and memory notes: exact fields, exact limits.

Nothing is trimmed, replaced or dropped: a value that breaks a rule is 400 `invalid_request`
naming its field. Text may hold tab, line feed and carriage return; any other C0/C1 control
character (DEL included) or a lone surrogate is refused.
"""

from __future__ import annotations

import re
from typing import Any

from rest_framework import serializers

from apps.core.fields import BoundedListField, ExactFieldsSerializer, StrictCharField
from apps.core.jsonbytes import json_bytes

USER_INPUT_MAX_CHARS = 64_000
CONTENT_MAX_CHARS = 64_000
ID_MAX_CHARS = 191
PAGE_CONTEXT_MAX_BYTES = 16 * 1024
PAGE_CONTEXT_MAX_DEPTH = 32
RENDERERS_MAX = 20
RENDERER_RE = re.compile(r"^[a-z][a-z0-9._-]{0,63}$")
USAGE_KEYS = ("input_tokens", "cached_input_tokens", "output_tokens", "total_tokens", "tool_calls")
USAGE_MAX = 2**53 - 1
ROUTE_NOTE_MAX_CHARS = 8000
PROJECT_NOTE_MAX_CHARS = 2000

_DISALLOWED = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


def text_problem(value: str) -> str | None:
    match = _DISALLOWED.search(value)
    if match:
        return f"Control character or lone surrogate U+{ord(match.group()):04X} is not allowed."
    return None


def allowed_characters(value: str) -> None:
    problem = text_problem(value)
    if problem:
        raise serializers.ValidationError(problem)


def printable_id(value: str) -> None:
    if not value.isprintable():
        raise serializers.ValidationError("Ids are 1–191 printable characters.")


def _text(max_length: int, **kwargs) -> StrictCharField:
    return StrictCharField(max_length=max_length, trim_whitespace=False, validators=[allowed_characters], **kwargs)


def _id(**kwargs) -> StrictCharField:
    return StrictCharField(min_length=1, max_length=ID_MAX_CHARS, trim_whitespace=False,
                           validators=[printable_id], **kwargs)


class PageContextField(serializers.Field):
    """A JSON object of at most 16 KiB as the turn's answer sends it back (compact UTF-8 JSON, U+2028 and
    U+2029 escaped) whose keys and strings obey the text rules."""

    default_error_messages = {"invalid": "page_context must be a JSON object."}

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            self.fail("invalid")
        problem = _json_problem(data, "page_context", 0)
        if problem:
            raise serializers.ValidationError(problem)
        size = json_bytes(data)
        if size > PAGE_CONTEXT_MAX_BYTES:
            raise serializers.ValidationError(
                f"page_context is {size} bytes as JSON; at most {PAGE_CONTEXT_MAX_BYTES} are allowed."
            )
        return data

    def to_representation(self, value):
        return value


def _json_problem(value: Any, path: str, depth: int) -> str | None:
    if depth > PAGE_CONTEXT_MAX_DEPTH:
        return f"{path}: nested deeper than {PAGE_CONTEXT_MAX_DEPTH} levels."
    if isinstance(value, str):
        problem = text_problem(value)
        return f"{path}: {problem}" if problem else None
    if isinstance(value, dict):
        for key, item in value.items():
            problem = text_problem(key)
            if problem:
                return f"{path}: key: {problem}"
            problem = _json_problem(item, f"{path}.{key[:64]}", depth + 1)
            if problem:
                return problem
    if isinstance(value, list):
        for index, item in enumerate(value):
            problem = _json_problem(item, f"{path}[{index}]", depth + 1)
            if problem:
                return problem
    return None


class RenderersField(BoundedListField):
    def __init__(self, **kwargs):
        super().__init__(child=StrictCharField(trim_whitespace=False), max_length=RENDERERS_MAX, **kwargs)

    def to_internal_value(self, data):
        names = super().to_internal_value(data)
        for name in names:
            if not RENDERER_RE.fullmatch(name):
                raise serializers.ValidationError(
                    f"'{name[:64]}' is not a renderer name (^[a-z][a-z0-9._-]{{0,63}}$)."
                )
        if len(set(names)) != len(names):
            raise serializers.ValidationError("Renderer names must be unique.")
        return names


_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
TASK_BINDING_SCHEMA = "bailing.agent-task-binding.v1"


class TaskBindingField(serializers.Field):
    """`{schema_version: "bailing.agent-task-binding.v1", task_id, scope_hash}`, exactly."""

    default_error_messages = {"invalid": "task_binding must be a JSON object."}

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            self.fail("invalid")
        errors: dict[str, list[str]] = {}
        for key in data:
            if key not in ("schema_version", "task_id", "scope_hash"):
                errors[str(key)[:64]] = ["Unknown field."]
        if data.get("schema_version") != TASK_BINDING_SCHEMA:
            errors["schema_version"] = [f'Must be "{TASK_BINDING_SCHEMA}".']
        if not isinstance(data.get("task_id"), str) or not _UUID.fullmatch(data["task_id"]):
            errors["task_id"] = ["A lower-case UUID is required."]
        if not isinstance(data.get("scope_hash"), str) or not _HEX64.fullmatch(data["scope_hash"]):
            errors["scope_hash"] = ["64 lower-case hex characters are required."]
        if errors:
            raise serializers.ValidationError(errors)
        return {"schema_version": TASK_BINDING_SCHEMA, "task_id": data["task_id"], "scope_hash": data["scope_hash"]}

    def to_representation(self, value):
        return value


class TurnSerializer(ExactFieldsSerializer):
    client_conversation_id = _id()
    client_turn_id = _id()
    user_message_id = _id()
    user_input = _text(USER_INPUT_MAX_CHARS)
    page_context = PageContextField(required=False)
    renderers = RenderersField(required=False)
    knowledge_delivery = serializers.ChoiceField(choices=["inline", "on_demand"], required=False)
    task_binding = TaskBindingField(required=False)


class UsageField(serializers.Field):
    """Known counters only, each a non-negative integer (booleans and floats are refused)."""

    default_error_messages = {"invalid": "usage must be a JSON object."}

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            self.fail("invalid")
        errors = {key: ["Unknown field."] for key in data if key not in USAGE_KEYS}
        for key, value in data.items():
            if key in USAGE_KEYS and (
                isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= USAGE_MAX
            ):
                errors[key] = ["A non-negative integer is required."]
        if errors:
            raise serializers.ValidationError(errors)
        return dict(data)

    def to_representation(self, value):
        return value


class CompletionSerializer(ExactFieldsSerializer):
    """No field for hidden reasoning: sending one is an unknown field, 400, and nothing is stored."""

    assistant_message_id = _id()
    status = serializers.ChoiceField(choices=["completed", "failed", "cancelled"])
    content = _text(CONTENT_MAX_CHARS, required=False, allow_blank=True, default="")
    model = _text(ID_MAX_CHARS, required=False, allow_blank=True, allow_null=True, default=None)
    runtime = _text(ID_MAX_CHARS, required=False, allow_blank=True, allow_null=True, default=None)
    usage = UsageField(required=False, allow_null=True, default=None)


def _note_content(max_length: int) -> StrictCharField:
    return _text(max_length, allow_blank=True)


class _NoteSerializer(ExactFieldsSerializer):
    def validate_content(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("A memory note needs some content.")
        return value


class RouteNoteSerializer(_NoteSerializer):
    content = _note_content(ROUTE_NOTE_MAX_CHARS)


class ProjectNoteSerializer(_NoteSerializer):
    content = _note_content(PROJECT_NOTE_MAX_CHARS)
