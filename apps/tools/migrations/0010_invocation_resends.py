from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("tools", "0009_invocation_claimed_queued_index"),
    ]

    operations = [
        # db_default: a web process still on the code before it inserts calls without the column
        # while this runs. The backfill is 0011, outside this migration's table lock.
        migrations.AddField(
            model_name="invocation",
            name="resends",
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
    ]
