from django.db import migrations, models

# A note written before this migration takes the principal of the session that wrote it. A note
# whose session is gone keeps empty ones: no session matches them, so it is kept but not shown,
# rather than guessed onto a principal.
BACKFILL = """
UPDATE ledger_memorynote AS note
   SET principal_id = session.principal_id,
       principal_tenant = COALESCE(session.principal ->> 'tenant', '')
  FROM agent_auth_agentsession AS session
 WHERE note.created_by_session_id = session.id
"""


class Migration(migrations.Migration):

    dependencies = [
        ('agent_auth', '0003_subject_display'),
        ('ledger', '0002_rag_query'),
        ('projects', '0005_project_tool_execution_paused'),
        ('routes', '0002_text_length_validators'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='memorynote',
            name='ledger_note_route_idx',
        ),
        migrations.RemoveIndex(
            model_name='memorynote',
            name='ledger_note_project_idx',
        ),
        migrations.AddField(
            model_name='memorynote',
            name='principal_id',
            field=models.CharField(blank=True, max_length=128),
        ),
        migrations.AddField(
            model_name='memorynote',
            name='principal_tenant',
            field=models.CharField(blank=True, max_length=128),
        ),
        migrations.AddIndex(
            model_name='memorynote',
            index=models.Index(fields=['route', 'on_behalf_of', 'principal_id', '-updated_at'], name='ledger_note_route_holder_idx'),
        ),
        migrations.AddIndex(
            model_name='memorynote',
            index=models.Index(fields=['project', 'on_behalf_of', 'principal_id', '-created_at'], name='ledger_note_project_holder_idx'),
        ),
        migrations.RunSQL(BACKFILL, reverse_sql=migrations.RunSQL.noop),
    ]
