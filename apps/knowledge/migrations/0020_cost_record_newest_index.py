# A plain (not concurrent) build: the cost records table is written after each embedding or rerank
# call, which waits for the build, and a concurrent build cannot be unapplied inside a transaction,
# as the migration tests of earlier knowledge migrations do.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('knowledge', '0019_alter_knowledgebase_name'),
        ('routes', '0004_alter_route_name'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='costrecord',
            index=models.Index(fields=['-created_at', '-id'], name='knowledge_costrecord_newest'),
        ),
    ]
