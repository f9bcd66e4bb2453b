"""``{% load bidi %}``: ``{{ value|identifier }}``, ``{{ value|bdi }}`` and ``{{ message|message }}``
(apps.core.bidi)."""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString

from apps.core.bidi import identifier_html, message_html, text_html

register = template.Library()


@register.filter
def identifier(value: object) -> SafeString:
    return identifier_html(value)


@register.filter
def bdi(value: object) -> SafeString:
    return text_html(value)


@register.filter
def message(value: object) -> SafeString:
    return message_html(value)
