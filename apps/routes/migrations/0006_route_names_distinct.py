"""Route names become unique per project ignoring case (0007). Before that, routes of one project
that share a name keep the oldest one's as it is; each later one is renamed "Name (2)",
"Name (3)", … — a number no other route of the project holds, the name shortened to keep within
256 characters. Nothing else changes: keys (what agents and grants use), settings and bindings
stay. Going back leaves the new names."""

from django.db import migrations
from django.db.models.functions import Lower

NAME_MAX = 256


def names_distinct(apps, schema_editor):
    """Names are compared as 0007's index compares them, folded by PostgreSQL's lower() (Python's
    folds some letters otherwise: "İ")."""
    Route = apps.get_model("routes", "Route")

    def folded(name: str) -> str:
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("SELECT lower(%s)", [name])
            return cursor.fetchone()[0]

    rows = list(Route.objects.annotate(folded=Lower("name")).order_by("project_id", "created_at", "pk")
                .values_list("pk", "project_id", "name", "folded"))
    taken = {(project_id, key) for _, project_id, _, key in rows}
    seen: set[tuple] = set()
    for pk, project_id, name, key in rows:
        if (project_id, key) not in seen:
            seen.add((project_id, key))
            continue
        number = 2
        while True:
            suffix = f" ({number})"
            candidate = name[:NAME_MAX - len(suffix)].rstrip() + suffix
            if (project_id, folded(candidate)) not in taken:
                break
            number += 1
        taken.add((project_id, folded(candidate)))
        seen.add((project_id, folded(candidate)))
        Route.objects.filter(pk=pk).update(name=candidate)


class Migration(migrations.Migration):

    dependencies = [
        ("routes", "0005_knowledge_score_threshold_help"),
    ]

    operations = [
        migrations.RunPython(names_distinct, migrations.RunPython.noop),
    ]
