"""compose.yaml, the deployment on real servers: every long-running service comes back after it
dies (a crash, the kernel's OOM killer), as at 3 a.m. nobody is there to start it; the one-off
migration does not."""

from pathlib import Path

import pytest
import yaml

COMPOSE = yaml.safe_load((Path(__file__).resolve().parents[2] / "compose.yaml").read_text())


@pytest.mark.parametrize("service", ["db", "redis", "web", "worker", "worker-large", "beat"])
def test_a_long_running_service_is_restarted_when_it_dies(service):
    assert COMPOSE["services"][service].get("restart") in ("always", "unless-stopped", "on-failure")


def test_the_migration_runs_once():
    assert COMPOSE["services"]["migrate"]["restart"] == "no"
