import os
import warnings

from celery import Celery
from celery.exceptions import CPendingDeprecationWarning
from celery.signals import celeryd_after_setup

from bailinghub.broker import celery_transport_register

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bailinghub.settings")

# Before any broker connection is made: a worker must survive a Redis restart (bailinghub.broker).
celery_transport_register()


@celeryd_after_setup.connect
def _quiet_the_cancel_on_connection_loss_notice(**_kwargs: object) -> None:
    """Celery warns on every lost broker connection, in a paragraph, that it will one day cancel
    running late-acked tasks then; CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS says we
    chose not to. (After the worker's logging setup, which turns Celery's warnings back on.)"""
    warnings.filterwarnings("ignore", category=CPendingDeprecationWarning,
                            message=r"\s*In Celery 5\.1 we introduced an optional breaking change")


app = Celery("bailinghub")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
