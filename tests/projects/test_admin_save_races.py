"""Two operators save the same name (a knowledge base's, a tool provider's, a project's, a route's)
or route key at the same moment. Both forms find it free; the later save then broke the unique constraint,
or its service saw the other's row first, and either was a 500. The later save must be answered
as a save after the other one is: the form's error beside the field, and one row."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.core.signals import request_finished
from django.db.models.signals import pre_save

from apps.knowledge.admin import KnowledgeBaseAdmin
from apps.knowledge.models import KnowledgeBase
from apps.projects.admin import ProjectAdmin
from apps.projects.models import PROJECT_NAME_TAKEN, Membership, Project
from apps.routes.admin import RouteAdmin
from apps.routes.models import ROUTE_KEY_TAKEN, ROUTE_NAME_TAKEN, Route
from apps.tools.admin import ToolProviderAdmin
from apps.tools.models import ToolProvider
from tests.concurrency import responses_at_once, second_responses_after_waiting
from tests.knowledge.factories import EmbeddingModelFactory
from tests.projects.factories import MembershipFactory, UserFactory
from tests.tools.factories import STORE_SPEC

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass(frozen=True)
class Screen:
    admin: type
    model: type
    url: str
    field: str
    message: str
    form: Callable[[Membership], dict[str, Any]]
    value: str
    # A field the two saves fill differently, and its two values: each save is otherwise whole (a
    # route's key race names the two routes apart, else both constraints refuse the later save).
    varied: tuple[str, str, str] | None = None


def _kb_form(owner: Membership) -> dict[str, Any]:
    return {"project": str(owner.project_id), "name": "售后", "description": "",
            "embedding_model": str(EmbeddingModelFactory().pk), "strategy": "auto", "min_chars": "0",
            "max_chars": "768", "overlap_chars": "0", "generations-TOTAL_FORMS": "0",
            "generations-INITIAL_FORMS": "0", "route_bindings-TOTAL_FORMS": "0", "route_bindings-INITIAL_FORMS": "0"}


def _route_form(owner: Membership) -> dict[str, Any]:
    return {"project": str(owner.project_id), "key": "store-assistant", "name": "Store", "description": "",
            "enabled": "on", "audience_policy": "any", "allowed_audiences": "", "system_prompt": "",
            "agent_client_instructions": "", "agent_client_active_tool_limit": "8", "system_info_name": "",
            "system_info_summary": "", "system_info_domains": "", "system_info_boundaries": "",
            "max_tool_calls": "5", "permission": "full", "knowledge_mode": "chunk", "knowledge_top_k": "5",
            "knowledge_max_docs": "4", "knowledge_score_threshold": "", "memory_recent_messages": "12",
            "memory_recent_budget_chars": "8000", "memory_per_message_chars": "2000",
            "memory_summary_max_chars": "1200"}


def _provider_form(owner: Membership) -> dict[str, Any]:
    return {"project": str(owner.project_id), "name": "store", "base_url": "http://127.0.0.1:9/store",
            "signing_secret": "admin-secret-1-of-16-chars", "enabled": "on", "spec_text": STORE_SPEC.decode(),
            "tools-TOTAL_FORMS": "0", "tools-INITIAL_FORMS": "0"}


def _project_form(owner: Membership) -> dict[str, Any]:
    return {"name": "Bailing Wholesale", "slug": "", "description": "",
            "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0"}


SCREENS = {
    "knowledge base": Screen(KnowledgeBaseAdmin, KnowledgeBase, "/admin/knowledge/knowledgebase/add/", "name",
                             "A knowledge base with this name already exists in this project.", _kb_form, "售后"),
    "route": Screen(RouteAdmin, Route, "/admin/routes/route/add/", "key", ROUTE_KEY_TAKEN, _route_form,
                    "store-assistant", ("name", "Store A", "Store B")),
    "route name": Screen(RouteAdmin, Route, "/admin/routes/route/add/", "name", ROUTE_NAME_TAKEN, _route_form,
                         "Store", ("key", "store-a", "store-b")),
    "tool provider": Screen(ToolProviderAdmin, ToolProvider, "/admin/tools/toolprovider/add/", "name",
                            "This project already has a tool provider with that name.", _provider_form, "store"),
    "project": Screen(ProjectAdmin, Project, "/admin/projects/project/add/", "name", PROJECT_NAME_TAKEN,
                      _project_form, "Bailing Wholesale", ("slug", "wholesale-a", "wholesale-b")),
}


def _first_time_in_each_thread(wait: Callable[[], None]) -> Callable[[], None]:
    """`wait`, the first time a thread comes by: a save made again after a refusal passes."""
    passed: set[int] = set()

    def once() -> None:
        if threading.get_ident() not in passed:
            passed.add(threading.get_ident())
            wait()
    return once


def _race(screen: Screen, *, owner: Membership, superuser) -> list[Any]:
    """Both operators' saves of the same form, each in its own thread and transaction."""
    form = screen.form(owner)
    field, *values = screen.varied or ("", "", "")

    def save(value: str) -> Callable[[Any], Any]:
        def call(client: Any) -> Any:
            client.force_login(superuser if screen.model is Project else owner.user)
            return client.post(screen.url, {**form, field: value} if field else form)
        return call
    return responses_at_once([save(values[0]), save(values[1])])


