"""Browser tests: Playwright for Python drives Debian's Chromium (`/usr/bin/chromium`, or
`BAILING_CHROMIUM`) against pytest-django's live server. `playwright install` cannot download
browsers on these machines, so `make test` installs the Debian package instead.

A failing test leaves a screenshot of its page under `var/browser-failures/` (the README names it).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

from apps.projects.models import Membership
from tests.projects.factories import MembershipFactory, ProjectFactory, UserFactory

# Playwright's sync API runs an event loop in this thread; the ORM calls of test bodies and
# factories are still plain synchronous code, so Django's async-safety guard does not apply.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

FAILURES_DIR = Path(__file__).resolve().parents[2] / "var" / "browser-failures"
OPERATOR_PASSWORD = "pw-operator-123"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
]


def chromium_path() -> str:
    path = os.environ.get("BAILING_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        raise RuntimeError("Browser tests need Debian's chromium package: apt-get install chromium "
                           "(make test installs it when run as root).")
    return path


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@contextmanager
def browser_page(request, browser, base_url: str) -> Iterator:
    """A page in a new browser context on `base_url`; if the test fails, a screenshot of it."""
    context = browser.new_context(base_url=base_url, viewport={"width": 1366, "height": 900})
    context.set_default_timeout(15_000)
    page = context.new_page()
    yield page
    failed = any(getattr(request.node, f"rep_{when}", None) is not None
                 and getattr(request.node, f"rep_{when}").failed for when in ("setup", "call"))
    if failed:
        FAILURES_DIR.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)[-150:]
        try:
            page.screenshot(path=str(FAILURES_DIR / f"{name}.png"), full_page=True)
        except Exception as exc:  # a crashed page must not hide the test's own failure
            print(f"screenshot failed: {exc}")
    context.close()


@pytest.fixture
def page(request, browser, live_server):
    with browser_page(request, browser, live_server.url) as page:
        yield page


@pytest.fixture
def project(transactional_db):
    return ProjectFactory(name="Bailing Retail", slug="bailing-retail")


@pytest.fixture
def operator(project):
    user = UserFactory(username="operator", is_staff=True, is_superuser=False,
                       password=OPERATOR_PASSWORD)
    MembershipFactory(project=project, user=user, role=Membership.Role.OWNER)
    return user


def admin_login(page, *, username: str, password: str) -> None:
    page.goto("/admin/login/?next=/admin/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("input[type=submit], button[type=submit]")
    page.wait_for_url(re.compile(r".*/admin/$"))


def session_signed_in(page, user, base_url: str) -> None:
    """`user` signed in to the console in `page`'s browser context by a session cookie, as a sign-in
    leaves it (Django's test client's force_login writes the same session row), without the form:
    the sign-in page and its POST cost about 0.7 s a test over some 150 browser tests. The form
    itself is driven by tests/browser/test_login.py and by every test that calls admin_login."""
    client = Client()
    client.force_login(user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME]
    page.context.add_cookies([{"name": cookie.key, "value": cookie.value, "url": base_url, "httpOnly": True,
                               "sameSite": "Lax"}])


@pytest.fixture
def logged_in_page(page, operator, live_server):
    """The operator's console, signed in, on the landing page (/admin/)."""
    session_signed_in(page, operator, live_server.url)
    page.goto("/admin/")
    assert page.url.endswith("/admin/"), f"the session cookie did not sign in: {page.url}"
    return page
