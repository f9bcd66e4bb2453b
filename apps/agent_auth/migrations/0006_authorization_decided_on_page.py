from django.db import migrations, models


def _mark_page_decisions(apps, schema_editor):
    """Every decision made so far by a BailingHub account was made on the hub's own page."""
    AgentAuthorization = apps.get_model("agent_auth", "AgentAuthorization")
    AgentAuthorization.objects.filter(decided_by__isnull=False).update(decided_on_page=True)


class Migration(migrations.Migration):

    dependencies = [
        ('agent_auth', '0005_session_revoked_by_name'),
    ]

    operations = [
        migrations.AddField(
            model_name='agentauthorization',
            name='decided_on_page',
            field=models.BooleanField(default=False, help_text="Decided by a BailingHub account on the hub's own authorization page."),
        ),
        migrations.RunPython(_mark_page_decisions, migrations.RunPython.noop),
    ]