def _assert_one_saved_and_one_refused_beside_the_field(screen: Screen, responses: list[Any]) -> None:
    assert sorted(response.status_code for response in responses) == [200, 302]
    [refused] = [response for response in responses if response.status_code == 200]
    assert refused.context["adminform"].form.errors == {screen.field: [screen.message]}
    assert screen.model.objects.filter(**{screen.field: screen.value}).count() == 1


@pytest.fixture
def owner():
    return MembershipFactory(role=Membership.Role.OWNER)


@pytest.fixture
def superuser():
    return UserFactory(is_staff=True, is_superuser=True)


@pytest.mark.parametrize("name", ["route", "route name", "tool provider", "project"])
def test_the_later_of_two_saves_at_once_is_refused_by_the_constraint_beside_the_field(
        name, owner, superuser):
    """Both saves pass every check before either writes (they meet just before the INSERT): the
    later INSERT waits for the other's commit and breaks the unique constraint."""
    screen = SCREENS[name]
    meet = threading.Barrier(2, timeout=30)
    before_insert = _first_time_in_each_thread(meet.wait)

    def receiver(sender: Any, **kwargs: Any) -> None:
        before_insert()
    pre_save.connect(receiver, sender=screen.model, weak=False)
    try:
        responses = _race(screen, owner=owner, superuser=superuser)
    finally:
        pre_save.disconnect(receiver, sender=screen.model)
    _assert_one_saved_and_one_refused_beside_the_field(screen, responses)


@pytest.mark.parametrize("name", ["knowledge base", "tool provider"])
def test_the_later_of_two_saves_at_once_is_refused_by_its_service_beside_the_field(
        name, owner, superuser, monkeypatch):
    """Both forms pass; one save commits before the other's service looks for the name, and the
    service refuses it (knowledge_base_name_taken, provider_name_taken)."""
    screen = SCREENS[name]
    meet = threading.Barrier(2, timeout=30)
    first: list[int] = []
    arrival = threading.Lock()
    committed = threading.Event()
    original = screen.admin.save_model

    def save_model(self: Any, request: Any, obj: Any, form: Any, change: bool) -> None:
        meet.wait()  # both forms are valid
        with arrival:
            if not first:
                first.append(threading.get_ident())
        if first[0] != threading.get_ident():
            assert committed.wait(timeout=30)
        original(self, request, obj, form, change)

    def winner_committed(sender: Any, **kwargs: Any) -> None:
        if threading.get_ident() == first[0]:
            committed.set()

    monkeypatch.setattr(screen.admin, "save_model", save_model)
    request_finished.connect(winner_committed, weak=False)
    try:
        responses = _race(screen, owner=owner, superuser=superuser)
    finally:
        request_finished.disconnect(winner_committed)
    _assert_one_saved_and_one_refused_beside_the_field(screen, responses)


@pytest.mark.parametrize("later", ["售后", "售\u200c后"])
def test_the_later_of_two_knowledge_base_saves_at_once_waits_for_the_earlier_and_is_refused_beside_the_field(
        owner, later):
    """The service looks for a name that reads as the new one under the project's names lock: the
    later save waits for the earlier one's commit, then finds its name (one that only reads the
    same was saved beside it: the constraint compares names as stored)."""
    screen = SCREENS["knowledge base"]
    form = screen.form(owner)

    def save(name: str) -> Callable[[Any], Any]:
        def call(client: Any) -> Any:
            client.force_login(owner.user)
            return client.post(screen.url, {**form, "name": name})
        return call
    responses = second_responses_after_waiting(save("售后"), save(later), KnowledgeBase)
    assert [response.status_code for response in responses] == [302, 200]
    assert responses[1].context["adminform"].form.errors == {"name": [screen.message]}
    assert list(KnowledgeBase.objects.filter(project=owner.project).values_list("name", flat=True)) == ["售后"]
