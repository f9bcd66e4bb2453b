"""Inputs and outputs of the RAG answers API."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from apps.core.fields import ExactFieldsSerializer, JSONBooleanField, JSONStringField
from apps.ledger.models import RAG_CONVERSATION_ID_MAX_CHARS, RAG_NOTE_MAX_CHARS, RAG_QUESTION_MAX_CHARS, RagQuery


class RagQueryIn(ExactFieldsSerializer):
    question = JSONStringField(min_length=1, max_length=RAG_QUESTION_MAX_CHARS, trim_whitespace=True)
    conversation_id = JSONStringField(max_length=RAG_CONVERSATION_ID_MAX_CHARS, required=False, allow_blank=True,
                                      allow_null=True, default="", trim_whitespace=False)

    def validate_question(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("This field may not be blank.")
        return value


class RagFeedbackIn(ExactFieldsSerializer):
    helpful = JSONBooleanField()
    # Optional: left out, empty or null all mean no note.
    note = JSONStringField(max_length=RAG_NOTE_MAX_CHARS, required=False, allow_blank=True, allow_null=True,
                           default="", trim_whitespace=False)

    def validate_note(self, value: str | None) -> str:
        return value or ""


def rag_query_out(query: RagQuery) -> dict[str, Any]:
    return {
        "query_id": str(query.pk),
        "created_at": query.created_at.isoformat(),
        "question": query.question,
        "conversation_id": query.conversation_id or None,
        "answer": query.answer,
        "evidence": query.evidence,
        "confidence": query.confidence,
        "used_web_search": False,
        "trace": query.trace,
        "grounded": query.grounded,
        "useful": query.useful,
        "missing_points": query.missing_points,
        "error_code": query.error_code or None,
        "error_message": query.error_message or None,
        "interaction_mode": query.interaction_mode,
        "generator": query.generator,
        "latency_ms": query.latency_ms,
        "feedback": None if query.helpful is None else {
            "helpful": query.helpful, "note": query.feedback_note,
            "at": query.feedback_at.isoformat() if query.feedback_at else None},
    }
