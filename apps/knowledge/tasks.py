"""Thin Celery wrappers around apps.knowledge.ingest. Each takes ids and is safe to run twice."""

from __future__ import annotations

from celery import shared_task

from apps.knowledge import ingest


@shared_task(name="knowledge.document_ingest", ignore_result=True)
def document_ingest_task(document_id: str, run_token: str | None = None) -> str:
    return ingest.document_ingest(document_id=document_id, run_token=run_token)


@shared_task(name="knowledge.kb_rebuild", ignore_result=True)
def kb_rebuild_task(generation_id: str, run_token: str | None = None) -> str:
    return ingest.generation_build(generation_id=generation_id, run_token=run_token)


@shared_task(name="knowledge.watchdog", ignore_result=True)
def watchdog_task() -> dict:
    return ingest.knowledge_watchdog()
