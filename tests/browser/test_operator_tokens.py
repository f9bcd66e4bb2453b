"""Builder API tokens in Chromium: an operator creates one, sees it once, and a reload of that page
mints nothing. The token was the answer to the add form's POST, so reloading it (the browser's
"Confirm Form Resubmission") posted the form again: a second live token of the same name, the
first one never to be seen again."""

from __future__ import annotations

import re
from pathlib import Path

from apps.projects.models import OperatorToken
from apps.projects.tokens import operator_token_hash

SHOTS = Path("/tmp/shots")
TOKEN_RE = re.compile(r"bhop_[A-Za-z0-9_-]{43}")


def test_a_new_token_is_shown_once_and_a_reload_mints_no_other(logged_in_page, operator):
    page = logged_in_page
    page.goto("/admin/projects/operatortoken/add/")
    page.fill("input[name=name]", "ci-ingest")
    page.check("input[name=scopes][value='knowledge:ingest']")
    page.click("input[name=_save]")
    page.wait_for_selector(".messagelist")
    shown = TOKEN_RE.findall(page.locator(".messagelist").inner_text())
    assert len(shown) == 1
    token = OperatorToken.objects.get(user=operator)
    assert token.token_hash == operator_token_hash(shown[0])
    assert f"The operator token “ci-ingest ({token.prefix}…)” was added successfully." in page.locator(
        ".messagelist").inner_text()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "operator_token_created.png"), full_page=True)

    page.reload()
    assert TOKEN_RE.findall(page.content()) == []
    assert OperatorToken.objects.filter(user=operator).count() == 1
