"""`manage.py seed_demo`: the demo operator is a staff owner of Bailing Retail, never a superuser,
and can reach every console screen of the project."""

from __future__ import annotations

import io
import threading

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection

from apps.knowledge.models import KnowledgeBase
from apps.projects.models import Membership, Project
from apps.projects.services import project_name_free
from apps.routes.models import Route
from tests.projects.factories import ProjectFactory, UserFactory
from tests.projects.helpers import admin_client, row_counts

pytestmark = pytest.mark.django_db

PASSWORD = "demo-pass-123"


@pytest.fixture
def seeded(monkeypatch):
    monkeypatch.setenv("BAILING_DEMO_PASSWORD", PASSWORD)
    call_command("seed_demo")
    return get_user_model().objects.get(username="operator")


def test_the_demo_operator_is_a_staff_owner_and_not_a_superuser(seeded):
    membership = Membership.objects.get(user=seeded)
    assert (seeded.is_staff, seeded.is_superuser, seeded.is_active) == (True, False, True)
    assert (membership.project.slug, membership.project.name, membership.role) == (
        "bailing-retail", "Bailing Retail", "owner")
    assert seeded.check_password(PASSWORD)
    assert sorted(Route.objects.values_list("key", flat=True)) == ["hr-helpdesk", "store-assistant"]


def test_seeding_twice_changes_nothing(seeded):
    before = row_counts()
    stamps = (list(Route.objects.order_by("key").values_list("updated_at", flat=True)),
              Membership.objects.get(user=seeded).updated_at, seeded.password)
    call_command("seed_demo")
    seeded.refresh_from_db()
    assert row_counts() == before
    assert (list(Route.objects.order_by("key").values_list("updated_at", flat=True)),
            Membership.objects.get(user=seeded).updated_at, seeded.password) == stamps


def test_an_existing_operator_account_becomes_a_staff_owner_without_superuser_rights(monkeypatch):
    monkeypatch.setenv("BAILING_DEMO_PASSWORD", PASSWORD)
    existing = UserFactory(username="operator", is_staff=False, is_superuser=True, password="kept-password-1")
    call_command("seed_demo")
    existing.refresh_from_db()
    assert (existing.is_staff, existing.is_superuser) == (True, False)
    assert existing.check_password("kept-password-1")
    assert Membership.objects.get(user=existing).role == "owner"


@pytest.mark.parametrize("path", [
    "/admin/", "/admin/projects/project/", "/admin/projects/operatortoken/", "/admin/projects/operatortoken/add/",
    "/admin/routes/route/", "/admin/routes/route/add/", "/admin/knowledge/knowledgebase/",
    "/admin/knowledge/knowledgebase/add/", "/admin/knowledge/document/", "/admin/knowledge/embeddingmodel/",
    "/admin/agent_auth/agentclient/", "/admin/agent_auth/agentclient/add/", "/admin/agent_auth/agentsession/",
    "/admin/agent_auth/agentauthorization/", "/admin/ledger/conversation/", "/admin/ledger/run/",
    "/admin/ledger/memorynote/",
])
def test_the_demo_operator_reaches_every_console_screen(seeded, path):
    assert admin_client(seeded).get(path).status_code == 200


def test_the_demo_operator_may_change_the_project_and_its_routes(seeded):
    client = admin_client(seeded)
    project = Project.objects.get(slug="bailing-retail")
    route = Route.objects.get(key="store-assistant")
    assert client.get(f"/admin/projects/project/{project.pk}/change/").context["has_change_permission"] is True
    assert client.get(f"/admin/routes/route/{route.pk}/change/").context["has_change_permission"] is True


def test_the_demo_operators_dashboard_shows_bailing_retail(seeded):
    response = admin_client(seeded).get("/admin/")
    assert [(board.project.name, board.role) for board in response.context["dashboard"]] == [
        ("Bailing Retail", "owner")]
    assert [route.key for route in response.context["dashboard"][0].routes] == ["hr-helpdesk", "store-assistant"]


def test_the_store_assistant_reads_a_demo_knowledge_base_of_two_documents(seeded):
    from apps.knowledge.models import RouteKnowledgeBinding

    binding = RouteKnowledgeBinding.objects.select_related("knowledge_base__embedding_model").get(
        route__key="store-assistant")
    kb = binding.knowledge_base
    assert (kb.name, kb.embedding_model.name) == ("门店知识库", "multilingual-e5-small")
    assert sorted(kb.documents.values_list("filename", flat=True)) == ["after-sales-policy.md", "stock-handbook.md"]
    assert not RouteKnowledgeBinding.objects.filter(route__key="hr-helpdesk").exists()


def test_the_demo_shop_is_a_tool_provider_of_the_store_assistant_with_writes_allowed(seeded):
    from apps.tools.models import RouteToolSource, ToolProvider

    provider = ToolProvider.objects.get(name="demo-shop")
    source = RouteToolSource.objects.get(route__key="store-assistant")
    route = Route.objects.get(key="store-assistant")
    tools = dict(provider.tools.values_list("name", "readonly"))
    assert tools == {"lookup_product": True, "get_order_status": True, "adjust_stock": False,
                     "issue_refund": False, "add_customer_note": False}
    assert (source.provider_id, sorted(source.allowed_tools)) == (provider.pk, sorted(tools))
    assert (route.tools_direct_enabled, sorted(route.write_tools)) == (
        True, ["add_customer_note", "adjust_stock", "issue_refund"])
    assert not provider.tools.filter(enabled=False).exists()


