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
    f"host={embedded.PG_DIR}" not in os.environ.get("DATABASE_URL", f"host={embedded.PG_DIR}"),
    reason="the suite runs on external servers (DATABASE_URL set)",
)
def test_embedded_servers_are_reused_not_started_twice(settings):
    url, started_here = embedded.postgres_start()
    redis_url, redis_started_here = embedded.redis_start()
    assert (started_here, redis_started_here) == (False, False)
    assert settings.DATABASES["default"]["HOST"] == str(embedded.PG_DIR)
    assert url == f"postgres://postgres@/postgres?host={embedded.PG_DIR}"
    assert redis_url == settings.REDIS_URL
