import pytest


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
