"""`make run`'s child processes, as the devserver command builds them."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command
from gunicorn.workers.gthread import ThreadWorker

from apps.core.management.commands import devserver
from apps.core.management.commands.devserver import CrashLoop, child_commands, child_environment, supervise
from bailinghub.celery import app as celery_app

ROOT = Path(__file__).resolve().parents[2]


def _option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def _queues(command: list[str]) -> set[str]:
    return set(_option(command, "--queues").split(","))


def test_the_beat_schedule_lives_under_the_configured_var_dir(tmp_path):
    var_dir = tmp_path / "state"
    script = ("import django, json; django.setup(); "
              "from apps.core.management.commands.devserver import child_commands; "
              "print(json.dumps(child_commands(addr='127.0.0.1:8000')))")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "BAILING_VAR_DIR": str(var_dir),
                                 "DJANGO_SETTINGS_MODULE": "bailinghub.settings"})
    assert result.returncode == 0, result.stderr
    worker = json.loads(result.stdout.strip().splitlines()[-1])["worker"]
    assert ("--beat" in worker, _option(worker, "--schedule")) == (True, str(var_dir / "celerybeat-schedule"))


def test_the_default_worker_runs_several_prefork_processes_on_the_default_queue_only(settings):
    settings.DEVSERVER_WORKER_CONCURRENCY = 0
    worker = child_commands(addr="127.0.0.1:8000")["worker"]
    assert _queues(worker) == {celery_app.conf.task_default_queue}
    assert int(_option(worker, "--concurrency")) == max(2, os.cpu_count() or 1)
    assert _option(worker, "--pool") == "prefork"


def test_the_workers_consume_the_default_and_the_large_document_queues(settings):
    settings.DEVSERVER_LARGE_WORKER_CONCURRENCY = 0
    commands = child_commands(addr="127.0.0.1:8000")
    large = commands["worker-large"]
    assert _queues(large) == {django_settings.KNOWLEDGE_LARGE_TASK_QUEUE, celery_app.conf.task_default_queue}
    assert int(_option(large, "--concurrency")) == max(1, (os.cpu_count() or 1) // 2)
    assert _option(commands["worker"], "--hostname") != _option(large, "--hostname")
    assert "--beat" not in large


def test_the_workers_run_without_gossip_and_mingle():
    """Nothing reads other workers' events; gossip logged a traceback on each broker outage (as
    compose.yaml's workers: tests/core/test_compose.py)."""
    commands = child_commands(addr="127.0.0.1:8000")
    assert [{"--without-gossip", "--without-mingle"} <= set(commands[name]) for name in ("worker", "worker-large")
            ] == [True, True]


def test_worker_concurrency_comes_from_the_settings(settings):
    settings.DEVSERVER_WORKER_CONCURRENCY = 5
    settings.DEVSERVER_LARGE_WORKER_CONCURRENCY = 3
    commands = child_commands(addr="127.0.0.1:8000")
    assert [_option(commands[name], "--concurrency") for name in ("worker", "worker-large")] == ["5", "3"]


