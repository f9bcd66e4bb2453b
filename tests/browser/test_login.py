"""The console's front door in a real browser."""

from __future__ import annotations

from tests.browser.conftest import OPERATOR_PASSWORD, admin_login


def test_operator_logs_in_and_lands_on_the_console(page, operator):
    """The sign-in form itself (logged_in_page signs in by a session cookie and never shows it)."""
    admin_login(page, username=operator.username, password=OPERATOR_PASSWORD)
    assert page.url.endswith("/admin/")
    assert page.locator("#user-tools").inner_text().upper().find("OPERATOR") >= 0


def test_a_wrong_password_is_refused_on_the_page(page, operator):
    page.goto("/admin/login/")
    page.fill("input[name=username]", operator.username)
    page.fill("input[name=password]", OPERATOR_PASSWORD + "x")
    page.click("input[type=submit]")
    assert page.url.split("?")[0].endswith("/admin/login/")
    assert "correct username and password" in page.locator(".errornote").inner_text()


def test_a_sign_in_link_with_an_off_site_next_lands_on_the_console(page, operator):
    """Django drops an off-site `next`, and the admin's sign-in then went to LOGIN_REDIRECT_URL's
    default, /accounts/profile/: a 404 right after a correct password."""
    page.goto("/admin/login/?next=https://elsewhere.example/admin/")
    page.fill("input[name=username]", operator.username)
    page.fill("input[name=password]", OPERATOR_PASSWORD)
    with page.expect_navigation():
        page.click("input[type=submit]")
    assert page.url.split("?")[0].endswith("/admin/")
    assert page.locator("#user-tools").inner_text().upper().find("OPERATOR") >= 0
