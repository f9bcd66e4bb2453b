"""The KB page's "Routes reading this knowledge base": its route search offers the routes the row
can take (of the KB's project, which the operator may change), a route of another project posted
anyway is refused on the row's route cell, and a row's error is shown where the operator sees it."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from apps.knowledge.models import KnowledgeBase, RouteKnowledgeBinding
from apps.projects.models import Membership, Project
from apps.routes.models import Route
from tests.knowledge.factories import EmbeddingModelFactory, KnowledgeBaseFactory
from tests.projects.factories import MembershipFactory, ProjectFactory
from tests.routes.factories import RouteFactory

pytestmark = pytest.mark.django_db

SEARCH = {"app_label": "knowledge", "model_name": "routeknowledgebinding", "field_name": "route", "term": "desk"}
REFUSED = "Not a route of this knowledge base&#x27;s project that you may change: pick one from the search."


def _found(response) -> list[str]:
    assert response.status_code == 200
    return [result["text"] for result in response.json()["results"]]


def _kb_page_post(kb, route_pk) -> dict[str, str]:
    """The KB page's POST: its settings as they are, one new row reading `route_pk`."""
    return {"name": kb.name, "description": "", "strategy": "auto", "min_chars": "0", "max_chars": "768",
            "overlap_chars": "0", "generations-TOTAL_FORMS": "0", "generations-INITIAL_FORMS": "0",
            "route_bindings-TOTAL_FORMS": "1", "route_bindings-INITIAL_FORMS": "0",
            "route_bindings-0-id": "", "route_bindings-0-knowledge_base": str(kb.pk),
            "route_bindings-0-route": str(route_pk)}


def _route_cell(page: str) -> str:
    """The new row's route cell."""
    return re.search(r'<td class="field-route">.*?</td>', page, re.S).group(0)


@dataclass
class World:
    kb: KnowledgeBase
    mine: Route
    other: Route
    viewed: Project


@pytest.fixture
def world(owner) -> World:
    """The owner's KB and route, a route of another project the owner also edits, and one of a
    project the owner only views."""
    kb = KnowledgeBaseFactory(project=owner.project, embedding_model=EmbeddingModelFactory(), name="审计资料")
    mine = RouteFactory(project=owner.project, key="audit-desk", name="Audit Desk")
    edited = MembershipFactory(user=owner.user, role=Membership.Role.OWNER).project
    other = RouteFactory(project=edited, key="store-desk", name="Store Desk")
    viewed = MembershipFactory(user=owner.user, role=Membership.Role.VIEWER).project
    RouteFactory(project=viewed, key="viewed-desk", name="Viewed Desk")
    RouteFactory(project=ProjectFactory(), key="stranger-desk", name="Stranger Desk")
    return World(kb=kb, mine=mine, other=other, viewed=viewed)


def test_the_route_search_of_a_kb_page_row_names_the_kbs_project_and_offers_only_its_routes(browser, world):
    page = browser.get(f"/admin/knowledge/knowledgebase/{world.kb.pk}/change/").content.decode()
    urls = set(re.findall(r'data-ajax--url="([^"]+)"', page))
    assert urls == {f"/admin/autocomplete/?project={world.kb.project_id}"}
    found = _found(browser.get("/admin/autocomplete/", {**SEARCH, "project": str(world.kb.project_id)}))
    assert found == [str(world.mine)]


def test_the_route_search_is_scoped_on_the_server_whatever_project_it_names(browser, world):
    """Asked for another project's routes (one the operator edits: offered, the row's KB decides in
    the page's URL), for a project the operator only views or does not belong to, or for no project
    at all: never a route the operator may not change."""
    found = _found(browser.get("/admin/autocomplete/", {**SEARCH, "project": str(world.other.project_id)}))
    assert found == [str(world.other)]
    assert _found(browser.get("/admin/autocomplete/", {**SEARCH, "project": str(world.viewed.pk)})) == []
    assert _found(browser.get("/admin/autocomplete/", {**SEARCH, "project": "not-a-uuid"})) == []
    assert sorted(_found(browser.get("/admin/autocomplete/", SEARCH))) == sorted([str(world.mine), str(world.other)])


def test_a_route_of_another_project_posted_on_a_kb_page_is_refused_on_its_route_cell(browser, world):
    response = browser.post(f"/admin/knowledge/knowledgebase/{world.kb.pk}/change/",
                            _kb_page_post(world.kb, world.other.pk))
    assert response.status_code == 200
    page = response.content.decode()
    assert "Please correct the error below." in page
    assert REFUSED in _route_cell(page)
    assert not RouteKnowledgeBinding.objects.exists()


def test_a_route_of_the_kbs_project_is_bound_from_the_kb_page(browser, world):
    response = browser.post(f"/admin/knowledge/knowledgebase/{world.kb.pk}/change/",
                            _kb_page_post(world.kb, world.mine.pk))
    assert response.status_code == 302
    bound = list(RouteKnowledgeBinding.objects.values_list("route_id", "knowledge_base_id"))
    assert bound == [(world.mine.pk, world.kb.pk)]


def test_a_row_error_on_its_hidden_knowledge_base_is_shown_on_its_route_cell(owner, world):
    """The row's own check (RouteKnowledgeBinding.clean) names the knowledge base, the row's hidden
    field, whose errors the tabular inline does not show: it is moved to the route cell."""
    from django.contrib.admin.sites import site
    from django.test import RequestFactory

    request = RequestFactory().post("/")
    request.user = owner.user
    inline = next(inline for inline in site._registry[KnowledgeBase].get_inline_instances(request, world.kb)
                  if inline.model is RouteKnowledgeBinding)
    formset_class = inline.get_formset(request, None)  # a new KB's page: the routes of every project edited
    data = {key: value for key, value in _kb_page_post(world.kb, world.other.pk).items()
            if key.startswith("route_bindings")}
    formset = formset_class(data, instance=world.kb, prefix="route_bindings")
    assert not formset.is_valid()
    assert formset.forms[0].errors == {"route": ["The knowledge base must belong to the route's project."]}
