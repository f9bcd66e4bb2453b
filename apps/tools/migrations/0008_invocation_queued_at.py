from django.db import migrations, models
from django.db.models import F, OuterRef, Subquery
from django.db.models.functions import Coalesce, Greatest


def _queued_since_first_sent(apps, schema_editor):
    # Calls waiting for the dispatcher now were queued when they were made, or, approved, when a
    # resume consumed their approval (Approval.used_at). Not updated_at: the watchdog re-sends a
    # queued call every minute or so and refreshes it, so a call queued for hours would read as
    # queued a minute ago. A call refused for now (rate limit, pause) and queued later reads as
    # queued earlier than it was: a wait overstated once, never hidden.
    Invocation = apps.get_model("tools", "Invocation")
    Approval = apps.get_model("tools", "Approval")
    used_at = Subquery(Approval.objects.filter(invocation=OuterRef("pk")).values("used_at")[:1])
    Invocation.objects.filter(state="in_progress", journal_state="absent").update(
        queued_at=Greatest(F("created_at"), Coalesce(used_at, F("created_at"))))


class Migration(migrations.Migration):

    dependencies = [
        ("tools", "0007_execution_fingerprints_keep_description_arguments"),
    ]

    operations = [
        migrations.AddField(
            model_name="invocation",
            name="queued_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(_queued_since_first_sent, migrations.RunPython.noop),
    ]