def test_without_the_demo_business_system_no_provider_is_registered(monkeypatch, settings):
    from apps.tools.models import ToolProvider

    settings.DEMO_BUSINESS_ENABLED = False
    monkeypatch.setenv("BAILING_DEMO_PASSWORD", PASSWORD)
    call_command("seed_demo")
    assert not ToolProvider.objects.exists()
    assert Route.objects.filter(key="store-assistant").exists()


def test_the_demo_has_an_agent_client_that_signs_in_on_this_hubs_page(monkeypatch, settings, capsys):
    """README's MCP sign-in could not be followed on the demo: no agent client existed
    ("invalid_client Unknown or disabled client_app_id")."""
    from apps.agent_auth.models import CLIENT_TOKEN_PREFIX, AgentClient

    monkeypatch.setenv("BAILING_DEMO_PASSWORD", PASSWORD)
    call_command("seed_demo")
    client = AgentClient.objects.get(app_id="demo-agent")
    assert client.enabled and client.allowed_routes == ["store-assistant"]
    assert client.agent_authorize_url == f"{settings.WEB_ORIGIN}/agent-auth/authorize"
    output = capsys.readouterr().out
    assert (f"bailinghub-mcp login --hub {settings.WEB_ORIGIN} --client-app-id demo-agent "
            "--workspace store-assistant") in output
    assert CLIENT_TOKEN_PREFIX not in output  # no token shown: this hub's page needs none


def test_the_printed_mcp_sign_in_command_runs_where_make_run_was_started(monkeypatch, capsys):
    """make run printed `bailinghub-mcp login ...`, but make install puts the bridge in .venv/bin,
    which make run never adds to PATH: typed as printed, the command was not found."""
    import os
    import shutil
    import sys
    from pathlib import Path

    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # a fresh shell: the venv is not activated
    monkeypatch.chdir(Path(sys.executable).parents[2])  # the clone, whose .venv runs the tests
    monkeypatch.setenv("BAILING_DEMO_PASSWORD", PASSWORD)
    call_command("seed_demo")
    line = next(line for line in capsys.readouterr().out.splitlines() if " login --hub " in line)
    program = line.split(": ", 1)[1].split(" login ", 1)[0]
    assert shutil.which(program) or (os.path.isfile(program) and os.access(program, os.X_OK)), line


def test_seeding_again_says_how_to_set_the_operators_password(seeded, monkeypatch, capsys):
    """The password is shown once, on the first run: a later run only said the operator exists,
    and a BAILING_DEMO_PASSWORD set then was silently ignored (the login with it failed)."""
    capsys.readouterr()
    monkeypatch.delenv("BAILING_DEMO_PASSWORD")
    call_command("seed_demo")
    assert "manage.py changepassword operator" in capsys.readouterr().out

    monkeypatch.setenv("BAILING_DEMO_PASSWORD", "another-pass-456")
    call_command("seed_demo")
    output = capsys.readouterr().out
    assert "BAILING_DEMO_PASSWORD was not applied" in output
    assert "manage.py changepassword operator" in output
    seeded.refresh_from_db()
    assert seeded.check_password(PASSWORD)  # still the first run's password, as README says

    monkeypatch.setenv("BAILING_DEMO_PASSWORD", PASSWORD)
    call_command("seed_demo")
    assert "not applied" not in capsys.readouterr().out


def test_a_project_that_took_the_demo_name_is_left_alone_and_the_demo_one_is_numbered(monkeypatch):
    """Seeding stopped on the unique name (an IntegrityError out of `make run`) when another
    project already held "Bailing Retail" in any case."""
    monkeypatch.setenv("BAILING_DEMO_PASSWORD", PASSWORD)
    other = ProjectFactory(name="BAILING retail", slug="someone-elses")
    call_command("seed_demo")
    demo = Project.objects.get(slug="bailing-retail")
    assert demo.name == "Bailing Retail (2)"
    other.refresh_from_db()
    assert (other.name, other.members.count()) == ("BAILING retail", 0)
    assert Membership.objects.get(user__username="operator").project == demo
    before = row_counts()
    call_command("seed_demo")
    assert row_counts() == before
    assert Project.objects.get(slug="bailing-retail").name == "Bailing Retail (2)"


def test_a_free_name_is_numbered_past_every_taken_one_within_the_field():
    ProjectFactory(name="Shop")
    ProjectFactory(name="shop (2)")
    assert project_name_free("Shop") == "Shop (3)"
    assert project_name_free("Another") == "Another"
    long = "x" * 200
    ProjectFactory(name=long)
    assert project_name_free(long) == "x" * 196 + " (2)"


@pytest.mark.django_db(transaction=True)
def test_two_seeds_at_once_make_one_demo_and_neither_fails(monkeypatch, ingest_unconsumed):
    """Two `make run`s on one database: each seed looks for the demo's rows and creates the missing
    ones; without taking turns the second creates the project, routes and operator again and fails
    on their unique names."""
    monkeypatch.setenv("BAILING_DEMO_PASSWORD", PASSWORD)
    barrier = threading.Barrier(2)
    outcomes: list[object] = [None, None]

    def seed(index: int) -> None:
        try:
            barrier.wait(timeout=30)
            call_command("seed_demo", stdout=io.StringIO())
            outcomes[index] = "ok"
        except Exception as exc:  # the outcome is what the test asserts
            outcomes[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=seed, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert outcomes == ["ok", "ok"]
    assert list(Project.objects.values_list("slug", flat=True)) == ["bailing-retail"]
    assert sorted(Route.objects.values_list("key", flat=True)) == ["hr-helpdesk", "store-assistant"]
    assert get_user_model().objects.filter(username="operator").count() == 1
    assert KnowledgeBase.objects.count() == 1
    assert Membership.objects.count() == 1
