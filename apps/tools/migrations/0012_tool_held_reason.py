"""Tool.held_reason: a tool whose spec declares a rate limit the hub cannot read is held off (the
operator's switch cannot turn it on), its switch kept in enabled_before_hold for when the hold
ends. Tools imported before are held from their provider's kept compile report (its warnings: the
compiler carries the hold itself now)."""

from django.db import migrations, models
from django.db.models import Case, Value, When

HOLDING_WARNINGS = ("acc_execution_rate_limit_invalid",)  # what acc.Governance.held_reason is set for, as of now


def hold_from_reports(apps, schema_editor):
    ToolProvider = apps.get_model("tools", "ToolProvider")
    Tool = apps.get_model("tools", "Tool")
    providers = ToolProvider.objects.filter(compile_report__warning_counts__has_any_keys=list(HOLDING_WARNINGS))
    for provider_id, report in providers.values_list("pk", "compile_report").iterator():
        reasons = {}
        for warning in (report or {}).get("warnings") or []:
            if warning.get("code") in HOLDING_WARNINGS and warning.get("operation"):
                reasons.setdefault(warning["operation"], f"{warning['code']}: {warning.get('message', '')}"[:500])
        for name, reason in reasons.items():
            # Every import switched such a tool off: off now, it is held since its import (None, its
            # ACC decides when the hold ends); on, the operator switched it on since.
            Tool.objects.filter(provider_id=provider_id, name=name).update(
                held_reason=reason, enabled_before_hold=Case(When(enabled=True, then=Value(True)), default=None),
                enabled=False)


class Migration(migrations.Migration):

    dependencies = [
        ("tools", "0011_invocation_resends_backfill"),
    ]

    operations = [
        migrations.AddField(
            model_name="tool",
            name="held_reason",
            field=models.CharField(blank=True, default="", editable=False, max_length=500,
                                   verbose_name="held off by its spec"),
        ),
        migrations.AddField(
            model_name="tool",
            name="enabled_before_hold",
            field=models.BooleanField(blank=True, editable=False, null=True),
        ),
        migrations.RunPython(hold_from_reports, migrations.RunPython.noop),
    ]
