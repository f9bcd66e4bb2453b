"""bailinghub.gunicorn, with a stop signal that reaches the first worker before its handlers do
(tests/core/test_gunicorn.py): as when the master asks it to quit in the moments after the fork."""

import os
import signal
from pathlib import Path

from bailinghub.gunicorn import *  # noqa: F403  (the settings under test)
from bailinghub.gunicorn import post_fork as _post_fork

_MARK = Path(os.environ["BAILING_TEST_EARLY_STOP_MARK"])


def post_fork(server, worker):  # type: ignore[no-untyped-def]
    _post_fork(server, worker)
    if not _MARK.exists():
        _MARK.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGQUIT)  # still the master's handler: it only queues it
