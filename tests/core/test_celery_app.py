"""The Celery app's worker-side settings that an outage of the broker shows."""

from __future__ import annotations

import warnings

from celery.exceptions import CPendingDeprecationWarning
from celery.signals import celeryd_after_setup
from celery.worker.consumer.consumer import CANCEL_TASKS_BY_DEFAULT

from bailinghub.celery import app  # connects the worker's signal handlers


def test_a_lost_broker_connection_logs_no_paragraph_about_cancelling_tasks():
    """Celery warned, in seven lines, on every lost connection that it will one day cancel running
    late-acked tasks then (broker audit, low): the choice not to is a setting, and the notice is off."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.filterwarnings("always", category=CPendingDeprecationWarning)  # as the worker's logging leaves it
        celeryd_after_setup.send(sender="test@host", instance=None, conf=app.conf)
        warnings.warn(CANCEL_TASKS_BY_DEFAULT, CPendingDeprecationWarning, stacklevel=1)
        warnings.warn("another pending deprecation", CPendingDeprecationWarning, stacklevel=1)
    assert [str(warning.message) for warning in caught] == ["another pending deprecation"]
