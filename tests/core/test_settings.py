import os
import subprocess
import sys
from pathlib import Path

import pytest

from bailinghub import embedded

ROOT = Path(__file__).resolve().parents[2]


def _boot(env_overrides: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG"}}
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); print('booted')"],
        cwd=ROOT, env={**env, "DJANGO_SETTINGS_MODULE": "bailinghub.settings"},
        capture_output=True, text=True, timeout=60,
    )


def test_boot_without_secret_key_fails_clearly_when_debug_is_off():
    result = _boot({"DEBUG": "false"})
    assert result.returncode != 0
    assert "SECRET_KEY is required when DEBUG is off" in result.stderr


def test_boot_with_secret_key_succeeds_when_debug_is_off():
    result = _boot({"DEBUG": "false", "SECRET_KEY": "x" * 50})
    assert result.returncode == 0, result.stderr
    assert "booted" in result.stdout


@pytest.mark.skipif(
    # An empty DATABASE_URL is unset (the embedded servers), as the settings read it.
    f"host={embedded.PG_DIR}" not in (os.environ.get("DATABASE_URL") or f"host={embedded.PG_DIR}"),
    reason="the suite runs on external servers (DATABASE_URL set)",
)
def test_embedded_servers_are_reused_not_started_twice(settings):
    url, started_here = embedded.postgres_start()
    redis_url, redis_started_here = embedded.redis_start()
    assert (started_here, redis_started_here) == (False, False)
    assert settings.DATABASES["default"]["HOST"] == str(embedded.PG_DIR)
    assert url == f"postgres://postgres@/postgres?host={embedded.PG_DIR}"
    assert redis_url == settings.REDIS_URL


@pytest.mark.django_db
def test_every_connection_runs_without_parallel_plans_or_jit():
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('max_parallel_workers_per_gather'), current_setting('jit')")
        assert cursor.fetchone() == ("0", "off")


def test_session_options_can_be_replaced_from_the_environment():
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); from django.conf import settings; "
                               "print(settings.DATABASES['default']['OPTIONS']['options'])"],
        cwd=ROOT, env={**os.environ, "DJANGO_SETTINGS_MODULE": "bailinghub.settings", "DEBUG": "true",
                       "DATABASE_SESSION_OPTIONS": "-c work_mem=64MB"},
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "-c work_mem=64MB"


def test_a_fresh_embedded_postgres_is_tuned_and_keeps_its_settings_across_restarts(embedded_var_dir):
    """First start writes PG_SETTINGS (ALTER SYSTEM); shared_buffers needs a restart, so the second
    start runs with all of them. A separate server of its own: the suite's own is untouched."""
    # Empty, not removed: an unset DATABASE_URL or REDIS_URL is read from ./.env.
    env = {**os.environ, "DATABASE_URL": "", "REDIS_URL": "", "BAILING_VAR_DIR": str(embedded_var_dir("tuned"))}
    show = ("import os, psycopg; c = psycopg.connect(os.environ['DATABASE_URL']); "
            "print(','.join(c.execute(f'SHOW {n}').fetchone()[0] for n in "
            "('shared_buffers', 'random_page_cost', 'maintenance_work_mem', 'effective_cache_size')))")
    runs = []
    for _ in range(2):
        result = subprocess.run(
            [sys.executable, "-m", "bailinghub.embedded", "exec", "--", sys.executable, "-c", show],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )
        assert result.returncode == 0, result.stderr
        runs.append(result.stdout.strip())
    assert runs == ["128MB,1.1,512MB,8GB", f"{embedded.PG_SETTINGS['shared_buffers']},1.1,512MB,8GB"]


@pytest.mark.parametrize(("memory_gib", "shown"), [
    (0.25, "128MB"), (1, "256MB"), (3, "768MB"), (4, "1GB"), (24, "6GB"), (25, "6400MB"), (64, "8GB"),
])
def test_the_embedded_postgres_gets_a_quarter_of_the_memory_for_its_buffers(memory_gib, shown):
    assert embedded.shared_buffers_for(int(memory_gib * (1 << 30))) == shown


