"""Writes of RAG query records (RagQuery): the record of an answer, and the feedback on it.

A record is written after the answer is ready, in its own savepoint, so a failing write can be
rolled back on its own and the caller can still return the answer (`query_id: null`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from apps.ledger.models import RagQuery
from apps.routes.models import Route


@dataclass(frozen=True)
class RagRecord:
    """What an answer records; the twelve public fields minus the id, plus how it was made."""

    question: str
    answer: str
    evidence: list[dict[str, Any]]
    confidence: float
    grounded: bool
    useful: bool
    missing_points: list[str]
    error_code: str | None
    error_message: str | None
    interaction_mode: str
    trace: list[dict[str, Any]]
    latency_ms: int
    generator: str = ""
    conversation_id: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def rag_query_record(*, route: Route, record: RagRecord, user=None) -> RagQuery:
    """Store one answered question. Raises DatabaseError when the write fails (the savepoint is
    rolled back, so an enclosing transaction stays usable)."""
    with transaction.atomic():
        return RagQuery.objects.create(
            project_id=route.project_id, route=route, asked_by=user if getattr(user, "pk", None) else None,
            conversation_id=record.conversation_id, question=record.question, answer=record.answer,
            evidence=record.evidence, confidence=record.confidence, grounded=record.grounded,
            useful=record.useful, missing_points=record.missing_points, error_code=record.error_code or "",
            error_message=(record.error_message or "")[:500], interaction_mode=record.interaction_mode,
            generator=record.generator, trace=record.trace, latency_ms=record.latency_ms,
        )


@transaction.atomic
def rag_query_feedback(*, query: RagQuery, helpful: bool, note: str = "") -> RagQuery:
    """Record (or replace) the feedback on an answer: the latest word counts."""
    locked = RagQuery.objects.select_for_update().get(pk=query.pk)
    locked.helpful = helpful
    locked.feedback_note = note
    locked.feedback_at = timezone.now()
    locked.save(update_fields=["helpful", "feedback_note", "feedback_at", "updated_at"])
    return locked
