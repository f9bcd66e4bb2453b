"""manage.py import_tool_spec: creates a provider from a file, re-imports into an existing one."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from apps.tools.models import ToolProvider
from apps.tools.selectors import provider_secret
from tests.projects.factories import ProjectFactory

from .factories import FIXTURES

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("import_tool_spec", *args, stdout=out)
    return out.getvalue()


def test_import_creates_a_provider_with_a_secret_from_the_environment(monkeypatch):
    project = ProjectFactory(slug="shop")
    monkeypatch.setenv("STORE_SECRET", "from-env-of-16-chars")
    output = run(str(FIXTURES / "store.yaml"), "--project", "shop", "--name", "store",
                 "--base-url", "http://127.0.0.1:8000/demo", "--secret-env", "STORE_SECRET")
    provider = ToolProvider.objects.get(project=project, name="store")
    assert provider.tools.count() == 5 and provider_secret(provider=provider) == "from-env-of-16-chars"
    assert "created provider store in shop: OpenAPI 3.0.3, 5 tools (5 enabled)" in output
    assert "signing secret" not in output


def test_import_without_a_secret_generates_one_and_shows_it_once():
    ProjectFactory(slug="shop")
    output = run(str(FIXTURES / "store.yaml"), "--project", "shop", "--name", "store", "--base-url", "http://h.test")
    secret = provider_secret(provider=ToolProvider.objects.get(name="store"))
    assert f"signing secret (shown once; configure it on the business side): {secret}" in output


def test_import_of_a_spec_without_acc_says_tools_are_disabled():
    ProjectFactory(slug="shop")
    output = run(str(FIXTURES / "no_acc.json"), "--project", "shop", "--name", "plain", "--base-url", "http://h.test")
    assert "no operation declares x-agent-capability: every tool is disabled" in output
    assert "warning operation_id_missing [PUT /items]" in output


def test_second_import_reimports_and_prints_the_diff():
    ProjectFactory(slug="shop")
    run(str(FIXTURES / "store.yaml"), "--project", "shop", "--name", "store", "--base-url", "http://h.test")
    output = run(str(FIXTURES / "refs.yaml"), "--project", "shop", "--name", "store")
    assert "re-imported provider store" in output
    assert "added: tree_create, search" in output
    assert "removed: product_lookup, order_status, stock_adjust, order_refund, customer_note" in output


def test_refused_spec_is_a_command_error_and_saves_nothing(tmp_path):
    ProjectFactory(slug="shop")
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"swagger: '2.0'\n")
    with pytest.raises(CommandError, match=r"spec_refused \(spec_not_openapi3\)"):
        run(str(bad), "--project", "shop", "--name", "store", "--base-url", "http://h.test")
    assert not ToolProvider.objects.exists()


def test_a_reimport_without_operations_is_a_command_error_and_changes_nothing(tmp_path):
    ProjectFactory(slug="shop")
    run(str(FIXTURES / "store.yaml"), "--project", "shop", "--name", "store", "--base-url", "http://h.test")
    empty = tmp_path / "empty.json"
    empty.write_bytes(b'{"openapi": "3.1.0", "info": {"title": "t", "version": "1"}, "paths": {}}')
    with pytest.raises(CommandError) as caught:
        run(str(empty), "--project", "shop", "--name", "store")
    assert str(caught.value) == "spec_refused (spec_no_operations): The spec has no operations: nothing to import."
    provider = ToolProvider.objects.get(name="store")
    assert (provider.spec_filename, provider.tools.count()) == ("store.yaml", 5)


def test_unknown_project_is_a_command_error():
    with pytest.raises(CommandError, match="no project with slug 'nope'"):
        run(str(FIXTURES / "store.yaml"), "--project", "nope", "--name", "store", "--base-url", "http://h.test")
