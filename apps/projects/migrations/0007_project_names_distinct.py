"""Project names become unique ignoring case (0008). Before that, projects that share a name keep
the oldest one's as it is; each later one is renamed "Name (2)", "Name (3)", … — a number no other
project's name holds, the name shortened to keep within 200 characters. Nothing else changes:
slugs, members and everything a project owns stay. Going back leaves the new names."""

from django.db import migrations

NAME_MAX = 200


def names_distinct(apps, schema_editor):
    Project = apps.get_model("projects", "Project")
    taken = {name.lower() for name in Project.objects.values_list("name", flat=True)}
    seen: set[str] = set()
    for project in Project.objects.order_by("created_at", "pk").only("pk", "name"):
        key = project.name.lower()
        if key not in seen:
            seen.add(key)
            continue
        number = 2
        while True:
            suffix = f" ({number})"
            candidate = project.name[:NAME_MAX - len(suffix)].rstrip() + suffix
            if candidate.lower() not in taken:
                break
            number += 1
        taken.add(candidate.lower())
        seen.add(candidate.lower())
        Project.objects.filter(pk=project.pk).update(name=candidate)


class Migration(migrations.Migration):

    dependencies = [
        ("projects", "0006_alter_operatortoken_name_alter_project_name"),
    ]

    operations = [
        migrations.RunPython(names_distinct, migrations.RunPython.noop),
    ]
