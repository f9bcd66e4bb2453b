"""Counting the statements a page or an endpoint makes, for the tests that pin a list's queries
(STYLE.md: a list whose queries grow with its rows is a bug)."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext


def get_statements(client: Any, url: str, **extra: Any) -> int:
    """The statements one GET of `url` makes (it must answer 200)."""
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url, **extra).status_code == 200
    return len(queries.captured_queries)
