# Built concurrently, after the fill (one build rather than an update per message): the turns that
# write messages go on while they are built.

import django.contrib.postgres.indexes
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('ledger', '0005_message_search_terms_fill'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='message',
            index=django.contrib.postgres.indexes.GinIndex(fields=['search_terms'], name='ledger_message_search_terms'),
        ),
        AddIndexConcurrently(
            model_name='message',
            index=models.Index(fields=['client_message_id'], name='ledger_message_client_id'),
        ),
        AddIndexConcurrently(
            model_name='conversation',
            index=models.Index(fields=['client_conversation_id'], name='ledger_conversation_client_id'),
        ),
        AddIndexConcurrently(
            model_name='conversation',
            index=models.Index(fields=['on_behalf_of'], name='ledger_conversation_on_behalf'),
        ),
    ]
