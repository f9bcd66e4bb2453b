"""What the worker's main process does when the process running a pipeline task dies or is killed
at its hard time limit (apps.knowledge.tasks.PipelineRequest): its decisions, one by one, on real
rows. Celery's message is its test double (celery.contrib.testing.mocks.TaskMessage); what
Celery then does with it (requeue, acknowledge) is recorded. A pool process killed for real (kill
-9) is in test_ingest_leases; the hard time limit is here only: its firing is the pool's, and in a
whole suite's run the pool once let a task with a 5 s limit run its 20 s to the end."""

from __future__ import annotations

import logging

import pytest
from billiard.einfo import ExceptionInfo
from billiard.exceptions import WorkerLostError
from celery.contrib.testing.mocks import TaskMessage
from celery.exceptions import TimeLimitExceeded
from django.utils import timezone

from apps.knowledge import services, watchdog
from apps.knowledge.dispatch import DOCUMENT_INGEST
from apps.knowledge.leases import lease_stale_before, task_claim_token
from apps.knowledge.models import Document
from apps.knowledge.tasks import PipelineRequest, document_ingest_task
from bailinghub.celery import app as celery_app
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import upload

pytestmark = pytest.mark.django_db(transaction=True)

FIELDS = ("status", "run_token", "attempts", "heartbeat_at", "error_code")


class _Celery:
    """What the request asked of its message: acknowledged, or rejected (requeue or not)."""

    def __init__(self) -> None:
        self.outcomes: list[str] = []

    def ack(self, *_args) -> None:
        self.outcomes.append("ack")

    def reject(self, _logger, _errors, requeue: bool) -> None:
        self.outcomes.append("requeue" if requeue else "reject")


def _request(object_id, *, task_id: str = "task-1") -> tuple[PipelineRequest, _Celery]:
    celery = _Celery()
    message = TaskMessage(DOCUMENT_INGEST, id=task_id, args=[str(object_id)], kwargs={"run_token": None})
    request = PipelineRequest(message, app=celery_app, task=document_ingest_task, on_ack=celery.ack,
                              on_reject=celery.reject)
    return request, celery


def _failure(exc: BaseException) -> ExceptionInfo:
    try:
        raise exc
    except BaseException:
        return ExceptionInfo()


@pytest.fixture
def held(ingest_unconsumed) -> Document:
    """A document embedding under the claim of task-1's first attempt."""
    [document] = services.document_upload(kb=KnowledgeBaseFactory(),
                                          files=[upload("notes.txt", b"A note on orders.")])
    Document.objects.filter(pk=document.pk).update(status=Document.Status.EMBEDDING, attempts=1,
                                                   run_token=task_claim_token("task-1", 1),
                                                   heartbeat_at=timezone.now())
    return Document.objects.get(pk=document.pk)


def _state(document: Document) -> dict:
    return Document.objects.values(*FIELDS).get(pk=document.pk)


def test_a_lost_process_gives_its_lease_back_before_celery_hands_the_message_out_again(held):
    request, celery = _request(held.pk)
    request.on_failure(_failure(WorkerLostError("Worker exited prematurely: signal 9 (SIGKILL).")))
    given_back = Document.objects.get(pk=held.pk)
    assert (given_back.status, given_back.run_token, given_back.attempts) == ("embedding", None, 1)
    assert given_back.heartbeat_at < lease_stale_before()
    assert celery.outcomes == ["requeue"]


def test_a_process_that_exited_while_celery_cancelled_its_task_is_not_a_lost_one(held):
    before = _state(held)
    request, _ = _request(held.pk)
    request._already_cancelled = True
    request.on_failure(_failure(SystemExit(1)))
    assert _state(held) == before


def test_a_hard_time_limit_fails_the_work_and_celery_still_acknowledges_it(held):
    request, celery = _request(held.pk)
    request.on_timeout(soft=False, timeout=3600)
    failed = Document.objects.get(pk=held.pk)
    assert (failed.status, failed.error_code, failed.run_token) == ("failed", "ingest_time_limit", None)
    assert failed.error_message.startswith(
        "The pipeline ran past its task's hard time limit (CELERY_TASK_TIME_LIMIT = 3,600 s) while embedding it.")
    assert celery.outcomes == ["ack"]


@pytest.mark.parametrize("event", ["soft_time_limit", "time_limit_exceeded_failure", "another_tasks_process"])
def test_what_is_not_the_holding_process_lost_or_killed_changes_nothing(held, event):
    """The soft limit is the task's own to handle; billiard reports a hard limit as a failure too
    (TimeLimitExceeded, before on_timeout): handled once; another task's process died."""
    before = _state(held)
    if event == "soft_time_limit":
        _request(held.pk)[0].on_timeout(soft=True, timeout=3300)
    elif event == "time_limit_exceeded_failure":
        _request(held.pk)[0].on_failure(_failure(TimeLimitExceeded(3600)))
    else:
        _request(held.pk, task_id="task-2")[0].on_failure(_failure(WorkerLostError("gone")))
    assert _state(held) == before


def test_an_error_giving_the_lease_back_leaves_celerys_own_handling_whole(held, caplog):
    # A message whose id is not a row's (a bug, a hand-sent task): Celery still requeues it.
    request, celery = _request("not-a-uuid")
    with caplog.at_level(logging.WARNING, logger="bailinghub.knowledge"):
        request.on_failure(_failure(WorkerLostError("gone")))
    assert celery.outcomes == ["requeue"]
    assert any("Could not give back what knowledge.document_ingest[task-1] held" in record.getMessage()
               for record in caplog.records)
    assert watchdog.pipeline_run_lost(task_name=DOCUMENT_INGEST, object_id=held.pk, task_id="task-1") is True
