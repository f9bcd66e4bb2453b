"""The console's front door in a real browser."""

from __future__ import annotations

from tests.browser.conftest import OPERATOR_PASSWORD


def test_operator_logs_in_and_lands_on_the_console(logged_in_page):
    page = logged_in_page
    assert page.url.endswith("/admin/")
    assert page.locator("#user-tools").inner_text().upper().find("OPERATOR") >= 0


def test_a_wrong_password_is_refused_on_the_page(page, operator):
    page.goto("/admin/login/")
    page.fill("input[name=username]", operator.username)
    page.fill("input[name=password]", OPERATOR_PASSWORD + "x")
    page.click("input[type=submit]")
    assert page.url.split("?")[0].endswith("/admin/login/")
    assert "correct username and password" in page.locator(".errornote").inner_text()
