"""Calls still waiting (for their approval, or for the dispatcher) keep running after the execution
fingerprint changed its reading of input schemas: it left out every key called "description",
an argument of that name included, and now leaves out only the schema nodes' description
annotations. A waiting call whose tool is unchanged since it was made (its stored fingerprint is the
old reading of the tool as it is now) gets the new reading of the same tool; any other keeps its
fingerprint, and its resume is refused as before (the tool changed). Without this, every call
waiting on a tool with an argument called "description" answered 409 capability_changed after the
upgrade. Going back changes nothing."""

from typing import Any

from django.db import migrations

# The execution fields and the old reading, as they were when this migration was written.
_EXECUTION_FIELDS = ("name", "method", "path", "scope", "risk", "approval_required", "approval_declared",
                     "approval_rules", "subject_required", "readonly", "idempotent", "timeout_ms", "rate_limit",
                     "input_schema", "parameter_locations", "content_type")


def _old_strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: _old_strip(value) for key, value in node.items() if key != "description"}
    if isinstance(node, list):
        return [_old_strip(item) for item in node]
    return node


def _old_fingerprint(*, route_key: str, provider: Any, compiled: dict[str, Any]) -> str:
    import hashlib

    from apps.core.revisions import revision_of

    return revision_of({
        "route": route_key,
        "provider": provider.name,
        "base_url_sha256": hashlib.sha256(provider.base_url.encode()).hexdigest(),
        "tool": {key: _old_strip(compiled.get(key)) for key in _EXECUTION_FIELDS},
    })


def fingerprints_renewed(apps, schema_editor) -> None:
    from apps.tools.call_checks import execution_fingerprint

    Invocation = apps.get_model("tools", "Invocation")
    Tool = apps.get_model("tools", "Tool")
    waiting = (Invocation.objects.filter(state__in=["awaiting_approval", "in_progress"], journal_state="absent",
                                         provider__isnull=False)
               .select_related("provider", "route"))
    for invocation in waiting.iterator():
        tool = Tool.objects.filter(provider_id=invocation.provider_id, name=invocation.tool_name).first()
        if tool is None:
            continue
        arguments = {"route_key": invocation.route.key, "provider": invocation.provider, "compiled": tool.compiled}
        if _old_fingerprint(**arguments) != invocation.execution_fingerprint:
            continue  # the tool changed since the call was made: its resume stays refused
        renewed = execution_fingerprint(**arguments)
        if renewed != invocation.execution_fingerprint:
            Invocation.objects.filter(pk=invocation.pk).update(execution_fingerprint=renewed)


class Migration(migrations.Migration):

    dependencies = [
        ("tools", "0006_invocation_project_tool_index"),
    ]

    operations = [
        migrations.RunPython(fingerprints_renewed, migrations.RunPython.noop),
    ]
