# Built concurrently: searches go on writing cost records while it is built.

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('knowledge', '0019_alter_knowledgebase_name'),
        ('routes', '0004_alter_route_name'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='costrecord',
            index=models.Index(fields=['-created_at', '-id'], name='knowledge_costrecord_newest'),
        ),
    ]
