"""The embedded servers are shared by reference and survive a killed predecessor's pid files.
Each test runs `python -m bailinghub.embedded exec` in its own var dir: the suite's servers are untouched."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONNECT = ("import os, psycopg, redis; psycopg.connect(os.environ['DATABASE_URL']).execute('SELECT 1'); "
           "redis.Redis.from_url(os.environ['REDIS_URL']).ping(); print('connected')")


@pytest.fixture(scope="module")
def var_dir(embedded_var_dir):
    return embedded_var_dir("embedded-var")


def _env(var_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env["BAILING_VAR_DIR"] = str(var_dir)
    return env


def _exec(var_dir: Path, code: str, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "bailinghub.embedded", "exec", "--", sys.executable, "-c", code],
                            cwd=ROOT, env=_env(var_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kwargs)


def _postmaster_pid(var_dir: Path) -> int | None:
    try:
        return int((var_dir / "pg" / "postmaster.pid").read_text().split()[0])
    except FileNotFoundError:
        return None


def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_first_user_leaving_does_not_stop_servers_a_later_user_still_uses(var_dir):
    ready = var_dir / "first-is-running"
    first = _exec(var_dir, f"import pathlib, time; pathlib.Path({str(ready)!r}).touch(); time.sleep(2)")
    deadline = time.monotonic() + 120
    while not ready.exists():
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # The second user starts while the first runs, and connects again after the first has left.
    second = _exec(var_dir, f"import os, time\nwhile os.path.exists('/proc/{first.pid}'): time.sleep(0.05)\n"
                            f"time.sleep(0.5)\n{CONNECT}")
    _, first_err = first.communicate(timeout=120)
    assert first.returncode == 0, first_err
    # Each says what it left behind (after Ctrl-C, make run's last line said only "stopped web, ...").
    assert "embedded servers keep running: another command still uses them" in first_err
    postmaster = _postmaster_pid(var_dir)
    assert _alive(postmaster)

    out, err = second.communicate(timeout=120)

    assert second.returncode == 0, err
    assert out.strip() == "connected"
    assert "embedded servers stopped: redis, postgres" in err
    # The last user stopped both servers.
    assert not _alive(postmaster)
    assert not (var_dir / "redis" / "redis.sock").exists() or not _alive(
        int((var_dir / "redis" / "redis.pid").read_text().split()[0]))
    assert list((var_dir / "users").iterdir()) == []


def test_pid_files_left_by_killed_servers_are_recognised_and_cleared(var_dir):
    dead = subprocess.Popen(["true"])
    dead.wait()
    (var_dir / "pg").mkdir(exist_ok=True)
    # A dead pid for PostgreSQL, and a live pid of another program (this test) for Redis.
    (var_dir / "pg" / "postmaster.pid").write_text(f"{dead.pid}\n{var_dir / 'pg'}\n")
    (var_dir / "redis").mkdir(exist_ok=True)
    (var_dir / "redis" / "redis.pid").write_text(f"{os.getpid()}\n")

    run = _exec(var_dir, CONNECT)
    out, err = run.communicate(timeout=120)

    assert run.returncode == 0, err
    assert out.strip() == "connected"
    assert _alive(os.getpid())  # the stale Redis pid was not signalled


def test_a_start_slower_than_pgservers_wait_is_waited_for(embedded_var_dir):
    """pgserver stops waiting for `pg_ctl start` after 10 s while the postmaster goes on starting; on
    a loaded machine a new cluster's first start took longer and `embedded up` failed (a CI run's
    fixture did). Here pg_ctl launches the server without waiting (-W) and pgserver is told it timed
    out, as it is then: the start is waited for all the same."""
    # After pgserver's 10 s the server's log exists (pgserver prints it): -W returns before the
    # shell that starts the postmaster has created it, so the stand-in waits for it too.
    code = ("import pathlib, subprocess, time, pgserver.postgres_server as ps; original = ps.pg_ctl\n"
            "def hasty(args, **kw):\n"
            "    if 'start' not in args: return original(args, **kw)\n"
            "    original(['-W' if a == '-w' else a for a in args], **kw)\n"
            "    log = pathlib.Path(args[args.index('-l') + 1])\n"
            "    while not log.exists(): time.sleep(0.01)\n"
            "    raise subprocess.TimeoutExpired('pg_ctl start', kw.get('timeout'))\n"
            "ps.pg_ctl = hasty\n"
            "from bailinghub import embedded; import psycopg\n"
            "url, started = embedded.postgres_start()\n"
            "print(started, psycopg.connect(url).execute('SELECT 1').fetchone()[0])\n")
    env = _env(embedded_var_dir("slow-start"))
    try:
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=180)
        assert (done.returncode, done.stdout.strip()) == (0, "True 1"), done.stderr[-3000:]
    finally:
        subprocess.run([sys.executable, "-m", "bailinghub.embedded", "down"], cwd=ROOT, env=env, timeout=120)
