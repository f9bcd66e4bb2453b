"""A new agent client's allowed routes follow the project chosen on the form, in Chromium (h4's A10:
every project's routes were listed, and the wrong ones refused only on save)."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.agent_auth.models import AgentClient
from tests.browser.conftest import admin_login
from tests.projects.factories import ProjectFactory, UserFactory
from tests.routes.factories import RouteFactory

SHOTS = Path("/tmp/shots")
PASSWORD = "pw-root-123"


@pytest.fixture
def projects(project):
    other = ProjectFactory(name="HR Helpdesk", slug="hr")
    RouteFactory(project=project, key="store-assistant", name="Store assistant")
    RouteFactory(project=project, key="outlet-faq", name="Outlet FAQ")
    RouteFactory(project=other, key="hr-helpdesk", name="HR helpdesk")
    return project, other


@pytest.mark.parametrize("width", [1366, 390])
def test_a_site_administrator_sees_only_the_chosen_projects_routes(page, projects, width):
    retail, hr = projects
    UserFactory(username="root", is_staff=True, is_superuser=True, password=PASSWORD)
    admin_login(page, username="root", password=PASSWORD)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/admin/agent_auth/agentclient/add/")
    shown = "#id_allowed_routes input[name=allowed_routes]:visible"
    assert page.locator(shown).count() == 3  # no project chosen yet: every route, each naming its project
    page.select_option("select[name=project]", str(hr.pk))
    assert [box.get_attribute("value") for box in page.locator(shown).all()] == ["hr-helpdesk"]
    page.check("input[name=allowed_routes][value=hr-helpdesk]")
    page.select_option("select[name=project]", str(retail.pk))
    assert sorted(box.get_attribute("value") for box in page.locator(shown).all()) == ["outlet-faq",
                                                                                      "store-assistant"]
    assert not page.locator("input[name=allowed_routes][value=hr-helpdesk]").is_checked()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"agent-client-add-routes-{width}.png"), full_page=True)
    page.fill("input[name=app_id]", "outlet-desktop")
    page.fill("input[name=name]", "Outlet desktop")
    page.check("input[name=allowed_routes][value=store-assistant]")
    page.fill("input[name=agent_authorize_url]", "https://business.example.com/agent/authorize")
    page.click("input[name=_save]")
    page.wait_for_url("**/change/")
    assert AgentClient.objects.get(app_id="outlet-desktop").allowed_routes == ["store-assistant"]


def test_a_project_without_routes_says_so(page, projects):
    ProjectFactory(name="Empty", slug="empty")
    UserFactory(username="root", is_staff=True, is_superuser=True, password=PASSWORD)
    admin_login(page, username="root", password=PASSWORD)
    page.goto("/admin/agent_auth/agentclient/add/")
    page.select_option("select[name=project]", label="Empty")
    assert page.locator("#id_allowed_routes input[name=allowed_routes]:visible").count() == 0
    assert page.locator("#allowed-routes-none").is_visible()


def test_a_form_opened_for_one_project_offers_to_open_for_another(page, projects):
    """Opened for a project (?project=), the form holds only its routes: choosing another said that
    project had no routes (review). It now offers to open the form for the one chosen."""
    retail, hr = projects
    UserFactory(username="root", is_staff=True, is_superuser=True, password=PASSWORD)
    admin_login(page, username="root", password=PASSWORD)
    page.goto(f"/admin/agent_auth/agentclient/add/?project={retail.pk}")
    shown = "#id_allowed_routes input[name=allowed_routes]:visible"
    assert sorted(box.get_attribute("value") for box in page.locator(shown).all()) == ["outlet-faq",
                                                                                      "store-assistant"]
    page.select_option("select[name=project]", str(hr.pk))
    assert page.locator(shown).count() == 0
    note = page.locator("#allowed-routes-none")
    assert note.is_visible() and "no routes yet" not in note.inner_text()
    with page.expect_navigation():
        page.click("#allowed-routes-reopen")
    assert [box.get_attribute("value") for box in page.locator(shown).all()] == ["hr-helpdesk"]
