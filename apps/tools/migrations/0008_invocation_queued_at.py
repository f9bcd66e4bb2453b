from django.db import migrations, models
from django.db.models import F


def _queued_since_last_send(apps, schema_editor):
    # Calls waiting for the dispatcher now: their last (re)send is the best reading there is.
    Invocation = apps.get_model("tools", "Invocation")
    Invocation.objects.filter(state="in_progress", journal_state="absent").update(queued_at=F("updated_at"))


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
        migrations.RunPython(_queued_since_last_send, migrations.RunPython.noop),
    ]
