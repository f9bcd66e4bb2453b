"""Task creation, control with compare-and-set, blocking and the ledger (contracts-beyond-seeds §5)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.agent_auth.services import session_revoke
from apps.tasks.errors import (
    TaskInvalid,
    TaskRequestConflict,
    TaskRevisionConflict,
    TaskScopeBlocked,
    TaskTransitionInvalid,
)
from apps.tasks.models import Task, TaskLedgerEntry, TaskMember
from apps.tasks.services import MemberSpec, PolicySpec, task_control, task_create, task_members_verify

pytestmark = pytest.mark.django_db


def _members(world, conversation="conv-1", tools=("adjust_stock",)):
    return [MemberSpec(session_id=str(world.first.session.pk), workspace=world.route.key,
                       client_conversation_id=conversation, allowed_tools=tools),
            MemberSpec(session_id=str(world.second.session.pk), workspace=world.route.key,
                       client_conversation_id=conversation, allowed_tools=tools)]


def _create(world, request_id="req-1", **policy):
    return task_create(project=world.route.project, user=world.owner.user, request_id=request_id,
                       members=_members(world), policy=PolicySpec(**{"max_write_calls": 5, "max_concurrent": 2,
                                                                     **policy}))


def test_a_task_freezes_its_members_and_policy_under_a_scope_hash(world):
    task, created = _create(world)
    assert created is True
    assert (task.state, task.revision, task.ledger_sequence) == ("active", 1, 1)
    assert (task.max_write_calls, task.max_concurrent) == (5, 2)
    assert len(task.scope_hash) == 64
    members = list(task.members.order_by("position"))
    assert [m.principal_id for m in members] == ["u-1001", "u-1002"]
    assert [list(m.allowed_tools) for m in members] == [["adjust_stock"], ["adjust_stock"]]
    assert TaskLedgerEntry.objects.get(task=task).kind == "created"


def test_the_same_request_id_replays_and_a_different_request_under_it_conflicts(world):
    task, _ = _create(world)
    again, created = _create(world)
    assert (again.pk, created) == (task.pk, False)
    with pytest.raises(TaskRequestConflict):
        _create(world, max_write_calls=6)
    assert Task.objects.count() == 1


def test_two_tasks_with_different_policies_have_different_scope_hashes(world):
    one, _ = _create(world, request_id="a")
    two, _ = _create(world, request_id="b", max_write_calls=6)
    assert one.scope_hash != two.scope_hash


@pytest.mark.parametrize("change,field", [
    (lambda w: [MemberSpec(session_id="not-a-uuid", workspace=w.route.key, client_conversation_id="c")],
     "members[0].session_id"),
    (lambda w: [MemberSpec(session_id=str(w.first.session.pk), workspace="other-route", client_conversation_id="c")],
     "members[0].workspace"),
    (lambda w: [MemberSpec(session_id=str(w.first.session.pk), workspace=w.route.key, client_conversation_id="c",
                           allowed_tools=("bad name",))], "members[0].allowed_tools"),
    (lambda w: [], "members"),
])
def test_an_invalid_member_is_422_naming_it_and_nothing_is_stored(world, change, field):
    with pytest.raises(TaskInvalid) as caught:
        task_create(project=world.route.project, user=world.owner.user, request_id="r", members=change(world),
                    policy=PolicySpec())
    assert field in caught.value.extra["fields"]
    assert (Task.objects.count(), TaskMember.objects.count()) == (0, 0)


def test_a_past_expiry_and_zero_concurrency_are_refused(world):
    with pytest.raises(TaskInvalid) as caught:
        _create(world, max_concurrent=0, expires_at=timezone.now() - timedelta(minutes=1))
    assert set(caught.value.extra["fields"]) == {"policy.max_concurrent", "policy.expires_at"}
    assert Task.objects.count() == 0


def test_pause_and_resume_move_the_revision_and_append_to_the_ledger(world):
    task, _ = _create(world)
    task = task_control(task=task, user=world.owner.user, request_id="c1", expected_revision=1, action="pause")
    assert (task.state, task.revision) == ("paused", 2)
    task = task_control(task=task, user=world.owner.user, request_id="c2", expected_revision=2, action="resume")
    assert (task.state, task.revision, task.ledger_sequence) == ("active", 3, 3)
    assert list(task.ledger.values_list("kind", flat=True)) == ["created", "pause", "resume"]
    assert (task.write_reserved, task.write_consumed) == (0, 0)  # resume touches no budget


def test_a_stale_revision_is_a_conflict_and_changes_nothing(world):
    task, _ = _create(world)
    task_control(task=task, user=world.owner.user, request_id="c1", expected_revision=1, action="pause")
    with pytest.raises(TaskRevisionConflict) as caught:
        task_control(task=task, user=world.owner.user, request_id="c2", expected_revision=1, action="cancel")
    assert caught.value.extra == {"revision": 2, "state": "paused"}
    task.refresh_from_db()
    assert (task.state, task.revision, task.ledger_sequence) == ("paused", 2, 2)


def test_a_control_request_id_replays_its_first_answer(world):
    task, _ = _create(world)
    first = task_control(task=task, user=world.owner.user, request_id="c1", expected_revision=1, action="pause")
    again = task_control(task=task, user=world.owner.user, request_id="c1", expected_revision=1, action="pause")
    assert (again.state, again.revision) == (first.state, first.revision) == ("paused", 2)
    with pytest.raises(TaskRequestConflict):
        task_control(task=task, user=world.owner.user, request_id="c1", expected_revision=2, action="resume")


def test_cancel_is_final(world):
    task, _ = _create(world)
    task = task_control(task=task, user=world.owner.user, request_id="c1", expected_revision=1, action="cancel")
    with pytest.raises(TaskTransitionInvalid):
        task_control(task=task, user=world.owner.user, request_id="c2", expected_revision=2, action="resume")
    task.refresh_from_db()
    assert (task.state, task.revision) == ("cancelled", 2)


def test_revoking_one_member_blocks_the_whole_task(world):
    task, _ = _create(world)
    session_revoke(session=world.second.session, revoked_by="operator", reason="lost laptop")
    with pytest.raises(TaskScopeBlocked):
        task_members_verify(task=task)
    task.refresh_from_db()
    assert (task.state, task.members.count()) == ("blocked", 2)  # never shrunk to the rest
    assert task.blocked_reason == "a member session was revoked"
    assert task.ledger.last().kind == "blocked"
