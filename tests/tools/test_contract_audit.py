"""Contract audit of governed tool invocations (contracts-beyond-seeds §2): where the engine read a
tool's input schema as if every key in it were a schema keyword, an argument's own name was taken
for one. A property is called what the business called it: ``description``, ``nullable``."""

from __future__ import annotations

import copy

from apps.tools.approvals import approval_decide
from apps.tools.models import Approval, Invocation, Tool
from tests.tools.invocation_helpers import new_id, stored

pytest_plugins = ["tests.tools.invocation_fixtures"]


def _schema_set(shop, name: str, change) -> None:
    """Rewrite one compiled tool's input schema in place, as a re-import that changed it would."""
    tool = Tool.objects.get(provider=shop.provider, name=name)
    compiled = copy.deepcopy(tool.compiled)
    change(compiled["input_schema"])
    Tool.objects.filter(pk=tool.pk).update(compiled=compiled)


def test_an_approved_call_is_not_resumed_once_its_description_argument_changed_type(shop, settings):
    """The execution fingerprint leaves out descriptions (rewording must not block a resume), not an
    argument that happens to be called `description`: its schema is an execution field."""
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0
    _schema_set(shop, "refund_issue", lambda schema: schema["properties"].update(description={"type": "string"}))
    invocation_id = new_id()
    first = shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 5, "description": "broken"},
                        invocation_id=invocation_id).json()
    assert first["state"] == "awaiting_approval"
    _schema_set(shop, "refund_issue", lambda schema: schema["properties"].update(description={"type": "integer"}))
    approval_decide(approval_id=Approval.objects.get().pk, projects=[shop.route.project], decision_id="d-1",
                    decision="approved")
    response = shop.resume(invocation_id)
    assert (response.status_code, response.json()["error"]) == (409, "capability_changed")
    assert Approval.objects.get().used_at is None
    assert Invocation.objects.get().journal_state == "absent"
    assert shop.server.received == []


def test_rewording_an_arguments_description_still_lets_the_approved_call_resume(shop, settings):
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0
    _schema_set(shop, "refund_issue", lambda schema: schema["properties"]["amount"].update(description="Amount."))
    invocation_id = new_id()
    shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 5}, invocation_id=invocation_id)
    _schema_set(shop, "refund_issue",
                lambda schema: schema["properties"]["amount"].update(description="The amount to refund."))
    approval_decide(approval_id=Approval.objects.get().pk, projects=[shop.route.project], decision_id="d-1",
                    decision="approved")
    response = shop.resume(invocation_id)
    assert (response.status_code, response.json()["state"]) == (200, "in_progress")
    assert Approval.objects.get().used_at is not None


def test_an_argument_called_nullable_is_checked_as_the_schema_shows_it(shop, settings):
    """The schema an agent is shown names `nullable` as an argument; the check before dispatch must
    not drop it as OpenAPI's keyword and then refuse the call for an argument it does not know."""
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0
    _schema_set(shop, "note_add", lambda schema: schema["properties"].update(nullable={"type": "boolean"}))
    body = shop.invoke("note_add", {"text": "hi", "nullable": True}).json()
    assert body["state"] == "in_progress", body["text"]
    assert stored()["invocations"] == 1


def test_an_argument_called_nullable_still_has_its_type_checked(shop):
    _schema_set(shop, "note_add", lambda schema: schema["properties"].update(nullable={"type": "boolean"}))
    body = shop.invoke("note_add", {"text": "hi", "nullable": "yes"}).json()
    assert (body["state"], body["auto_retry_allowed"]) == ("rejected_before_dispatch", False)
    assert body["text"].startswith("The arguments do not fit the tool's input schema: nullable: ")
    assert shop.server.received == []


def test_calls_waiting_on_an_unchanged_tool_across_the_upgrade_keep_their_approval(shop, settings):
    """Migration 0007: a call made before the fingerprint read `description` arguments holds the old
    reading; while its tool is unchanged it takes the new one and resumes, where it answered 409
    capability_changed. One whose tool changed since stays refused."""
    import importlib

    from django.apps import apps

    from apps.tools.call_checks import execution_fingerprint

    migration = importlib.import_module("apps.tools.migrations.0007_execution_fingerprints_keep_description_arguments")
    settings.TOOL_INVOCATION_WAIT_SECONDS = 0
    _schema_set(shop, "refund_issue", lambda schema: schema["properties"].update(description={"type": "string"}))
    kept, changed = new_id(), new_id()
    for invocation_id in (kept, changed):
        shop.invoke("refund_issue", {"order_id": "SO-1", "amount": 5, "description": invocation_id[:8]},
                    invocation_id=invocation_id)
    tool = Tool.objects.get(provider=shop.provider, name="refund_issue")
    before = copy.deepcopy(tool.compiled)
    before["input_schema"]["properties"]["order_id"]["maxLength"] = 3  # as the tool was when `changed` was made
    old = {invocation_id: migration._old_fingerprint(route_key=shop.route.key, provider=shop.provider,
                                                     compiled=compiled)
           for invocation_id, compiled in ((kept, tool.compiled), (changed, before))}
    assert old[kept] != execution_fingerprint(route_key=shop.route.key, provider=shop.provider, compiled=tool.compiled)
    for invocation_id, fingerprint in old.items():
        Invocation.objects.filter(invocation_id=invocation_id).update(execution_fingerprint=fingerprint)

    migration.fingerprints_renewed(apps, None)

    for approval in Approval.objects.all():
        approval_decide(approval_id=approval.pk, projects=[shop.route.project], decision_id=f"d-{approval.pk}",
                        decision="approved")
    resumed = shop.resume(kept)
    assert (resumed.status_code, resumed.json()["state"]) == (200, "in_progress")
    refused = shop.resume(changed)
    assert (refused.status_code, refused.json()["error"]) == (409, "capability_changed")
    assert Invocation.objects.get(invocation_id=changed).execution_fingerprint == old[changed]
