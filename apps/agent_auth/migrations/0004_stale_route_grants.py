"""Grants that name no route of their project are dropped: routes deleted before deleting ended
their grants (apps.agent_auth.services.route_grants_rekey) left their keys in agent clients,
sessions and authorizations not yet exchanged, and a route created later with such a key would
inherit them."""

from django.db import migrations


def _drop_stale(rows, routes_of, project_of):
    for row in rows.exclude(allowed_routes=[]).iterator():
        known = routes_of(project_of(row))
        kept = [key for key in row.allowed_routes if key in known]
        if kept != row.allowed_routes:
            rows.model.objects.filter(pk=row.pk).update(allowed_routes=kept)


def drop_stale_route_grants(apps, schema_editor):
    route = apps.get_model("routes", "Route")
    cache: dict = {}

    def routes_of(project_id):
        if project_id not in cache:
            cache[project_id] = set(route.objects.filter(project_id=project_id).values_list("key", flat=True))
        return cache[project_id]

    client = apps.get_model("agent_auth", "AgentClient")
    _drop_stale(client.objects.all(), routes_of, lambda row: row.project_id)
    projects = dict(client.objects.values_list("pk", "project_id"))
    _drop_stale(apps.get_model("agent_auth", "AgentSession").objects.all(), routes_of,
                lambda row: projects[row.client_id])
    _drop_stale(apps.get_model("agent_auth", "AgentAuthorization").objects.filter(status__in=["pending", "approved"]),
                routes_of, lambda row: projects[row.client_id])


class Migration(migrations.Migration):
    dependencies = [
        ("agent_auth", "0003_subject_display"),
        ("routes", "0003_max_tool_calls_help"),
    ]

    operations = [migrations.RunPython(drop_stale_route_grants, migrations.RunPython.noop)]
