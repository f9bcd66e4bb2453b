"""An operator token records its last use through apps.projects.tokens.operator_token_touch, at
most once a minute: a busy script does not write the token's row on every request."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from apps.projects.models import OperatorToken
from apps.projects.tokens import operator_token_create
from tests.projects.factories import MembershipFactory

pytestmark = pytest.mark.django_db

URL = "/api/v1/builder/embedding-models"


@pytest.fixture
def token() -> tuple[OperatorToken, APIClient]:
    row, token = operator_token_create(user=MembershipFactory().user, name="use", scopes=["knowledge:create"])
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return row, api


def _updates(api: APIClient) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert api.get(URL).status_code == 200
    return sum(q["sql"].startswith('UPDATE "projects_operatortoken"') for q in queries.captured_queries)


def test_the_first_use_is_recorded(token):
    row, api = token
    assert (_updates(api), OperatorToken.objects.get(pk=row.pk).last_used_at is not None) == (1, True)


def test_a_use_within_the_minute_writes_nothing(token):
    row, api = token
    _updates(api)
    recorded = OperatorToken.objects.get(pk=row.pk).last_used_at
    assert (_updates(api), OperatorToken.objects.get(pk=row.pk).last_used_at) == (0, recorded)


def test_a_use_after_the_minute_is_recorded_again(token):
    row, api = token
    _updates(api)
    earlier = OperatorToken.objects.get(pk=row.pk).last_used_at - timedelta(minutes=2)
    OperatorToken.objects.filter(pk=row.pk).update(last_used_at=earlier)
    assert _updates(api) == 1
    assert OperatorToken.objects.get(pk=row.pk).last_used_at > earlier
