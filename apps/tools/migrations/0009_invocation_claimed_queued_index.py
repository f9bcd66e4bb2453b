# Built concurrently: tool calls are recorded while it is built.

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('tools', '0008_invocation_queued_at'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='invocation',
            index=models.Index(condition=models.Q(('dispatched_at__isnull', False)), fields=['queued_at'],
                               name='invocation_claimed_queued'),
        ),
    ]