def test_the_memory_is_the_machines_unless_a_container_limits_it_lower(tmp_path, monkeypatch):
    machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    monkeypatch.setattr(embedded, "CGROUP_MEMORY_LIMITS", (v2, v1))
    assert embedded.memory_bytes() == machine  # no files
    v2.write_text("max\n")
    v1.write_text(f"{machine * 2}\n")  # v1 says "no limit" with a huge number
    assert embedded.memory_bytes() == machine
    v1.write_text(f"{2 << 30}\n")
    assert embedded.memory_bytes() == 2 << 30
    v2.write_text(f"{1 << 30}\n")
    assert embedded.memory_bytes() == 1 << 30


def _setting(name: str, env_overrides: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if k not in {"WEB_BIND", "DEMO_BUSINESS_BASE_URL"}}
    result = subprocess.run(
        [sys.executable, "-c", f"from django.conf import settings; print(settings.{name})"],
        cwd=ROOT, env={**env, **env_overrides, "DEBUG": "true", "DJANGO_SETTINGS_MODULE": "bailinghub.settings"},
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.parametrize(("bind", "url"), [
    (None, "http://127.0.0.1:8000/demo-business"),
    ("", "http://127.0.0.1:8000/demo-business"),
    ("127.0.0.1:8201", "http://127.0.0.1:8201/demo-business"),
    ("0.0.0.0:9000", "http://127.0.0.1:9000/demo-business"),
])
def test_the_demo_shop_is_registered_where_web_bind_puts_the_web_server(bind, url):
    assert _setting("DEMO_BUSINESS_BASE_URL", {} if bind is None else {"WEB_BIND": bind}) == url


def test_an_explicit_demo_shop_address_wins_over_web_bind():
    assert _setting("DEMO_BUSINESS_BASE_URL", {"WEB_BIND": "127.0.0.1:8201",
                                               "DEMO_BUSINESS_BASE_URL": "http://shop.internal/x"}) == "http://shop.internal/x"


_HTTPS_PROBE = """
import django; django.setup()
from django.test import Client
plain, secure = Client(), Client()
page = plain.get("/admin/login/")
health = plain.get("/healthz")
hsts = secure.get("/healthz", secure=True)
print(page.status_code, page.get("Location", "-"), health.status_code, hsts.get("Strict-Transport-Security", "-"))
"""


@pytest.mark.parametrize(("env_overrides", "printed"), [
    ({}, "200 - 200 -"),
    ({"SECURE_SSL_REDIRECT": "true", "SECURE_HSTS_SECONDS": "31536000"},
     "301 https://testserver/admin/login/ 200 max-age=31536000"),
    ({"SECURE_HSTS_SECONDS": "600", "SECURE_HSTS_INCLUDE_SUBDOMAINS": "true"},
     "200 - 200 max-age=600; includeSubDomains"),
])
def test_https_only_is_the_deployments_choice_and_spares_the_health_probe(env_overrides, printed):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SECURE_")}
    env.update({"DJANGO_SETTINGS_MODULE": "bailinghub.settings", "DEBUG": "false", "SECRET_KEY": "x" * 50,
                "ALLOWED_HOSTS": "testserver", **env_overrides})
    result = subprocess.run([sys.executable, "-c", _HTTPS_PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == printed


@pytest.mark.parametrize(("value", "booted"), [("12", True), ("0", True), ("20", False), ("-1", False)])
def test_the_invocation_wait_stays_inside_the_hosts_15_second_timeout(value, booted):
    """Set above 15 s, a call's answer came after the host had given up on it."""
    result = _boot({"DEBUG": "true", "TOOL_INVOCATION_WAIT_SECONDS": value})
    assert (result.returncode == 0) is booted, result.stderr
    if not booted:
        assert f"TOOL_INVOCATION_WAIT_SECONDS must be between 0 and 12, not {value}" in result.stderr


@pytest.mark.parametrize(("value", "booted"),
                         [("0", True), ("1", True), ("0.5", True), ("1.5", False), ("-0.1", False)])
def test_the_rag_evidence_floor_is_a_probability(value, booted):
    """Above 1 no answer could ever be given; below 0 the floor would read as on while cutting nothing."""
    result = _boot({"DEBUG": "true", "RAG_EVIDENCE_SCORE_MIN": value})
    assert (result.returncode == 0) is booted, result.stderr
    if not booted:
        assert f"RAG_EVIDENCE_SCORE_MIN must be between 0 and 1, not {value}" in result.stderr
