"""A pytest plugin: the whole suite's log output is scanned for credentials the project issues.

Every log record that reaches the root logger (or a non-propagating logger with handlers, such
as `django` and `django.server`) and everything the project's stream handlers write are searched
for a token shape; one found fails the session, naming the test and the logger. The scan is one
regular-expression search per record or write. Under pytest-xdist each worker scans its own tests
and hands its findings to the controller, which reports them and fails the run.
"""

from __future__ import annotations

import logging
import re

import pytest

# Independent of apps.core.logging.TOKEN_PATTERN on purpose: the scanner checks it.
TOKEN_SHAPE = re.compile(r"bh[a-z]{1,4}_[A-Za-z0-9_-]{16,}")
FINDINGS_SHOWN = 20

_current_test = "(outside a test)"
_findings: list[str] = []


def _found(where: str, text: str) -> None:
    match = TOKEN_SHAPE.search(text)
    if match:
        masked = match.group()[:8] + "…"
        _findings.append(f"{_current_test}: {where}: {masked} in {text[max(0, match.start() - 60):match.start()]!r}")


class _RecordScanner(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # a malformed record is reported by logging itself
            return
        _found(f"record of {record.name}", "\n".join(filter(None, (text, record.exc_text, record.stack_info))))


class _StreamScanner:
    """Wraps a handler's stream: what the handler writes is scanned, then written."""

    def __init__(self, stream, name: str):
        self._stream = stream
        self._name = name

    def write(self, text: str) -> int:
        _found(f"output of handler {self._name}", text)
        return self._stream.write(text)

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _loggers_with_own_handlers() -> list[logging.Logger]:
    named = [logger for logger in logging.Logger.manager.loggerDict.values()
             if isinstance(logger, logging.Logger) and logger.handlers and not logger.propagate]
    return [logging.getLogger(), *named]


_scanner = _RecordScanner(level=logging.NOTSET)


def _install() -> None:
    """Attach the scanner (again, if logging was configured since: dictConfig replaces handlers)."""
    for logger in _loggers_with_own_handlers():
        if _scanner not in logger.handlers:
            logger.addHandler(_scanner)
        for handler in logger.handlers:
            if type(handler) is logging.StreamHandler and not isinstance(handler.stream, _StreamScanner):
                handler.setStream(_StreamScanner(handler.stream, handler.name or repr(handler)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _current_test
    _install()
    _current_test = item.nodeid
    yield
    _current_test = "(between tests)"


def pytest_terminal_summary(terminalreporter) -> None:
    if not _findings:
        return
    terminalreporter.section("credentials in log output", sep="=", red=True, bold=True)
    for line in _findings[:FINDINGS_SHOWN]:
        terminalreporter.line(line)
    if len(_findings) > FINDINGS_SHOWN:
        terminalreporter.line(f"… and {len(_findings) - FINDINGS_SHOWN} more")


WORKER_OUTPUT_KEY = "credentials_in_log_output"


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """xdist's controller: a worker finished; take over what it found."""
    _findings.extend(getattr(node, "workeroutput", {}).get(WORKER_OUTPUT_KEY, []))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus) -> None:
    worker_output = getattr(session.config, "workeroutput", None)
    if worker_output is not None:  # an xdist worker: the controller reports and fails the run
        worker_output[WORKER_OUTPUT_KEY] = list(_findings)
        return
    if _findings and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
