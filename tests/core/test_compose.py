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


def test_the_workers_run_without_gossip_and_mingle():
    """As make run's (tests/core/test_devserver.py): gossip logged a traceback on each broker outage."""
    workers = {name: service["command"].split() for name, service in COMPOSE["services"].items()
               if "worker" in str(service.get("command", "")).split()}
    assert sorted(workers) == ["worker", "worker-large"]
    assert all({"--without-gossip", "--without-mingle"} <= set(command) for command in workers.values())


@pytest.mark.parametrize("name", ["SECRET_KEY", "TOOL_SECRET_KEYS"])
def test_every_setting_required_with_debug_off_reaches_the_containers(name):
    """The containers get only the variables compose lists (.env is not in the image): without
    TOOL_SECRET_KEYS there, a tool provider could not be saved (its secret cannot be encrypted)."""
    environment = COMPOSE["x-app"]["environment"]
    assert environment["DEBUG"] == "false"
    assert environment.get(name, "").startswith(f"${{{name}:?")
