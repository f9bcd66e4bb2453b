"""The console's breadcrumbs, a change page's heading and the delete page's sentence: an object's
name or id in them is isolated as everywhere else in the console (apps.core.bidi), so a name
holding U+202E or Arabic letters cannot reorder the text around it (Home › Routes › <name> ›
Delete). Django's pages printed the object's str raw."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.utils.html import escape

from apps.projects.models import Membership
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts
from tests.projects.factories import MembershipFactory, UserFactory
from tests.routes.factories import RouteFactory

pytestmark = pytest.mark.django_db

# U+202E would draw the rest of the trail right to left; the Arabic letters would pull "›" and the
# words after them into their run.
NAME = "متجر \u202e<i>الرياض</i>"


def crumbs(client: Client, path: str) -> str:
    response = client.get(path)
    assert response.status_code == 200
    return re.search(r'<div class="breadcrumbs">(.*?)</div>', response.content.decode(), re.S).group(1)


def assert_isolated(trail: str, shown: str) -> None:
    """`shown` is in the trail once, escaped, in a <bdi>; nothing of it is outside that isolate."""
    isolate = f"<bdi>{escape(shown)}</bdi>"
    assert trail.count(isolate) == 1, trail
    rest = trail.replace(isolate, "")
    assert "\u202e" not in rest and "متجر" not in rest and "<i>" not in rest, trail


@pytest.fixture
def owner() -> Membership:
    return MembershipFactory(role=Membership.Role.OWNER)


@pytest.fixture
def console(owner) -> Client:
    client = Client()
    client.force_login(owner.user)
    return client


@pytest.fixture
def route(owner):
    return RouteFactory(project=owner.project, key="store-assistant", name=NAME)


@pytest.mark.parametrize("page", ["change", "delete", "history"])
def test_djangos_pages_isolate_the_object_in_their_breadcrumbs(console, route, page):
    assert_isolated(crumbs(console, f"/admin/routes/route/{route.pk}/{page}/"), str(route))


def test_a_knowledge_bases_pages_isolate_its_name_in_their_breadcrumbs(console, owner):
    kb = KnowledgeBaseFactory(project=owner.project, name=NAME)
    for path in (f"/admin/knowledge/knowledgebase/{kb.pk}/change/", f"/admin/knowledge/knowledgebase/{kb.pk}/search/",
                 f"/admin/ledger/ragquery/ask/{kb.pk}/"):
        assert_isolated(crumbs(console, path), NAME)


def test_a_documents_chunk_pages_isolate_its_filename_in_their_breadcrumbs(console, owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    document = next(iter(ingest_texts(kb, {f"{NAME}.md": "# 退货\n\n七天内可以退货。"}).values()))
    chunk = document.chunks.filter(kind="child").first()
    for path in (f"/admin/knowledge/document/{document.pk}/chunks/",
                 f"/admin/knowledge/document/{document.pk}/chunks/{chunk.pk}/edit/"):
        assert_isolated(crumbs(console, path), document.filename)


def test_the_quality_report_isolates_the_routes_name_in_its_breadcrumbs(console, route):
    assert_isolated(crumbs(console, f"/admin/ledger/ragquery/report/{route.pk}/"), NAME)


def test_a_users_password_page_isolates_the_user_in_its_breadcrumbs():
    admin_user = UserFactory(username="root", is_superuser=True)
    user = UserFactory(username=NAME)
    client = Client()
    client.force_login(admin_user)
    assert_isolated(crumbs(client, f"/admin/auth/user/{user.pk}/password/"), NAME)


def test_the_change_pages_heading_isolates_the_object(console, route):
    page = console.get(f"/admin/routes/route/{route.pk}/change/").content.decode()
    heading = re.search(r"<h2>(.*?)</h2>", page, re.S).group(1)
    assert heading == f"<bdi>{escape(str(route))}</bdi>"


def test_the_delete_pages_sentence_isolates_the_object(console, route):
    page = console.get(f"/admin/routes/route/{route.pk}/delete/").content.decode()
    sentence = re.search(r"<p>(Are you sure you want to delete .*?)</p>", page, re.S).group(1)
    assert f"\"<bdi>{escape(str(route))}</bdi>\"?" in sentence
    assert sentence.count("\u202e") == 1 and 'id="deleted-objects"' in page and 'name="post" value="yes"' in page
