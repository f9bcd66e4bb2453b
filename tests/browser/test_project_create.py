"""A project owner creates a project in Chromium and owns it (h4's A2). Screenshots in /tmp/shots/."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.projects.models import Project

SHOTS = Path("/tmp/shots")


@pytest.mark.parametrize("width", [1366, 390])
def test_an_owner_creates_a_project_and_is_its_owner(logged_in_page, width):
    page = logged_in_page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/admin/projects/project/add/")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"project-add-{width}.png"), full_page=True)
    page.fill("input[name=name]", "Outlet Stores")
    page.click("input[name=_continue]")
    created = Project.objects.get(name="Outlet Stores")
    page.wait_for_url(f"**/admin/projects/project/{created.pk}/change/")
    page.screenshot(path=str(SHOTS / f"project-created-{width}.png"), full_page=True)
    assert "You are the owner of Outlet Stores" in page.locator(".messagelist").inner_text()
    assert list(created.memberships.values_list("user__username", "role")) == [("operator", "owner")]
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