def test_children_embed_with_one_openmp_thread_unless_the_caller_chose(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert child_environment()["OMP_NUM_THREADS"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert child_environment()["OMP_NUM_THREADS"] == "4"


def test_the_web_server_is_gunicorn_with_threads_sized_from_the_cores():
    web = child_commands(addr="127.0.0.1:8123")["web"]
    assert web[1:3] == ["-m", "gunicorn"]
    assert (_option(web, "-c"), _option(web, "--bind")) == ("python:bailinghub.gunicorn", "127.0.0.1:8123")
    from bailinghub import gunicorn as config

    assert (config.worker_class, config.workers, config.preload_app) == (
        "bailinghub.gunicorn.ThreadWorker", max(2, os.cpu_count() or 1), False)
    assert issubclass(config.ThreadWorker, ThreadWorker)  # gthread, with a deadline on a request's head
    assert config.threads >= 4


def test_make_run_serves_on_web_bind_when_it_is_set(monkeypatch):
    """.env.example offers WEB_BIND; the devserver's --addr (gunicorn's --bind) follows it."""
    from apps.core.management.commands.devserver import Command

    monkeypatch.setenv("WEB_BIND", "127.0.0.1:8123")
    chosen = Command().create_parser("manage.py", "devserver").parse_args([]).addr
    monkeypatch.delenv("WEB_BIND")
    default = Command().create_parser("manage.py", "devserver").parse_args([]).addr
    assert (chosen, default) == ("127.0.0.1:8123", "127.0.0.1:8000")
    assert _option(child_commands(addr=chosen)["web"], "--bind") == "127.0.0.1:8123"


class _Output:
    """What the supervised children and the supervisor wrote, line by line (from several threads)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.lock = threading.Lock()

    def write(self, text: str) -> None:
        with self.lock:
            self.lines.extend(text.splitlines())

    def flush(self) -> None:
        pass

    def pids(self, name: str) -> list[int]:
        with self.lock:
            return [int(line.split()[2]) for line in self.lines if line.startswith(f"[{name}] pid ")]


_SLEEPER = [sys.executable, "-c", "import os, time; print('pid', os.getpid(), flush=True); time.sleep(600)"]


def _crashing_once(go: Path) -> list[str]:
    """A child that exits (3) as soon as `go` exists: the test creates it once the web server has
    printed its pid. (Crashing at once, it could stop everything before a web server slow to start
    had printed it: the test then waited 60 s for a pid that never came.)"""
    return [sys.executable, "-c", "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.02)\n"
            "raise SystemExit(3)", str(go)]


def _wait(predicate, message: str):
    deadline = time.monotonic() + 60
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {message}"
        time.sleep(0.05)
    return value


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def _supervised(commands, **options):
    """Run supervise in a thread; `result` gets its return value, or the exception it raised."""
    out, stopping = _Output(), threading.Event()
    result: list[object] = []

    def run() -> None:
        try:
            result.append(supervise(commands, env=dict(os.environ), out=out, stopping=stopping, **options))
        except Exception as exc:
            result.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return out, stopping, thread, result


def test_a_child_killed_is_started_again_and_the_others_keep_running():
    out, stopping, thread, result = _supervised({"worker": _SLEEPER, "web": _SLEEPER})
    try:
        [worker] = _wait(lambda: out.pids("worker"), "the worker to start")
        [web] = _wait(lambda: out.pids("web"), "the web server to start")
        os.kill(worker, signal.SIGKILL)  # as the OOM killer does
        [_, again] = _wait(lambda: out.pids("worker")[1:] and out.pids("worker"), "the worker to start again")
        assert (again != worker, _alive(again), _alive(web)) == (True, True, True)
    finally:
        stopping.set()
        thread.join(60)
    assert (result, _alive(again), _alive(web)) == ([["worker", "web"]], False, False)


def test_a_child_that_keeps_dying_stops_everything(tmp_path):
    go = tmp_path / "go"
    out, _stopping, thread, result = _supervised({"worker": _crashing_once(go), "web": _SLEEPER}, restart_limit=3)
    try:
        [web] = _wait(lambda: out.pids("web"), "the web server to start")
    finally:
        go.touch()  # also when the web server never started: the worker must not wait for ever
    thread.join(60)
    [error] = result
    assert (type(error), str(error), _alive(web)) == (CrashLoop, "[worker] exited (3) 3 times in 60 s: stopping",
                                                       False)
    assert "[worker] exited (3) 3 times in 60 s: stopping" in out.lines


def test_a_child_that_cannot_be_started_again_stops_the_others(monkeypatch, tmp_path):
    """Popen fails under the memory pressure a restart is for: the others must not be left running
    (holding the port) while embedded exec stops PostgreSQL and Redis."""
    from apps.core.management.commands import devserver

    started = []
    real_start = devserver._start

    def start(name, command, env, out):
        if started.count(name):
            raise OSError(12, "Cannot allocate memory")
        started.append(name)
        return real_start(name, command, env, out)

    monkeypatch.setattr(devserver, "_start", start)
    go = tmp_path / "go"
    out, _stopping, thread, result = _supervised({"worker": _crashing_once(go), "web": _SLEEPER})
    try:
        [web] = _wait(lambda: out.pids("web"), "the web server to start")
    finally:
        go.touch()  # also when the web server never started: the worker must not wait for ever
    thread.join(60)
    [error] = result
    assert (type(error), _alive(web)) == (OSError, False)


def test_a_port_in_use_stops_make_run_at_once_naming_web_bind(monkeypatch):
    """With the port taken, make run migrated, seeded, printed "BailingHub at <addr>" and then let
    gunicorn retry the port for about 30 s (five starts, ~50 "Connection in use" lines) before it
    stopped, never saying how to choose another port."""
    def no_set_up(*args, **kwargs):
        raise AssertionError(f"set-up ran: {args}")

    monkeypatch.setattr(devserver, "call_command", no_set_up)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        addr = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(CommandError, match=r"already in use.*WEB_BIND="):
            call_command("devserver", addr=addr)
    # The port is free again: the command goes on to its set-up.
    with pytest.raises(AssertionError, match="set-up ran"):
        call_command("devserver", addr=addr)


def test_what_the_children_depend_on_is_kept_up_and_said_when_started_again(monkeypatch):
    """The embedded Redis is a daemon of its own: killed, nothing brought it back (make run's
    supervisor restarts only its children)."""
    monkeypatch.setattr(devserver, "KEEP_UP_SECONDS", 0.2)
    looks: list[int] = []

    def keep_up() -> str:
        looks.append(1)
        return "[redis] started again" if len(looks) == 2 else ""

    out, stopping, thread, result = _supervised({"web": _SLEEPER}, keep_up=keep_up)
    try:
        _wait(lambda: len(looks) >= 3, "a third look")
    finally:
        stopping.set()
        thread.join(60)
    assert (result, out.lines.count("[redis] started again")) == ([["web"]], 1)


def test_the_embedded_redis_is_started_again_after_it_died_and_not_after_it_was_stopped(monkeypatch, tmp_path):
    """Killed, nothing brought it back; stopped on purpose (`embedded down`, `make clean`: its pid
    file goes with it), it must stay stopped — a keep_up that restarted it fought them."""
    from bailinghub import embedded

    monkeypatch.setattr(embedded, "REDIS_DIR", tmp_path / "redis")
    assert embedded.redis_keep_up() == ""  # never started here: no pid file
    embedded.redis_start()
    first = embedded._redis_pid()
    try:
        assert embedded.redis_keep_up() == ""  # it runs
        os.kill(first, signal.SIGKILL)
        _wait(lambda: not _alive(first), "the killed Redis to be gone")
        assert embedded.redis_keep_up().startswith("[redis] the embedded Redis died: started again")
        again = embedded._redis_pid()
        assert again is not None and again != first
        embedded.redis_stop()
        assert embedded.redis_keep_up() == ""  # stopped on purpose: left stopped
        assert embedded._redis_pid() is None
    finally:
        embedded.redis_stop()
