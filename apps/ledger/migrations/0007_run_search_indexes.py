# Built concurrently: the turns that write runs go on while they are built.

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('ledger', '0006_message_search_indexes'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='run',
            index=models.Index(fields=['client_turn_id'], name='ledger_run_client_turn_id'),
        ),
        AddIndexConcurrently(
            model_name='run',
            index=models.Index(fields=['user_message_id'], name='ledger_run_user_message_id'),
        ),
    ]
