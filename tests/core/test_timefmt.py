"""Times as the console shows them (apps.core.timefmt)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from apps.core.timefmt import ago, time_ago


def test_a_moment_under_a_minute_ago_is_just_now():
    assert ago(timezone.now() - timedelta(seconds=10)) == "just now"


def test_a_moment_minutes_ago_says_how_many():
    assert ago(timezone.now() - timedelta(minutes=3, seconds=10)) == "3\xa0minutes ago"


def test_time_ago_keeps_the_moment_in_its_title():
    moment = timezone.now() - timedelta(seconds=5)
    assert time_ago(moment) == f'<span title="{moment.isoformat(timespec="seconds")}">just now</span>'
