import subprocess
import time
from pathlib import Path

import pytest

from bailinghub.embedded import redis_server_binary


@pytest.mark.django_db
def test_healthz_answers_ok(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_is_200_when_database_redis_and_migrations_are_ready(client):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ready", "checks": {"database": "ok", "redis": "ok", "migrations": "ok"}
    }


@pytest.fixture
def private_redis(tmp_path: Path):
    """A real redis-server of our own on a Unix socket, so the test may stop it."""
    sock = tmp_path / "r.sock"
    process = subprocess.Popen(
        [redis_server_binary(), "--port", "0", "--unixsocket", str(sock), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while not sock.exists():
        assert time.monotonic() < deadline, "redis-server did not start"
        time.sleep(0.02)
    yield process, f"unix://{sock}?db=0"
    if process.poll() is None:
        process.terminate()
        process.wait(10)


@pytest.mark.django_db
def test_readyz_reports_a_stopped_redis_as_503(client, settings, private_redis):
    process, url = private_redis
    settings.REDIS_URL = url
    assert client.get("/readyz").status_code == 200

    process.terminate()
    process.wait(10)
    response = client.get("/readyz")

    assert response.status_code == 503
    body = response.json()
    assert body["error"] == "not_ready"
    assert body["checks"] == {"database": "ok", "redis": "unavailable", "migrations": "ok"}
    assert "redis" in body["message"]
