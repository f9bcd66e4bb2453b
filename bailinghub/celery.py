import os

from celery import Celery

from bailinghub.broker import celery_transport_register

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bailinghub.settings")

# Before any broker connection is made: a worker must survive a Redis restart (bailinghub.broker).
celery_transport_register()

app = Celery("bailinghub")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
