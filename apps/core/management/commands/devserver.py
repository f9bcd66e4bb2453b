"""`make run`: migrate, load demo data, then the web server and one Celery worker side by side.

Both children's output is prefixed ([web], [worker]); Ctrl-C (SIGINT) or SIGTERM stops both and
waits for them, so the caller can then stop the embedded PostgreSQL and Redis cleanly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from django.core.management import call_command
from django.core.management.base import BaseCommand


def _pump(name: str, stream, out) -> None:
    for line in iter(stream.readline, b""):
        out.write(f"[{name}] {line.decode('utf-8', 'replace')}")
        out.flush()


class Command(BaseCommand):
    help = "Run the web server and a Celery worker for development (used by `make run`)."

    def add_arguments(self, parser):
        parser.add_argument("--addr", default="127.0.0.1:8000")
        parser.add_argument("--no-seed", action="store_true")

    def handle(self, *args, addr: str, no_seed: bool, **options):
        call_command("migrate", interactive=False, verbosity=1)
        if not no_seed:
            call_command("seed_demo")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        commands = {
            "web": [sys.executable, "manage.py", "runserver", addr, "--noreload"],
            "worker": [sys.executable, "-m", "celery", "-A", "bailinghub", "worker", "--loglevel", "INFO",
                       "--concurrency", os.environ.get("CELERY_CONCURRENCY", "1"), "--beat",
                       "--schedule", os.path.join("var", "celerybeat-schedule")],
        }
        children: dict[str, subprocess.Popen] = {}
        pumps = []
        for name, command in commands.items():
            child = subprocess.Popen(  # noqa: S603
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            children[name] = child
            pump = threading.Thread(target=_pump, args=(name, child.stdout, sys.stdout), daemon=True)
            pump.start()
            pumps.append(pump)
        self.stdout.write(self.style.SUCCESS(f"BailingHub at http://{addr}/admin/  (Ctrl-C stops everything)"))

        stopping = threading.Event()

        def stop(signum, _frame):
            stopping.set()

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        while not stopping.is_set() and all(child.poll() is None for child in children.values()):
            time.sleep(0.2)
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
        self.stdout.write("stopped web and worker")
