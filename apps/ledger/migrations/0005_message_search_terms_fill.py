# The search terms of the messages written before 0004, in batches that commit one by one (not
# atomic): a large ledger is not rewritten in one transaction, and a fill cut short is taken up
# where it stopped when `migrate` runs again (it reads the messages still without terms).

from django.db import migrations


def fill(apps, schema_editor):
    from apps.ledger.services import message_terms_fill

    message_terms_fill()


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('ledger', '0004_message_search_terms'),
    ]

    operations = [
        migrations.RunPython(fill, migrations.RunPython.noop, elidable=True),
    ]
