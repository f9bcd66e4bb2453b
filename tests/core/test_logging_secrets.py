"""No credential the project issues reaches a log line, whatever handler writes it; request ids
are checked before they are echoed or logged."""

from __future__ import annotations

import io
import logging
import re
import sys
from pathlib import Path

import pytest
from django.utils.log import AdminEmailHandler, RequireDebugTrue
from rest_framework.test import APIClient

from apps.core.logging import TOKEN_PATTERN, RedactingFormatter, redact
from apps.core.tokens import token_generate
from tests import log_scanner

pytestmark = [pytest.mark.urls("tests.core.urls")]

PREFIXES = ["bha_", "bhr_", "bhc_", "bhk_", "bhop_"]
ANY_TOKEN = re.compile(r"bh[a-z]{1,4}_[A-Za-z0-9_-]{16,}")


def _tokens() -> dict[str, str]:
    return {prefix: token_generate(prefix) for prefix in PREFIXES}


@pytest.fixture
def console():
    """What the project's console handler writes, as text."""
    handler = next(h for h in logging.getLogger().handlers if getattr(h, "name", "") == "console")
    stream = io.StringIO()
    previous = handler.setStream(stream)
    try:
        yield stream
    finally:
        handler.setStream(previous)


@pytest.mark.parametrize("prefix", PREFIXES)
def test_every_token_shape_is_redacted(prefix):
    token = token_generate(prefix)
    assert redact(f"path /runs/{token}/complete and ?t={token}&x=1 and '{token}'") == (
        "path /runs/[redacted]/complete and ?t=[redacted]&x=1 and '[redacted]'")


