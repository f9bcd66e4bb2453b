# A migration of its own, after 0007 renamed the duplicates: the unique index is built on names
# already distinct, in its own transaction.

import django.db.models.functions.text
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("projects", "0007_project_names_distinct"),
    ]

    operations = [
        migrations.AddConstraint(
            model_name="project",
            constraint=models.UniqueConstraint(
                django.db.models.functions.text.Lower("name"), name="project_unique_name_ci",
                violation_error_message="Another project already has this name (names are compared ignoring case)."),
        ),
    ]
