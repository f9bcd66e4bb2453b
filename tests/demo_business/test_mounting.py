"""The demo shop is mounted only when DEMO_BUSINESS_ENABLED, which is on by default only in
development; outside development it needs its own signing secret."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import bailinghub.urls
from apps.demo_business.spec import demo_spec_bytes

from .conftest import mount

ROOT = Path(__file__).resolve().parents[2]
PROBE = "from django.conf import settings; print(settings.DEMO_BUSINESS_ENABLED)"


@pytest.fixture
def remount(settings):
    original = settings.DEMO_BUSINESS_ENABLED
    yield
    mount(settings, enabled=original)


def test_the_shop_is_served_when_enabled(settings, client, remount):
    mount(settings, enabled=True)
    response = client.get("/demo-business/openapi.json")
    assert response.status_code == 200
    assert response.content == demo_spec_bytes()


def test_the_shop_is_not_mounted_when_disabled(settings, client, remount):
    mount(settings, enabled=False)
    response = client.get("/demo-business/openapi.json")
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"
    assert "demo-business/" not in [str(pattern.pattern) for pattern in bailinghub.urls.urlpatterns]


def settings_in_a_fresh_process(**environment: str) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "SECRET_KEY": "probe",
           "DJANGO_SETTINGS_MODULE": "bailinghub.settings",
           # Addresses are only parsed at import; nothing connects, so no embedded server starts.
           "DATABASE_URL": "postgres://probe:probe@127.0.0.1:1/probe", "REDIS_URL": "redis://127.0.0.1:1/0",
           **environment}
    return subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60, check=False)


def test_enabled_by_default_in_development():
    result = settings_in_a_fresh_process(DEBUG="true")
    assert (result.returncode, result.stdout.strip()) == (0, "True")


def test_disabled_by_default_outside_development():
    result = settings_in_a_fresh_process(DEBUG="false")
    assert (result.returncode, result.stdout.strip()) == (0, "False")


def test_enabled_outside_development_without_a_secret_stops_the_boot():
    result = settings_in_a_fresh_process(DEBUG="false", DEMO_BUSINESS_ENABLED="true")
    assert result.returncode == 1
    assert "DEMO_BUSINESS_SIGNING_SECRET is required" in result.stderr


def test_enabled_outside_development_with_a_secret_boots():
    result = settings_in_a_fresh_process(DEBUG="false", DEMO_BUSINESS_ENABLED="true",
                                         DEMO_BUSINESS_SIGNING_SECRET="a-production-secret")
    assert (result.returncode, result.stdout.strip()) == (0, "True")



def test_a_short_demo_signing_secret_stops_the_boot():
    """The demo tool provider is registered with this secret, and a provider's secret has at least
    16 characters: a shorter one failed later, inside seed_demo."""
    result = settings_in_a_fresh_process(DEBUG="false", DEMO_BUSINESS_ENABLED="true",
                                         DEMO_BUSINESS_SIGNING_SECRET="short-secret")
    assert result.returncode == 1
    assert "DEMO_BUSINESS_SIGNING_SECRET needs at least 16 characters" in result.stderr
