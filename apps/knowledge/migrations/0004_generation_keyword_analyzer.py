from django.db import migrations, models


class Migration(migrations.Migration):
    """Generations indexed before this migration used analyzer 1 (no Han folding, no stemming):
    they keep working and `manage.py reindex_keywords` rewrites them; new ones get 2."""

    dependencies = [
        ("knowledge", "0003_keyword_term_stats"),
    ]

    operations = [
        migrations.AddField(
            model_name="indexgeneration",
            name="keyword_analyzer",
            field=models.PositiveSmallIntegerField(default=1),
        ),
        migrations.AlterField(
            model_name="indexgeneration",
            name="keyword_analyzer",
            field=models.PositiveSmallIntegerField(default=2),
        ),
    ]
