from django.db import migrations

# ChunkEdit rows stay append-only, except that deleting a user sets their `user` to NULL
# (the foreign key's SET_NULL), which must not make deleting a user impossible.
ALLOW_USER_DELETION = """
CREATE OR REPLACE FUNCTION knowledge_chunkedit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.user_id IS NULL AND OLD.user_id IS NOT NULL
       AND (to_jsonb(NEW) - 'user_id') = (to_jsonb(OLD) - 'user_id') THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'knowledge_chunkedit is append-only';
END $$;
"""
APPEND_ONLY = """
CREATE OR REPLACE FUNCTION knowledge_chunkedit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'knowledge_chunkedit is append-only';
END $$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0005_chunk_overrides_and_playground_queries"),
    ]

    operations = [
        migrations.RunSQL(ALLOW_USER_DELETION, APPEND_ONLY),
    ]
