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
