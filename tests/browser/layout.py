"""Layout checks shared by the browser tests of the console's lists."""

from __future__ import annotations

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
