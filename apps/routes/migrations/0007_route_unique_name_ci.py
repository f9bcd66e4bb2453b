# A migration of its own, after 0006 renamed the duplicates: the unique index is built on names
# already distinct, in its own transaction.

import django.db.models.functions.text
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("routes", "0006_route_names_distinct"),
    ]

    operations = [
        migrations.AddConstraint(
            model_name="route",
            constraint=models.UniqueConstraint(
                models.F("project"), django.db.models.functions.text.Lower("name"),
                name="route_unique_name_per_project_ci", violation_error_code="route_name_taken",
                violation_error_message="Another route of this project already has this name (names are compared "
                                        "ignoring case)."),
        ),
    ]
