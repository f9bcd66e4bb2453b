"""A window's vector and keyword terms kept inside its row (no TOAST).

A search reads ~550 windows (its candidates'); with the vector stored out of line (pgvector's
default, EXTERNAL) that was 2,607 buffer reads and 4.5 ms for the rows alone, and 512 reads and
2.9 ms with both inline (bench/README.md, stop 20). A row is ~2.3 KB, well within a page.
Rows written before keep their storage until rewritten.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0013_keyword_gin_without_pending_list"),
    ]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE knowledge_chunkwindow ALTER COLUMN embedding SET STORAGE PLAIN, "
            "ALTER COLUMN search_vector SET STORAGE MAIN",
            "ALTER TABLE knowledge_chunkwindow ALTER COLUMN embedding SET STORAGE EXTERNAL, "
            "ALTER COLUMN search_vector SET STORAGE EXTENDED",
        ),
    ]