@pytest.mark.parametrize("text,redacted", [
    ("key sk-proj-Ab3dEf6hIj9kLm2nOp5q done", "key [redacted] done"),
    ("stripe sk_live_51Hx0000000000000000abcd", "stripe [redacted]"),
    ("aws AKIAIOSFODNN7EXAMPLE here", "aws [redacted] here"),
    ("gh ghp_" + "a1" * 18 + " x", "gh [redacted] x"),
    ("slack xoxb-1234567890-abcdefghij", "slack [redacted]"),
    ("google AIza" + "B" * 35, "google [redacted]"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXZhbHVl end", "jwt [redacted] end"),
    ('{"api_key": "abcdef123456", "apikey=zzzzzz99", "api key: k-123456789"}',
     '{"api_key": "[redacted]", "apikey=[redacted]", "api key: [redacted]"}'),
    # what is not a credential stays
    ("task-runner risk-high skip sk-short AKIA123 eyJ.x.y", "task-runner risk-high skip sk-short AKIA123 eyJ.x.y"),
    ("ingest-sk-translations-2024.pdf", "ingest-sk-translations-2024.pdf"),
    ("operation sk_inventory_adjustments_create", "operation sk_inventory_adjustments_create"),
    ("route shop-rk-warehouse-stockcount", "route shop-rk-warehouse-stockcount"),
    ("    token = lease_claim(row)", "    token = lease_claim(row)"),
])
def test_other_services_credentials_are_redacted_by_their_shapes(text, redacted):
    assert redact(text) == redacted


@pytest.mark.parametrize("text,redacted", [
    ('{"accessToken": "abcdef123456"}', '{"accessToken": "[redacted]"}'),
    ('{"clientSecret": "abcdef123456"}', '{"clientSecret": "[redacted]"}'),
    ('{"token": "abcdef123456"}', '{"token": "[redacted]"}'),
    ("GET /hook?token=abcdef123456&x=1", "GET /hook?token=[redacted]&x=1"),
    ("X-Auth-Token: abcdef123456", "X-Auth-Token: [redacted]"),
    ("sessionToken=abcdef123456 dbPassword=hunter2x AppSecret=s3cr3tvalue",
     "sessionToken=[redacted] dbPassword=[redacted] AppSecret=[redacted]"),
    ("refresh_token=abcdef123456", "refresh_token=[redacted]"),
])
def test_a_word_naming_a_credential_inside_another_is_still_one(text, redacted):
    assert redact(text) == redacted


def test_the_token_pattern_matches_every_issued_shape():
    assert all(TOKEN_PATTERN.search(token) for token in _tokens().values())


def test_the_django_logger_writes_through_the_project_handlers_only():
    handlers = logging.getLogger("django").handlers
    assert "console" in {h.name for h in handlers}
    assert not [h for h in handlers if isinstance(h, AdminEmailHandler)
                or any(isinstance(f, RequireDebugTrue) for f in h.filters)]


def test_a_not_found_path_with_a_token_is_redacted_in_the_console(console, caplog):
    tokens = _tokens()
    client = APIClient()
    for token in tokens.values():
        client.post(f"/agent-api/v1/runs/{token}/complete", {}, format="json")
        client.get(f"/agent-api/v1/nothing/{token}")
    output = console.getvalue()
    assert "[redacted]" in output
    assert not ANY_TOKEN.search(output)
    assert not any(ANY_TOKEN.search(record.getMessage()) for record in caplog.records)


def test_tokens_in_headers_paths_bodies_and_query_strings_never_reach_a_log(console, caplog):
    client = APIClient()
    client.raise_request_exception = False
    for token in _tokens().values():
        client.post(f"/agent-api/test/log-request/{token}?code={token}&plain={token}",
                    {"refresh_token": token, "note": f"copy {token}"}, format="json",
                    HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_X_CLIENT_TOKEN=token)
    output = console.getvalue()
    records = "\n".join(record.getMessage() + (record.exc_text or "") for record in caplog.records)
    assert "Unhandled error" in output  # the traceback was written, redacted
    assert not ANY_TOKEN.search(output)
    assert not ANY_TOKEN.search(records)


def test_a_traceback_carrying_a_token_is_redacted(console, caplog):
    token = token_generate("bhop_")
    try:
        raise RuntimeError(f"failed with {token}")
    except RuntimeError:
        logging.getLogger("bailinghub.test").exception("boom")
    assert "failed with [redacted]" in console.getvalue()
    assert token not in console.getvalue()
    assert token not in caplog.text


def test_the_runserver_request_line_is_redacted(console):
    token = token_generate("bhc_")
    logging.getLogger("django.server").info('"%s" %s %s', f"GET /cb?code={token} HTTP/1.1", "302", "0")
    assert token not in console.getvalue()
    assert "code=[redacted]" in console.getvalue()


@pytest.mark.parametrize("value", [
    "a" * 129, "bad id", "id\nX-Injected: 1", "ünïcode-id", "bha_" + "A" * 43, "bhop_" + "x" * 43, "",
])
def test_a_request_id_that_is_too_long_odd_or_token_shaped_is_replaced(client, value):
    response = client.get("/healthz", HTTP_X_REQUEST_ID=value)
    assert response["X-Request-ID"] != value
    assert re.fullmatch(r"[0-9a-f]{32}", response["X-Request-ID"])


@pytest.mark.parametrize("value", ["a" * 128, "req-1234.abc_DEF", "01J9Z3K8Q4X5"])
def test_a_well_formed_request_id_is_echoed(client, value):
    assert client.get("/healthz", HTTP_X_REQUEST_ID=value)["X-Request-ID"] == value


def test_the_request_id_in_log_lines_is_the_validated_one(console):
    token = token_generate("bha_")
    APIClient().get("/agent-api/nothing-here", HTTP_X_REQUEST_ID=token)
    assert token not in console.getvalue()


def test_the_suite_log_scanner_catches_a_token_that_escaped_redaction():
    record = logging.LogRecord("leaky", logging.WARNING, __file__, 1, "leak " + "bhop_" + "Z" * 43, None, None)
    before = len(log_scanner._findings)
    log_scanner._RecordScanner().emit(record)
    caught = log_scanner._findings[before:]
    del log_scanner._findings[before:]  # the leak was made on purpose: the session must not fail for it
    assert len(caught) == 1
    assert "record of leaky" in caught[0]
    assert "Z" * 43 not in caught[0]


SCANNED_SUITE = """
import logging

def test_leaks():
    logging.getLogger("leaky").warning("leak %s", "bhop_" + "Q" * 43 if LEAK else "nothing")

def test_passes():
    pass
"""


@pytest.mark.parametrize("leak", [True, False])
def test_a_token_logged_on_an_xdist_worker_fails_the_whole_run(pytester, monkeypatch, leak):
    """`make test` runs the suite on xdist workers: what a worker's scanner finds reaches the
    controller, which names it and fails the run; a clean run passes."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    pytester.makepyfile(test_scanned=f"LEAK = {leak}\n" + SCANNED_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:django", "-p", "no:cacheprovider", "-p", "tests.log_scanner",
                                           "-n", "2")
    result.assert_outcomes(passed=2)
    if leak:
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        result.stdout.fnmatch_lines(["*credentials in log output*", "*test_scanned.py::test_leaks: record of leaky*"])
        assert "Q" * 43 not in result.stdout.str()
    else:
        assert result.ret == pytest.ExitCode.OK
        assert "credentials in log output" not in result.stdout.str()


def test_a_library_logger_with_its_own_handler_is_redacted_too():
    """Handlers configured outside LOGGING (gunicorn's access log, a library's own) get records
    that were redacted when they were made."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    access = logging.getLogger("gunicorn.access.test")
    access.addHandler(handler)
    access.propagate = False
    token = token_generate("bhk_")
    try:
        access.warning('%s "%s %s" %s', "127.0.0.1", "POST", f"/agent-auth/v1/x/{token}", 401)
    finally:
        access.removeHandler(handler)
    assert stream.getvalue() == '127.0.0.1 "POST /agent-auth/v1/x/[redacted]" 401\n'


@pytest.mark.parametrize("status, traceback", [(403, False), (404, False), (500, True)])
def test_a_refused_request_is_one_line_and_a_server_error_keeps_its_traceback(status, traceback):
    """The console handler, as configured: Django's request logger attaches the exception of a 403."""
    [handler] = [h for h in logging.getLogger("django").handlers if isinstance(h.formatter, RedactingFormatter)]
    try:
        raise PermissionError("the reason")
    except PermissionError:
        record = logging.getLogger("django.request").makeRecord(
            "django.request", logging.WARNING, __file__, 1, "Forbidden: %s", ("/admin/x/",), sys.exc_info(),
            extra={"status_code": status})
    assert handler.filter(record)
    line = handler.format(record)
    assert record.exc_info is not None  # the record itself keeps it for any other handler
    assert line.endswith("django.request: Forbidden: /admin/x/") is not traceback
    assert ("Traceback (most recent call last)" in line) is traceback
