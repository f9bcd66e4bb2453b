"""``{% load timefmt %}``: ``{{ moment|ago }}`` — "3 minutes ago", or "just now"; ``{{ seconds|short_duration }}``
— "45 s", "5 min" (apps.core.timefmt)."""

from __future__ import annotations

from datetime import datetime

from django import template

from apps.core import timefmt

register = template.Library()


@register.filter
def ago(value: datetime) -> str:
    return timefmt.ago(value)


@register.filter
def short_duration(seconds: float) -> str:
    return timefmt.short_duration(seconds)
