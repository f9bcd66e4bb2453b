"""The login's loopback listener on its own: what a browser does to 127.0.0.1:PORT before and
while it follows the callback."""

from __future__ import annotations

import socket
import time
import urllib.request
from urllib.parse import urlencode, urlsplit

from bailinghub_mcp.auth import LoopbackListener

STATE = "state-of-this-login-1234"


def test_an_idle_connection_does_not_hold_up_the_callback():
    """Browsers open speculative connections they may never use; the listener served one connection
    at a time and waited on the idle one for ever, so the real callback was never answered."""
    listener = LoopbackListener(STATE)
    try:
        with socket.create_connection(("127.0.0.1", urlsplit(listener.redirect_uri).port)):
            time.sleep(0.2)  # accepted first
            callback = f"{listener.redirect_uri}?{urlencode({'code': 'bhc_code', 'state': STATE})}"
            with urllib.request.urlopen(callback, timeout=5) as answer:
                status = answer.status
    finally:
        listener.close()

    assert status == 200
    assert listener.wait(0) == {"code": "bhc_code", "state": STATE}


class _AnsweredFirst:
    """An Event that notes, when it is set, whether the browser already has its page."""

    def __init__(self, browser: socket.socket) -> None:
        self.browser, self.answered, self._set = browser, None, False

    def set(self) -> None:
        self.browser.setblocking(False)
        try:
            self.answered = b"200" in self.browser.recv(64, socket.MSG_PEEK)
        except BlockingIOError:
            self.answered = False
        self._set = True

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        deadline = time.monotonic() + (timeout or 0)
        while not self._set and time.monotonic() < deadline:
            time.sleep(0.01)
        return self._set


def test_the_browser_has_its_page_before_the_login_goes_on():
    """A denied login ends the program as soon as the callback is taken: the page was written
    after, so the browser met a closed connection (RemoteDisconnected in a loaded test run)."""
    listener = LoopbackListener(STATE)
    try:
        with socket.create_connection(("127.0.0.1", urlsplit(listener.redirect_uri).port)) as browser:
            listener.done = _AnsweredFirst(browser)  # type: ignore[assignment]
            query = urlencode({"error": "access_denied", "state": STATE})
            browser.sendall(f"GET {urlsplit(listener.redirect_uri).path}?{query} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert listener.wait(5) == {"error": "access_denied", "state": STATE}
            assert listener.done.answered is True
    finally:
        listener.close()
