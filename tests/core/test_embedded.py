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
    """The environment of a command on embedded servers of its own. DATABASE_URL and REDIS_URL set
    empty, not removed: an unset one is read from ./.env (bailinghub.embedded reads it), and a
    developer's .env naming a server would take the command there."""
    return {**os.environ, "DATABASE_URL": "", "REDIS_URL": "", "BAILING_VAR_DIR": str(var_dir)}


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


def test_after_pgservers_wait_a_pid_file_still_being_written_is_waited_for(tmp_path, monkeypatch):
    """pgserver gave up on `pg_ctl start` before the postmaster had written postmaster.pid (a fresh
    clone's run beside another): the start took no pid file for a dead postmaster and asked pgserver
    again, which read the file half-written (7 of its 8 lines) and failed. Here a postmaster writes
    its pid file in two steps after pgserver gave up: pgserver is asked again only once it is ready."""
    import threading
    import types

    from bailinghub import embedded

    monkeypatch.setattr(embedded, "PG_DIR", tmp_path)
    postmaster = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "postgres"])
    lines = [str(postmaster.pid), str(tmp_path), "1796492968", "5432", "", "", "  2703900    786434"]

    def write_slowly() -> None:
        time.sleep(0.3)
        (tmp_path / "postmaster.pid").write_text("\n".join(lines) + "\n")
        time.sleep(0.3)
        (tmp_path / "postmaster.pid").write_text("\n".join([*lines, "ready   "]) + "\n")

    asked: list[list[str]] = []

    def get_server(pgdata, cleanup_mode=None):
        try:
            asked.append((tmp_path / "postmaster.pid").read_text().splitlines())
        except FileNotFoundError:
            asked.append([])
        if len(asked) == 1:
            threading.Thread(target=write_slowly, daemon=True).start()
            raise subprocess.TimeoutExpired("pg_ctl start", 10)
        return "server"

    fake = types.SimpleNamespace(get_server=get_server, postgres_server=types.SimpleNamespace(
        PostgresServer=types.SimpleNamespace(_instances={})))
    try:
        assert embedded._pgserver_get(fake) == "server"
    finally:
        postmaster.kill()
        postmaster.wait()
    # Asked twice: before the start, and once the postmaster said ready (never with the file half-written).
    assert [len(seen) for seen in asked] == [0, 8]
    assert asked[1][7].strip() == "ready"


@pytest.mark.parametrize("left", ["nothing", "a dead postmaster's pid file"])
def test_after_pgservers_wait_a_postmaster_that_never_started_or_died_is_started_again(tmp_path, monkeypatch, left):
    import types

    from bailinghub import embedded

    monkeypatch.setattr(embedded, "PG_DIR", tmp_path)
    monkeypatch.setattr(embedded, "POSTGRES_PID_FILE_SECONDS", 0.3)
    if left != "nothing":
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        (tmp_path / "postmaster.pid").write_text(f"{gone.pid}\n{tmp_path}\n")
    asked: list[bool] = []

    def get_server(pgdata, cleanup_mode=None):
        asked.append((tmp_path / "postmaster.pid").exists())
        if len(asked) == 1:
            raise subprocess.TimeoutExpired("pg_ctl start", 10)
        return "server"

    fake = types.SimpleNamespace(get_server=get_server, postgres_server=types.SimpleNamespace(
        PostgresServer=types.SimpleNamespace(_instances={})))
    assert embedded._pgserver_get(fake) == "server"
    # Asked again to start it, the dead postmaster's pid file cleared first.
    assert asked == [left != "nothing", False]


def test_dot_env_is_read_before_the_embedded_servers_are_chosen(tmp_path):
    """.env.example says to copy it to .env: a DATABASE_URL, REDIS_URL or BAILING_VAR_DIR kept there
    must count for `make run` (`embedded exec`) as for the settings. A copy of the module beside a
    .env of its own, so the repository's .env (if any) and the suite's servers are untouched. The
    rest of .env stays .env's: not put in os.environ, nor handed to the command as its environment
    (there it won over what the command sets by default: bench/common.py's DEBUG=true)."""
    package = tmp_path / "bailinghub"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "embedded.py").write_text((ROOT / "bailinghub" / "embedded.py").read_text())
    (tmp_path / ".env").write_text(f"BAILING_VAR_DIR={tmp_path / 'elsewhere'}\n"
                                   "DATABASE_URL=postgres://u@db.example/d\nREDIS_URL=redis://cache.example/0\n"
                                   "DEBUG=false\n")
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "BAILING_VAR_DIR", "DEBUG"}}
    env["PYTHONPATH"] = str(tmp_path)
    code = "import os, bailinghub.embedded as e; print(e.VAR_DIR); print(os.environ.get('DATABASE_URL', '-'))"
    shown = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert shown.stdout.split() == [str((tmp_path / "elsewhere").resolve()), "-"], shown.stderr
    # exec starts no embedded server when .env names both: the command gets .env's URLs, and only them.
    ran = subprocess.run(
        [sys.executable, "-m", "bailinghub.embedded", "exec", "--", sys.executable, "-c",
         "import os; print(os.environ['DATABASE_URL'], os.environ['REDIS_URL'], os.environ.get('DEBUG', '-'))"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert ran.stdout.split() == ["postgres://u@db.example/d", "redis://cache.example/0", "-"], ran.stderr
    assert not (tmp_path / "elsewhere" / "pg").exists()
