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

    from apps.knowledge.pipeline import parallel

    connection.settings_dict["TEST"]["NAME"] = name
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
        yield
    finally:
        parallel.shutdown()  # the hybrid search's second connection would keep the database from being dropped
        connection.creation.destroy_test_db(old_name, verbosity=0, keepdb=False)


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def percentiles(values: list[float]) -> dict:
    """{n, p50, p95, p99} of timings in ms, rounded to 0.1."""
    if not values:
        return {"n": 0}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {"n": len(ordered), "p50": at(0.50), "p95": at(0.95), "p99": at(0.99)}


def auc(pairs: list[tuple[float, int]]) -> float:
    """Area under the ROC curve of (score, label) pairs: the probability that a random positive
    scores above a random negative, ties counting half; nan with one class only."""
    import bisect

    positives = sorted(score for score, label in pairs if label)
    negatives = sorted(score for score, label in pairs if not label)
    if not positives or not negatives:
        return float("nan")
    wins = sum(bisect.bisect_left(negatives, score)
               + 0.5 * (bisect.bisect_right(negatives, score) - bisect.bisect_left(negatives, score))
               for score in positives)
    return wins / (len(positives) * len(negatives))
