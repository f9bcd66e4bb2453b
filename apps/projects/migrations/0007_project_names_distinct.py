"""Project names become unique ignoring case (0008). Before that, projects that share a name keep
the oldest one's as it is; each later one is renamed "Name (2)", "Name (3)", … — a number no other
project's name holds, the name shortened to keep within 200 characters. Nothing else changes:
slugs, members and everything a project owns stay. Going back leaves the new names."""

from django.db import migrations
from django.db.models.functions import Lower

NAME_MAX = 200


def names_distinct(apps, schema_editor):
    """Names are compared as 0008's index compares them, folded by PostgreSQL's lower() (Python's
    folds some letters otherwise: "İ")."""
    Project = apps.get_model("projects", "Project")

    def folded(name: str) -> str:
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("SELECT lower(%s)", [name])
            return cursor.fetchone()[0]

    rows = list(Project.objects.annotate(folded=Lower("name")).order_by("created_at", "pk")
                .values_list("pk", "name", "folded"))
    taken = {key for _, _, key in rows}
    seen: set[str] = set()
    for pk, name, key in rows:
        if key not in seen:
            seen.add(key)
            continue
        number = 2
        while True:
            suffix = f" ({number})"
            candidate = name[:NAME_MAX - len(suffix)].rstrip() + suffix
            if folded(candidate) not in taken:
                break
            number += 1
        taken.add(folded(candidate))
        seen.add(folded(candidate))
        Project.objects.filter(pk=pk).update(name=candidate)


class Migration(migrations.Migration):

    dependencies = [
        ("projects", "0006_alter_operatortoken_name_alter_project_name"),
    ]

    operations = [
        migrations.RunPython(names_distinct, migrations.RunPython.noop),
    ]
