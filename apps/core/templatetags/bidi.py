"""``{% load bidi %}``: ``{{ value|identifier }}``, ``{{ value|bdi }}``, ``{{ message|message }}``,
``{{ text|quoted }}`` (a document's or a chunk's text) and ``{{ text|bidi_escaped }}`` (the same in
an attribute) (apps.core.bidi)."""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString

from apps.core.bidi import bidi_controls_escaped, identifier_html, message_html, quoted_text_html, text_html

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


@register.filter
def quoted(value: object) -> SafeString:
    return quoted_text_html(value)


@register.filter
def bidi_escaped(value: object) -> str:
    return bidi_controls_escaped(str(value))
