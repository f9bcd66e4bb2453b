"""Request ids in every log line, and no credential in any of them.

Redaction happens twice: when a record is made (`install_record_redaction`, from CoreConfig.ready),
so every handler and every capture of the record (pytest's included) sees the redacted message
and traceback; and again in `RedactingFormatter`, the formatter of every handler in LOGGING, for
whatever reaches a handler by another road.
"""

from __future__ import annotations

import contextvars
import logging
import re
from typing import Any

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")

# Every credential the project issues is `bh` + a short kind + `_` + base64url: bha_ (access),
# bhr_ (refresh), bhc_ (authorization code), bhk_ (agent client), bhop_ (operator token).
TOKEN_PATTERN = re.compile(r"bh[a-z]{1,4}_[A-Za-z0-9_-]{16,}")
REDACTED = "[redacted]"

_SECRET_PATTERNS = [
    TOKEN_PATTERN,
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/-]{8,}=*"),
    # A word that names a credential, inside another or not (clientSecret, X-Auth-Token, api_key),
    # then its value; a value a call follows (`token = lease_claim(row)` in a traceback's source
    # line) is code, not a credential.
    re.compile(r"(?i)((?:code|token|password|passwd|secret|api[_ -]?key)[\"']?\s*[=:]\s*[\"']?)"
               r"[^\s&\"',}()]{6,}(?![\w(])"),
    # Other services' credentials by their published shapes: an approver's comment (sent to the
    # agent's model) or a business system's error text may carry one. A key's body holds a digit:
    # `sk_inventory_adjustments_create` (an operationId) or `shop-rk-warehouse-stockcount` is not one.
    re.compile(r"(?<![\w-])(?:sk|rk)[-_](?:live[-_]|test[-_]|proj[-_])?(?=[A-Za-z_-]*\d)[A-Za-z0-9_-]{16,}"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key ids
    re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})"),  # GitHub
    re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),  # Slack
    re.compile(r"\bAIza[0-9A-Za-z_-]{35}"),  # Google API keys
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),  # JSON Web Tokens
]


def redact(text: str) -> str:
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + REDACTED, text)
    return text


def redact_record(record: logging.LogRecord) -> logging.LogRecord:
    """The record's message, traceback and stack with every credential replaced, in place."""
    try:
        message = record.getMessage()
    except Exception:  # a bad format string is for logging to report, at emit time
        return record
    cleaned = redact(message)
    if cleaned != message:
        record.msg, record.args = cleaned, None
    if record.exc_info and not record.exc_text:
        record.exc_text = redact(_TRACEBACKS.formatException(record.exc_info))
    if record.stack_info:
        record.stack_info = redact(record.stack_info)
    return record


_TRACEBACKS = logging.Formatter()


def install_record_redaction() -> None:
    """Redact every log record as it is made, whichever logger or library makes it."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "redacts", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        return redact_record(previous(*args, **kwargs))

    factory.redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True


class RedactSecretsFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        redact_record(record)
        return True


class RedactingFormatter(logging.Formatter):
    """The formatter of every handler: the whole line, traceback included, is redacted.

    A refused request (4xx) is one line: Django's request logger attaches the exception it turned
    into the 403 or 404, and a traceback per refusal buries the real failures. It is left out of
    this line only (a copy of the record), so another handler still gets it; a 5xx keeps it."""

    def format(self, record: logging.LogRecord) -> str:
        status = getattr(record, "status_code", None)
        if record.exc_info and isinstance(status, int) and status < 500:
            record = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None})
        return redact(super().format(record))
