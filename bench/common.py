"""Shared helpers for benchmarks: Django set-up and a scratch database on the configured server.

Benchmarks print figures; they never assert timings. Run them with the embedded servers:
`python -m bailinghub.embedded exec -- .venv/bin/python bench/<script>.py`.
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def django_setup() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bailinghub.settings")
    os.environ.setdefault("DEBUG", "true")
    import django

    django.setup()


@contextlib.contextmanager
def scratch_database(name: str):
    """A freshly migrated database `name` on the configured server, dropped afterwards."""
    from django.db import connection

    connection.settings_dict["TEST"]["NAME"] = name
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
        yield
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0, keepdb=False)


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
