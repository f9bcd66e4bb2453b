"""Thin Celery wrappers of the tools app. The dispatcher is the only code that sends a business call."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from apps.tools import delivery, invocations, semantic


# Acknowledged late and rejected when its worker is lost, so a message is never dropped; run twice,
# the service sends nothing twice (a claimed call without an answer becomes uncertain).
@shared_task(name=invocations.DISPATCH_TASK, ignore_result=True, acks_late=True, reject_on_worker_lost=True,
             soft_time_limit=settings.TOOL_DISPATCH_TASK_TIME_LIMIT,
             time_limit=settings.TOOL_DISPATCH_TASK_TIME_LIMIT + 30)
def invocation_dispatch_task(invocation_pk: str) -> str:
    return delivery.invocation_dispatch(invocation_pk=invocation_pk)


@shared_task(name=semantic.INDEX_REBUILD, ignore_result=True)
def tool_index_rebuild_task(provider_id: str) -> dict[str, int]:
    return semantic.index_rebuild(provider_id=provider_id)


@shared_task(name=invocations.WATCHDOG_TASK, ignore_result=True)
def invocation_watchdog_task() -> dict[str, int]:
    return invocations.invocation_watchdog()
