# The column only, with a database default: an insert from code that predates it (a web process
# still serving while `migrate` runs) stores an empty list instead of failing on NOT NULL. The
# messages already written get their terms in 0005, the indexes in 0006.

import django.contrib.postgres.fields
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('ledger', '0003_memory_note_principal'),
    ]

    operations = [
        migrations.AddField(
            model_name='message',
            name='search_terms',
            field=django.contrib.postgres.fields.ArrayField(base_field=models.TextField(), blank=True, db_default=[], default=list, editable=False, size=None),
        ),
    ]
