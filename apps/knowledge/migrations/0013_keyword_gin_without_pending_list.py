"""Keyword GIN indexes without a pending list (fastupdate = off).

With GIN's default fast update, rows indexed since the last vacuum wait in a pending list that
every search of the index scans whole: right after a KB of 1,135 chunks was ingested, its keyword
search took 199 ms a query; 10 ms once the list was merged (bench/README.md, stop 20). Now each
row goes into the index as it is written (ingestion's cost is the embedding, not this). The
change is a storage parameter (no rebuild); pending lists left from before are merged here.
"""

from django.contrib.postgres.indexes import GinIndex
from django.db import migrations

_EVERY_KEYWORD_INDEX = """
    DO $$
    DECLARE name regclass;
    BEGIN
        FOR name IN SELECT indexrelid::regclass FROM pg_index
                     WHERE indrelid = 'knowledge_chunk'::regclass
                       AND (indexrelid::regclass::text = 'knowledge_chunk_terms_gin'
                            OR indexrelid::regclass::text LIKE 'knowledge_chunk_gin_g_%')
        LOOP
            EXECUTE format('ALTER INDEX %s SET (fastupdate = {value})', name);
            {clean}
        END LOOP;
    END $$;
"""

FORWARD = _EVERY_KEYWORD_INDEX.format(value="off", clean="PERFORM gin_clean_pending_list(name);")
BACKWARD = _EVERY_KEYWORD_INDEX.format(value="on", clean="")


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0012_chunk_windows"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(FORWARD, BACKWARD)],
            state_operations=[
                migrations.RemoveIndex(model_name="chunk", name="knowledge_chunk_terms_gin"),
                migrations.AddIndex(model_name="chunk", index=GinIndex(
                    fastupdate=False, fields=["search_vector"], name="knowledge_chunk_terms_gin")),
            ],
        ),
    ]
