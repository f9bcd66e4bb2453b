"""Task control over HTTP: the agent's capabilities and snapshot, turns bound to a task, the run_id
rule of capability search, and the operator's builder API."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from apps.agent_auth.services import session_revoke
from apps.core.revisions import revision_of
from apps.ledger.models import Run
from apps.tasks.models import Task, TaskLedgerEntry, TaskRun
from apps.tasks.services import MemberSpec, PolicySpec, task_control, task_create
from tests.agent_auth.helpers import bearer
from tests.core.hostile import NON_CANONICAL_UUID_FORMS, non_canonical_uuid
from tests.ledger.helpers import open_turn

pytestmark = pytest.mark.django_db

CONVERSATION = "local-conversation-1"  # turn_body's


def _task(world, *, conversation=CONVERSATION, request_id="req-1"):
    members = [MemberSpec(session_id=str(world.first.session.pk), workspace=world.route.key,
                          client_conversation_id=conversation, allowed_tools=("adjust_stock",))]
    task, _ = task_create(project=world.route.project, user=world.owner.user, request_id=request_id,
                          members=members, policy=PolicySpec(max_write_calls=5, max_concurrent=2))
    return task


def _binding(task, **overrides):
    return {"schema_version": "bailing.agent-task-binding.v1", "task_id": str(task.pk),
            "scope_hash": task.scope_hash, **overrides}


def _get(world, url, token=None):
    return world.api.get(url, **bearer(token or world.first.access_token))


def test_capabilities_say_optional_until_the_session_joins_a_task(world):
    url = "/agent-api/v1/task-control/capabilities"
    response = _get(world, url)
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    assert response.json() == {
        "schema_version": "bailing.agent-task-control-capabilities.v1", "supported": True, "mode": "optional",
        "task_schema": "bailing.agent-task.v1", "metering": "write_invocation", "same_hub_only": True,
        "controls": ["pause", "resume", "cancel"], "inspect_invocation": True}
    _task(world)
    assert _get(world, url).json()["mode"] == "required"
    assert _get(world, url, world.second.access_token).json()["mode"] == "optional"


def test_the_snapshot_shows_only_the_callers_own_membership(world):
    task = _task(world)
    url = f"/agent-api/v1/tasks/{task.pk}?workspace={world.route.key}&client_conversation_id={CONVERSATION}"
    body = _get(world, url).json()
    assert body == {
        "schema_version": "bailing.agent-task.v1", "task_id": str(task.pk), "state": "active",
        "revision": revision_of({"task": str(task.pk), "revision": 1}),
        "ledger_sequence": 1, "scope_hash": task.scope_hash, "member_count": 1,
        "member": {"session_id": str(world.first.session.pk), "client_app_id": world.first.session.client.app_id,
                   "workspace": world.route.key, "client_conversation_id": CONVERSATION,
                   "allowed_tools": ["adjust_stock"]},
        "policy": {"max_write_calls": 5, "max_concurrent": 2, "expires_at": None},
        "counters": {"write_reserved": 0, "write_consumed": 0, "active_permits": 0},
        "snapshot_is_dispatch_permission": False}
    assert re.fullmatch(r"[0-9a-f]{64}", body["revision"])  # the wire rules: every revision is 64 hex
    task_control(task=task, user=None, request_id=str(uuid.uuid4()), expected_revision=1, action="pause")
    assert _get(world, url).json()["revision"] == revision_of({"task": str(task.pk), "revision": 2})
    # another session, or another conversation of the member: no such task for them
    assert _get(world, url, world.second.access_token).json()["error"] == "task_not_found"
    other = f"/agent-api/v1/tasks/{task.pk}?workspace={world.route.key}&client_conversation_id=other"
    assert (_get(world, other).status_code, _get(world, other).json()["error"]) == (404, "task_not_found")


@pytest.mark.parametrize("query", ["", "?workspace=store-assistant", "?workspace=a&client_conversation_id=b&x=1",
                                   "?workspace=a&workspace=b&client_conversation_id=c",
                                   "?workspace=%00&client_conversation_id=c",
                                   f"?workspace=store-assistant&client_conversation_id={CONVERSATION}%00"])
def test_a_snapshot_without_exactly_its_two_printable_parameters_is_400(world, query):
    task = _task(world)
    response = _get(world, f"/agent-api/v1/tasks/{task.pk}{query}")
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")


def test_a_bound_turn_is_pinned_to_the_task_and_echoes_the_binding(world):
    task = _task(world)
    binding = _binding(task)
    response = open_turn(world.api, world.first.access_token, world.route.key, task_binding=binding)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["task_binding"] == binding
    assert TaskRun.objects.get(run_id=body["run_id"]).task_id == task.pk
    replay = open_turn(world.api, world.first.access_token, world.route.key, task_binding=binding)
    assert replay.json() == body


def test_an_unbound_turn_carries_no_task_binding_key(world):
    body = open_turn(world.api, world.first.access_token, world.route.key).json()
    assert "task_binding" not in body


def test_a_task_enforced_session_must_bind_its_turns(world):
    _task(world)
    before = Run.objects.count()
    response = open_turn(world.api, world.first.access_token, world.route.key)
    assert (response.status_code, response.json()["error"]) == (403, "TASK_REQUIRED")
    assert Run.objects.count() == before
    # the other session is in no task: its turns need nothing
    assert open_turn(world.api, world.second.access_token, world.route.key).status_code == 200


@pytest.mark.parametrize("overrides,status,code", [
    ({"scope_hash": "0" * 64}, 409, "TASK_SCOPE_BLOCKED"),
    ({"task_id": "00000000-0000-4000-8000-000000000000"}, 404, "task_not_found"),
    ({"schema_version": "bailing.agent-task-binding.v2"}, 400, "invalid_request"),
    ({"extra": 1}, 400, "invalid_request"),
])
def test_a_wrong_binding_creates_no_run(world, overrides, status, code):
    task = _task(world)
    before = Run.objects.count()
    response = open_turn(world.api, world.first.access_token, world.route.key, task_binding=_binding(task, **overrides))
    assert (response.status_code, response.json()["error"]) == (status, code)
    assert Run.objects.count() == before


def test_a_cancelled_task_refuses_turns(world):
    task = _task(world)
    task_control(task=task, user=world.owner.user, request_id="c", expected_revision=1, action="cancel")
    response = open_turn(world.api, world.first.access_token, world.route.key, task_binding=_binding(task))
    assert (response.status_code, response.json()["error"]) == (409, "TASK_CANCELLED")


def test_a_paused_task_still_opens_turns(world):
    task = _task(world)
    task_control(task=task, user=world.owner.user, request_id="c", expected_revision=1, action="pause")
    response = open_turn(world.api, world.first.access_token, world.route.key, task_binding=_binding(task))
    assert response.status_code == 200


def _task_with_second_member_revoked(world) -> Task:
    """A task of both sessions, the second revoked since."""
    members = [MemberSpec(session_id=str(s.session.pk), workspace=world.route.key, client_conversation_id=CONVERSATION)
               for s in (world.first, world.second)]
    task, _ = task_create(project=world.route.project, user=world.owner.user, request_id="two", members=members,
                          policy=PolicySpec())
    session_revoke(session=world.second.session, revoked_by="operator")
    return task


def test_a_turn_after_a_member_is_revoked_blocks_the_task(world):
    task = _task_with_second_member_revoked(world)
    before = Run.objects.count()
    response = open_turn(world.api, world.first.access_token, world.route.key, task_binding=_binding(task))
    assert (response.status_code, response.json()["error"]) == (409, "TASK_SCOPE_BLOCKED")
    task.refresh_from_db()
    assert task.state == "blocked"
    assert Run.objects.count() == before


def test_capability_search_of_a_task_enforced_session_needs_its_bound_run_id(world):
    task = _task(world)
    url = f"/agent-api/v1/workspaces/{world.route.key}/capabilities/search"
    token = world.first.access_token
    response = world.api.post(url, {"query": "库存"}, format="json", **bearer(token))
    assert (response.status_code, response.json()["error"]) == (403, "TASK_REQUIRED")
    run_id = open_turn(world.api, token, world.route.key, task_binding=_binding(task)).json()["run_id"]
    response = world.api.post(url, {"query": "库存", "run_id": run_id}, format="json", **bearer(token))
    assert response.status_code == 200, response.json()


# The builder API

def _op(world):
    return bearer(world.operator_token)


def _create_body(world, **overrides):
    body = {"request_id": "op-1", "project_id": str(world.route.project_id), "name": "整理商品目录",
            "members": [{"session_id": str(world.first.session.pk), "workspace": world.route.key,
                         "client_conversation_id": CONVERSATION, "allowed_tools": ["adjust_stock"]}],
            "policy": {"max_write_calls": 5, "max_concurrent": 2, "expires_at": None}}
    body.update(overrides)
    return body


def _post(world, url, body, **headers):
    return world.api.generic("POST", url, json.dumps(body), content_type="application/json",
                             **(headers or _op(world)))


def test_builder_creates_a_task_once_per_request_id(world):
    first = _post(world, "/api/v1/builder/tasks", _create_body(world))
    assert first.status_code == 201, first.json()
    data = first.json()["data"]
    assert (data["state"], data["revision"], data["member_count"]) == ("active", 1, 1)
    again = _post(world, "/api/v1/builder/tasks", _create_body(world))
    assert (again.status_code, again.json()["data"]["id"]) == (200, data["id"])
    conflict = _post(world, "/api/v1/builder/tasks", _create_body(world, name="另一个"))
    assert (conflict.status_code, conflict.json()["error"]) == (409, "task_request_conflict")
    assert Task.objects.count() == 1


@pytest.mark.parametrize("overrides,field", [
    ({"members": []}, "members"),
    ({"policy": {"max_concurrent": 0}}, "policy.max_concurrent"),
    ({"policy": {"max_write_calls": "5"}}, "policy.max_write_calls"),
    ({"colour": "blue"}, "colour"),
    ({"project_id": "00000000-0000-4000-8000-000000000000"}, "project_id"),
    ({"name": "整理\u202e目录"}, "name"),  # shown in the console beside other text
    # a time without its offset names no instant (it was read as UTC, hours off the client's)
    ({"policy": {"expires_at": "2099-01-31T18:00:00"}}, "policy.expires_at"),
    ({"policy": {"expires_at": "2099-01-31"}}, "policy.expires_at"),
    ({"policy": {"expires_at": 4073000000}}, "policy.expires_at"),
    ({"policy": {"expires_at": "2099-13-31T18:00:00Z"}}, "policy.expires_at"),
])
def test_builder_refuses_an_invalid_task_with_422_naming_the_field(world, overrides, field):
    response = _post(world, "/api/v1/builder/tasks", _create_body(world, **overrides))
    body = response.json()
    assert (response.status_code, body["error"], field in body["fields"]) == (422, "invalid_task", True), body
    assert Task.objects.count() == 0


def test_builder_reads_expires_at_at_its_offset(world):
    policy = {"max_write_calls": 5, "max_concurrent": 2, "expires_at": "2099-01-31T18:00:00+08:00"}
    response = _post(world, "/api/v1/builder/tasks", _create_body(world, policy=policy))
    assert response.status_code == 201, response.json()
    assert response.json()["data"]["policy"]["expires_at"] == "2099-01-31T10:00:00Z"


@pytest.mark.parametrize("conversation", ["c" * 192, "c\nd", "c\td", "\u3000会话", "c\n"])
def test_builder_refuses_a_member_conversation_no_turn_can_name(world, conversation):
    """Turn ids are 1–191 printable characters: such a member could never be bound, and its session,
    task-enforced for good, could open no turn in that conversation."""
    members = [{**_create_body(world)["members"][0], "client_conversation_id": conversation}]
    response = _post(world, "/api/v1/builder/tasks", _create_body(world, members=members))
    body = response.json()
    assert (response.status_code, body["error"], list(body["fields"])) == (
        422, "invalid_task", ["members[0].client_conversation_id"]), body
    assert Task.objects.count() == 0


def test_builder_takes_a_member_conversation_of_191_characters(world):
    members = [{**_create_body(world)["members"][0], "client_conversation_id": "c" * 191}]
    assert _post(world, "/api/v1/builder/tasks", _create_body(world, members=members)).status_code == 201


@pytest.mark.parametrize("conversation", ["local-conversation-1 ", " local-conversation-1"])
def test_builder_keeps_a_member_conversation_exactly_as_a_turn_sends_it(world, conversation):
    """Turn ids are taken exactly, spaces included: a member conversation trimmed on the way in
    named another conversation, and the session, task-enforced for good, could never bind a turn
    in the one the operator gave."""
    members = [{**_create_body(world)["members"][0], "client_conversation_id": conversation}]
    response = _post(world, "/api/v1/builder/tasks", _create_body(world, members=members))
    assert response.status_code == 201, response.json()
    task = Task.objects.get()
    assert task.members.get().client_conversation_id == conversation
    turn = open_turn(world.api, world.first.access_token, world.route.key, client_conversation_id=conversation,
                     task_binding=_binding(task))
    assert turn.status_code == 200, turn.json()
    assert TaskRun.objects.get(run_id=turn.json()["run_id"]).task_id == task.pk


def test_builder_takes_a_member_session_id_in_upper_case(world):
    """A UUID is read in either case (RFC 9562 §4): an upper-case session id named no session."""
    members = [{**_create_body(world)["members"][0], "session_id": str(world.first.session.pk).upper()}]
    response = _post(world, "/api/v1/builder/tasks", _create_body(world, members=members))
    assert response.status_code == 201, response.json()
    assert Task.objects.get().members.get().session_id == world.first.session.pk
    again = _post(world, "/api/v1/builder/tasks", _create_body(world))  # the same request, in lower case
    assert (again.status_code, again.json()["data"]["id"]) == (200, response.json()["data"]["id"])


@pytest.mark.parametrize("spelling", ["{%s}", "urn:uuid:%s"])
def test_builder_refuses_a_member_session_id_in_another_spelling(world, spelling):
    members = [{**_create_body(world)["members"][0], "session_id": spelling % world.first.session.pk}]
    response = _post(world, "/api/v1/builder/tasks", _create_body(world, members=members))
    body = response.json()
    assert (response.status_code, body["error"], body["fields"]) == (
        422, "invalid_task", {"members[0].session_id": ["No such agent session in this project."]}), body
    assert Task.objects.count() == 0


def _member_with_app(world, app_id):
    member = _create_body(world)["members"][0]
    return [{**member, "client_app_id": app_id}]


def test_builder_takes_the_contracts_member_shape_with_client_app_id(world):
    members = _member_with_app(world, world.first.session.client.app_id)
    response = _post(world, "/api/v1/builder/tasks", _create_body(world, members=members))
    assert response.status_code == 201, response.json()
    assert Task.objects.get().members.get().client_app_id == world.first.session.client.app_id


def test_builder_refuses_a_member_whose_client_app_id_is_not_the_sessions(world):
    response = _post(world, "/api/v1/builder/tasks", _create_body(world, members=_member_with_app(world, "other-app")))
    body = response.json()
    assert (response.status_code, body["error"], list(body["fields"])) == (
        422, "invalid_task", ["members[0].client_app_id"]), body
    assert Task.objects.count() == 0


def test_builder_control_is_compare_and_set(world):
    task_id = _post(world, "/api/v1/builder/tasks", _create_body(world)).json()["data"]["id"]
    url = f"/api/v1/builder/tasks/{task_id}/control"
    paused = _post(world, url, {"request_id": "p", "expected_revision": 1, "action": "pause"})
    assert (paused.status_code, paused.json()["data"]["state"], paused.json()["data"]["revision"]) == (200, "paused", 2)
    stale = _post(world, url, {"request_id": "q", "expected_revision": 1, "action": "resume"})
    assert (stale.status_code, stale.json()["error"], stale.json()["revision"]) == (409, "task_revision_conflict", 2)
    assert Task.objects.get(pk=task_id).state == "paused"
    assert TaskLedgerEntry.objects.filter(task_id=task_id).count() == 2


@pytest.mark.parametrize("request_id", ["op-1 ", " op-1", "\top-1", "   "])
def test_builder_refuses_a_request_id_with_spaces_at_its_edges(world, request_id):
    """Trimmed, "op-1 " replayed the task of "op-1": a key is matched exactly or refused."""
    created = _post(world, "/api/v1/builder/tasks", _create_body(world)).json()["data"]
    response = _post(world, "/api/v1/builder/tasks", _create_body(world, request_id=request_id, name="另一个"))
    body = response.json()
    assert (response.status_code, body["error"], list(body["fields"])) == (422, "invalid_task", ["request_id"]), body
    assert list(Task.objects.values_list("request_id", flat=True)) == ["op-1"]
    control = _post(world, f"/api/v1/builder/tasks/{created['id']}/control",
                    {"request_id": request_id, "expected_revision": 1, "action": "pause"})
    assert (control.status_code, control.json()["error"], list(control.json()["fields"])) == (
        422, "invalid_task", ["request_id"]), control.json()
    task = Task.objects.get(pk=created["id"])
    assert (task.state, task.revision, task.ledger.count()) == ("active", 1, 1)


def test_builder_read_lists_runs_and_ledger_without_arguments(world):
    task = _task(world)
    open_turn(world.api, world.first.access_token, world.route.key, task_binding=_binding(task))
    body = world.api.get(f"/api/v1/builder/tasks/{task.pk}", **_op(world)).json()["data"]
    assert [run["client_conversation_id"] for run in body["runs"]] == [CONVERSATION]
    assert [entry["kind"] for entry in body["ledger"]] == ["created"]
    listing = world.api.get("/api/v1/builder/tasks?limit=1", **_op(world)).json()
    assert ([t["id"] for t in listing["data"]], listing["meta"]["next_cursor"]) == ([str(task.pk)], None)


def test_builder_list_pages_by_cursor(world):
    ids = [str(_task(world, request_id=f"r{n}", conversation=f"c{n}").pk) for n in range(3)]
    page = world.api.get("/api/v1/builder/tasks?limit=2", **_op(world)).json()
    assert [t["id"] for t in page["data"]] == ids[:2]
    rest = world.api.get(f"/api/v1/builder/tasks?limit=2&cursor={page['meta']['next_cursor']}", **_op(world)).json()
    assert ([t["id"] for t in rest["data"]], rest["meta"]["next_cursor"]) == (ids[2:], None)


def test_a_token_without_the_tasks_scope_cannot_create(world):
    from apps.projects.tokens import operator_token_create
    _, token = operator_token_create(user=world.owner.user, name="kb", scopes=["knowledge:create"])
    response = _post(world, "/api/v1/builder/tasks", _create_body(world), **bearer(token))
    assert (response.status_code, response.json()["error"]) == (403, "insufficient_scope")
    assert Task.objects.count() == 0


def test_another_projects_operator_sees_no_task(world):
    from apps.projects.tokens import operator_token_create
    from tests.projects.factories import MembershipFactory
    stranger = MembershipFactory(role="owner")
    _, token = operator_token_create(user=stranger.user, name="x", scopes=["tasks:write"])
    task = _task(world)
    response = world.api.get(f"/api/v1/builder/tasks/{task.pk}", **bearer(token))
    assert (response.status_code, response.json()["error"]) == (404, "task_not_found")
    control = _post(world, f"/api/v1/builder/tasks/{task.pk}/control",
                    {"request_id": "p", "expected_revision": 1, "action": "pause"}, **bearer(token))
    assert control.status_code == 404
    task.refresh_from_db()
    assert task.state == "active"


@pytest.mark.parametrize("endpoint,body", [("search", {"query": "退款"}), ("read", {"ref": "x" * 40})])
def test_knowledge_search_and_read_of_an_enforced_session_need_a_bound_run(world, endpoint, body):
    _task(world)
    url = f"/agent-api/v1/workspaces/{world.route.key}/knowledge/{endpoint}"
    response = world.api.post(url, body, format="json", **bearer(world.first.access_token))
    assert (response.status_code, response.json()["error"]) == (403, "TASK_REQUIRED")
    # the other session is in no task: it gets past the task check to the knowledge itself
    other = world.api.post(url, body, format="json", **bearer(world.second.access_token))
    assert other.json().get("error") != "TASK_REQUIRED"


def test_knowledge_search_with_the_bound_run_passes_the_task_check(world):
    task = _task(world)
    token = world.first.access_token
    run_id = open_turn(world.api, token, world.route.key, task_binding=_binding(task)).json()["run_id"]
    url = f"/agent-api/v1/workspaces/{world.route.key}/knowledge/search"
    response = world.api.post(url, {"query": "退款", "run_id": run_id}, format="json",
                              **bearer(world.first.access_token))
    assert response.json().get("error") not in {"TASK_REQUIRED", "TASK_SCOPE_BLOCKED"}, response.json()
    task_control(task=task, user=world.owner.user, request_id="c", expected_revision=1, action="cancel")
    response = world.api.post(url, {"query": "退款", "run_id": run_id}, format="json",
                              **bearer(world.first.access_token))
    assert (response.status_code, response.json()["error"]) == (409, "TASK_CANCELLED")


@pytest.mark.parametrize("limit", ["0", "201", "²", "1e3", "-1"])
def test_a_list_limit_outside_1_to_200_or_not_ascii_digits_is_400(world, limit):
    response = world.api.get(f"/api/v1/builder/tasks?limit={limit}", **_op(world))
    body = response.json()
    assert (response.status_code, body["error"], list(body["fields"])) == (400, "invalid_request", ["limit"])


def test_the_snapshot_after_a_member_is_revoked_says_the_task_is_blocked(world):
    task = _task_with_second_member_revoked(world)
    url = f"/agent-api/v1/tasks/{task.pk}?workspace={world.route.key}&client_conversation_id={CONVERSATION}"
    response = _get(world, url)
    assert response.status_code == 200
    assert (response.json()["state"], response.json()["revision"]) == (
        "blocked", revision_of({"task": str(task.pk), "revision": 2}))
    task.refresh_from_db()
    assert (task.state, task.blocked_reason) == ("blocked", "a member session was revoked")


def test_the_builder_read_after_a_member_is_revoked_says_the_task_is_blocked(world):
    task = _task_with_second_member_revoked(world)
    response = world.api.get(f"/api/v1/builder/tasks/{task.pk}", **_op(world))
    assert response.status_code == 200
    data = response.json()["data"]
    assert (data["state"], data["revision"], data["blocked_reason"]) == ("blocked", 2, "a member session was revoked")


@pytest.mark.parametrize("form", NON_CANONICAL_UUID_FORMS)
def test_a_task_id_in_another_spelling_is_not_found_by_agent_or_builder(world, form):
    task = _task(world)
    task_id = non_canonical_uuid(str(task.pk), form)
    snapshot = _get(world, f"/agent-api/v1/tasks/{task_id}?workspace={world.route.key}"
                           f"&client_conversation_id={CONVERSATION}")
    read = world.api.get(f"/api/v1/builder/tasks/{task_id}", **_op(world))
    control = _post(world, f"/api/v1/builder/tasks/{task_id}/control",
                    {"request_id": "p", "expected_revision": 1, "action": "pause"})
    assert [(r.status_code, r.json()["error"]) for r in (snapshot, read, control)] == [(404, "task_not_found")] * 3
    task.refresh_from_db()
    assert (task.state, task.revision, TaskLedgerEntry.objects.filter(task=task).count()) == ("active", 1, 1)


@pytest.mark.parametrize("query", ["limit=1&limit=2", "cursor=a&cursor=a", "project_id=x&project_id=x"])
def test_the_builder_list_refuses_a_repeated_parameter_as_the_agent_api_does(world, query):
    response = world.api.get(f"/api/v1/builder/tasks?{query}", **_op(world))
    body = response.json()
    name = query.split("=", 1)[0]
    assert (response.status_code, body["error"], body["field"], list(body["fields"])) == (
        400, "invalid_request", name, [name])


def test_a_builder_create_with_a_repeated_parameter_is_refused_and_creates_nothing(world):
    response = _post(world, "/api/v1/builder/tasks?request_id=a&request_id=b", _create_body(world))
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")
    assert (Task.objects.count(), TaskLedgerEntry.objects.count()) == (0, 0)


def test_the_builder_list_refuses_a_cursor_that_is_not_a_task_of_the_listing_before_reading_the_limit(world):
    """The cursor's 400 names it (apps.tasks.selectors.task_list_after), whether no task has the id or
    the task is outside the listing (another project's, with project_id); it is checked before the
    limit, as when the view read it itself."""
    task = _task(world)
    for query in (f"cursor={uuid.uuid4()}&limit=0", f"cursor={task.pk}&project_id={uuid.uuid4()}&limit=0"):
        response = world.api.get(f"/api/v1/builder/tasks?{query}", **_op(world))
        body = response.json()
        assert (response.status_code, body["error"], body["message"], body["fields"]) == (
            400, "invalid_request", "cursor: Not a task of this listing.", {"cursor": ["Unknown cursor."]}), query
