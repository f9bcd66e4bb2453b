"""A send to a hung broker (a Redis that stopped answering) gives up instead of waiting for it: an
upload or a tool call held its web thread for the whole outage (kombu's Redis commands have no
timeout of their own), and enough of them took a web process down. The broker settings bound each
command (BROKER_SOCKET_TIMEOUT_SECONDS) and try a failed send once more."""

from __future__ import annotations

import os
import signal
import threading

from celery import Celery

from apps.core.broker import BROKER_ERRORS
from bailinghub.embedded import celery_url


def _app_on(url: str) -> Celery:
    """A Celery app with the project's settings, its broker the given Redis."""
    app = Celery("hung-broker-probe", set_as_current=False)  # the project's app stays current_app
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.conf.broker_url = celery_url(url)
    return app


def test_a_send_to_a_hung_broker_fails_as_a_broker_error_instead_of_waiting(private_redis):
    process, url = private_redis
    app = _app_on(url)
    app.send_task("probe.nothing", ignore_result=True)  # the broker answers: its connection is pooled
    outcome: list[str] = []

    def send() -> None:
        try:
            app.send_task("probe.nothing", ignore_result=True)
            outcome.append("sent")
        except BROKER_ERRORS as exc:  # what the senders catch (apps.core.broker)
            outcome.append(f"broker error: {type(exc).__name__}")

    os.kill(process.pid, signal.SIGSTOP)
    sender = threading.Thread(target=send, daemon=True)
    try:
        sender.start()
        sender.join(60)  # far over two timeouts: without them the send waits as long as the hang
        waited = sender.is_alive()
    finally:
        os.kill(process.pid, signal.SIGCONT)
    sender.join(30)
    assert not waited, "the send was still waiting for the hung broker after 60 s"
    assert len(outcome) == 1 and outcome[0].startswith("broker error: "), outcome
