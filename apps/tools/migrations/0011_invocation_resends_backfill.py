from datetime import timedelta

from django.db import migrations
from django.db.models import F


def _sent_again_at_least_once(apps, schema_editor):
    # Before the count the page read a queued call's later save as a re-send (the row is saved
    # again only when the watchdog or a resume sends it again): such calls, waiting now, were sent
    # again at least once. A call refused for now and queued later that 0008 dated from its first
    # queueing reads as sent again once, as the page read it before.
    Invocation = apps.get_model("tools", "Invocation")
    Invocation.objects.filter(state="in_progress", journal_state="absent", queued_at__isnull=False,
                              updated_at__gt=F("queued_at") + timedelta(seconds=5)).update(resends=1)


class Migration(migrations.Migration):

    dependencies = [
        ("tools", "0010_invocation_resends"),
    ]

    operations = [
        migrations.RunPython(_sent_again_at_least_once, migrations.RunPython.noop),
    ]
