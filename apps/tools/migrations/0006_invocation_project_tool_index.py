# Built concurrently: tool calls are recorded while it is built.

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('tools', '0005_labels'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='invocation',
            index=models.Index(fields=['project', 'tool_name'], name='invocation_project_tool'),
        ),
    ]
