"""Request ids in every log line, and a last line of defence against credentials in logs."""

from __future__ import annotations

import contextvars
import logging
import re

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")

# Token shapes we issue (bha_/bhr_/bhc_/bhk_/bhp_ + base64url) and bearer headers.
_SECRET_PATTERNS = [
    re.compile(r"\bbh[a-z]_[A-Za-z0-9_-]{16,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/-]{8,}=*"),
    re.compile(r"(?i)((?:code|refresh_token|access_token|client_token|password|secret)[\"']?\s*[=:]\s*[\"']?)"
               r"[^\s&\"',}]{6,}"),
]


def redact(text: str) -> str:
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + "[redacted]", text)
    return text


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True


class RedactSecretsFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, ()
        return True
