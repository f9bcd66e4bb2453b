"""Layout checks shared by the browser tests of the console's lists."""

from __future__ import annotations

from pathlib import Path

SHOTS = Path("/tmp/shots")

# The elements of the result table whose right edge passes its box (or the window, if nearer).
_PAST_THE_BOX = """box => {
  const right = Math.min(box.getBoundingClientRect().right, window.innerWidth);
  return [...box.querySelectorAll('#result_list, #result_list *')]
    .filter(e => e.getBoundingClientRect().right > right + 0.5)
    .map(e => e.tagName + '.' + e.className);
}"""


def assert_changelist_fits(page, *, last_header: str) -> None:
    """The changelist's result table fits at the page's viewport: its box does not scroll, nothing
    in it passes the box or the window, the page does not scroll sideways, and the last column's
    header (`last_header`, lower case) is visible inside the box."""
    box = page.locator("#changelist .results")
    assert box.evaluate("e => e.scrollWidth <= e.clientWidth")
    assert box.evaluate(_PAST_THE_BOX) == []
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    last = page.locator("#result_list thead th").last
    assert last.inner_text().strip().lower() == last_header
    assert last.is_visible()
    assert last.evaluate("e => e.getBoundingClientRect().right") <= box.evaluate(
        "e => e.getBoundingClientRect().right")


def changelist_at_1366(page, path: str, *, rows: int, shot: str) -> None:
    """Open the changelist at `path` at 1366×768 (the admin's sidebar and filters open), check it
    lists `rows` rows, and save a full-page screenshot as /tmp/shots/`shot`."""
    page.set_viewport_size({"width": 1366, "height": 768})
    page.goto(path)
    assert page.locator("#result_list tbody tr").count() == rows
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / shot), full_page=True)
