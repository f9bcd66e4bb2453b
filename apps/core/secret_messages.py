"""A one-time secret (a new token, a generated signing secret) shown to an operator once: a warning
message on the page the form redirects to, with a Copy button. Messages wait in the session
(settings.MESSAGE_STORAGE), never in a cookie, and leave it once shown; a reload shows nothing."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest
from django.utils.html import format_html


def secret_message(request: HttpRequest, *, lead: str, secret: str, element_id: str) -> None:
    """`lead` (plain text, escaped) then the secret in `<code id=element_id>` and its Copy button."""
    messages.warning(request, format_html(
        '{}: <code id="{}">{}</code> <button type="button" class="button" '
        "onclick=\"navigator.clipboard.writeText(document.getElementById('{}').textContent)\">Copy</button>",
        lead, element_id, secret, element_id))
