import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bailinghub.settings")

app = Celery("bailinghub")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
