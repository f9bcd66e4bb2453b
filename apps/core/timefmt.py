"""Times as the console shows them: in TIME_ZONE, naming it (the database holds UTC)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.formats import get_format
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.timesince import timesince


def local_time(value: datetime, fmt: str | None = None) -> str:
    """`value` in the console's time zone, in Django's date format `fmt` ("T" is the zone's name);
    by default the console's DATETIME_FORMAT (bailinghub/formats), as Django writes a date field."""
    return date_format(timezone.localtime(value), fmt or get_format("DATETIME_FORMAT"))


def local_clock(value: datetime, *, with_date: bool = False) -> str:
    """`value` to the millisecond in the console's time zone, naming it (Django's formats have no
    milliseconds): "08:12:57.946 CST", or with its date first."""
    local = timezone.localtime(value)
    day = f"{local:%Y-%m-%d} " if with_date else ""
    return f"{day}{local:%H:%M:%S}.{local.microsecond // 1000:03d} {date_format(local, 'T')}"


def ago(value: datetime) -> str:
    """"3 minutes ago", or "just now" under a minute (Django's timesince says "0 minutes")."""
    if timezone.now() - value < timedelta(minutes=1):
        return "just now"
    return f"{timesince(value)} ago"


def time_ago(value: datetime) -> SafeString:
    """`ago`, with the moment itself (ISO 8601, to the second) in its title."""
    return format_html('<span title="{}">{}</span>', value.isoformat(timespec="seconds"), ago(value))


def short_duration(seconds: float) -> str:
    """A wait as a status line says it: "45 s", "5 min", "3 h"."""
    if seconds < 90:
        return f"{int(seconds)} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{round(seconds / 3600)} h"
