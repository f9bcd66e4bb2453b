"""A tool whose spec declares a rate limit the hub cannot read is held off until the spec is fixed:
the compile report said "disabled until the rate limit is fixed", yet an operator could switch it
on (it then ran with no limit at all), and fixing the spec did not switch it back on."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps as django_apps

from apps.tools import services
from apps.tools.errors import ToolHeldBySpec
from apps.tools.models import Tool

from .factories import STORE_SPEC, ToolProviderFactory
from .test_admin import tool_rows

pytestmark = pytest.mark.django_db

BAD_LIMIT = STORE_SPEC.replace(b"rate_limit: {count: 10, window: 1m}", b"rate_limit: {count: 10, window: 2m}")


@pytest.fixture
def provider(owner):
    assert BAD_LIMIT != STORE_SPEC
    return ToolProviderFactory(project=owner.project, spec=BAD_LIMIT)


def _stock_adjust(provider) -> Tool:
    return Tool.objects.get(provider=provider, name="stock_adjust")


def test_a_tool_whose_rate_limit_cannot_be_read_is_imported_held_off(provider):
    tool = _stock_adjust(provider)
    assert (tool.enabled, tool.held_reason.split(":")[0]) == (False, "acc_execution_rate_limit_invalid")
    assert list(Tool.objects.filter(provider=provider).exclude(held_reason="").values_list("name", flat=True)) == [
        "stock_adjust"]
    with pytest.raises(ToolHeldBySpec):
        services.tool_set_enabled(tool=tool, enabled=True)
    assert _stock_adjust(provider).enabled is False


def test_the_providers_page_refuses_to_switch_it_on_beside_the_tool(browser, provider):
    data = {"base_url": provider.base_url, "enabled": "on", **tool_rows(provider, {"stock_adjust": True})}
    response = browser.post(f"/admin/tools/toolprovider/{provider.pk}/change/", data)
    assert response.status_code == 200
    assert "stock_adjust cannot be switched on: acc_execution_rate_limit_invalid" in response.content.decode()
    assert _stock_adjust(provider).enabled is False


def test_the_tools_page_refuses_to_switch_it_on(browser, provider):
    tool = _stock_adjust(provider)
    response = browser.post(f"/admin/tools/tool/{tool.pk}/change/", {"enabled": "on"})
    assert response.status_code == 200
    assert "stock_adjust cannot be switched on" in response.content.decode()
    assert _stock_adjust(provider).enabled is False


def test_the_tools_page_says_its_rate_limit_holds_it(browser, provider):
    page = browser.get(f"/admin/tools/tool/{_stock_adjust(provider).pk}/change/").content.decode()
    assert ("None that the hub can read: the spec&#x27;s limit is invalid, so the tool is held off (see below)"
            in page)


def test_a_switch_refused_by_a_hold_since_the_page_was_read_says_only_that(browser, owner, monkeypatch):
    """A re-import held the tool between the form's check and the save: the page said "was changed
    successfully" beside "was not switched on", and the tool's history "Changed Enabled."."""
    from django.contrib.admin.models import LogEntry

    from apps.tools.admin import ToolAdmin

    provider = ToolProviderFactory(project=owner.project)
    read_before = _stock_adjust(provider)
    services.tool_set_enabled(tool=read_before, enabled=False)
    read_before.enabled = False
    services.provider_reimport(provider=provider, spec=BAD_LIMIT)
    # The page's view reads the tool as it was before the re-import: the race, without a second thread.
    monkeypatch.setattr(ToolAdmin, "get_object", lambda self, request, object_id, from_field=None: read_before)
    response = browser.post(f"/admin/tools/tool/{read_before.pk}/change/", {"enabled": "on"}, follow=True)
    assert response.redirect_chain == [(f"/admin/tools/tool/{read_before.pk}/change/", 302)]
    assert [str(message) for message in response.context["messages"]] == [
        f"stock_adjust was not switched on: {ToolHeldBySpec.message}"]
    assert _stock_adjust(provider).enabled is False
    assert not LogEntry.objects.filter(object_id=str(read_before.pk)).exists()


def test_the_enable_action_leaves_it_off_and_says_why(browser, provider):
    ids = [str(pk) for pk in provider.tools.values_list("pk", flat=True)]
    Tool.objects.filter(provider=provider).update(enabled=False)
    response = browser.post("/admin/tools/tool/", {"action": "enable_tools", "_selected_action": ids}, follow=True)
    page = response.content.decode()
    assert "4 tools enabled." in page and "held by their spec" in page and "stock_adjust" in page
    assert list(provider.tools.filter(enabled=False).values_list("name", flat=True)) == ["stock_adjust"]


def test_a_reimport_that_fixes_the_rate_limit_switches_it_on_as_its_spec_says(provider):
    services.provider_reimport(provider=provider, spec=STORE_SPEC)
    tool = _stock_adjust(provider)
    assert (tool.enabled, tool.held_reason, tool.compiled["rate_limit"]) == (
        True, "", {"count": 10, "window": "1m"})


def test_a_reimport_keeps_a_tool_the_operator_switched_off_off(owner):
    provider = ToolProviderFactory(project=owner.project)
    services.tool_set_enabled(tool=_stock_adjust(provider), enabled=False)
    services.provider_reimport(provider=provider, spec=STORE_SPEC)
    assert _stock_adjust(provider).enabled is False


@pytest.mark.parametrize("switch,kept", [(True, True), (False, None)], ids=["switched-on-since", "held-since-import"])
def test_the_migration_holds_tools_imported_before_from_their_providers_report(provider, switch, kept):
    """Every import switched such a tool off: off, it is held since its import (its ACC decides when
    the hold ends); on, the operator switched it on since, and gets it back."""
    Tool.objects.filter(provider=provider, name="stock_adjust").update(held_reason="", enabled=switch)
    migration = importlib.import_module("apps.tools.migrations.0012_tool_held_reason")
    migration.hold_from_reports(django_apps, None)
    tool = _stock_adjust(provider)
    assert (tool.enabled, tool.held_reason.split(":")[0], tool.enabled_before_hold) == (
        False, "acc_execution_rate_limit_invalid", kept)
    assert Tool.objects.filter(provider=provider).exclude(held_reason="").count() == 1
    services.provider_reimport(provider=provider, spec=STORE_SPEC)
    assert _stock_adjust(provider).enabled is True  # on before, or on by its ACC


def _route_allowing(owner, provider, *names):
    from apps.tools.route_tools import SourceSpec, route_tools_set
    from tests.routes.factories import RouteFactory

    route_tools_set(route=RouteFactory(project=owner.project, key="shop-desk", tools_direct_enabled=True),
                    sources=[SourceSpec(provider=provider, allowed_tools=list(names))])


def test_a_reimport_preview_names_the_tools_the_new_spec_switches_off_and_the_routes_losing_them(browser, owner):
    """The preview said "3 changed"; the route's agents then silently lost the tools."""
    provider = ToolProviderFactory(project=owner.project)
    _route_allowing(owner, provider, "stock_adjust", "product_lookup")
    data = {"base_url": provider.base_url, "enabled": "on", "spec_text": BAD_LIMIT.decode(), "_preview": "1",
            **tool_rows(provider)}
    page = browser.post(f"/admin/tools/toolprovider/{provider.pk}/change/", data).content.decode()
    assert "Switched off by this spec (on now): stock_adjust —" in page
    assert "Route shop-desk allows tools this spec removes or switches off: stock_adjust<" in page
    assert _stock_adjust(provider).enabled is True  # a preview changes nothing

    data.pop("_preview")
    saved = browser.post(f"/admin/tools/toolprovider/{provider.pk}/change/", data, follow=True).content.decode()
    assert "Switched off by the new spec: stock_adjust. Route shop-desk loses stock_adjust." in saved
    assert _stock_adjust(provider).enabled is False


def test_a_reimport_reports_no_tool_switched_off_that_was_off_already(owner):
    provider = ToolProviderFactory(project=owner.project)
    services.tool_set_enabled(tool=_stock_adjust(provider), enabled=False)
    assert services.provider_reimport(provider=provider, spec=BAD_LIMIT).diff.switched_off == ()


@pytest.mark.parametrize("switch", [True, False], ids=["on", "off"])
def test_a_hold_that_ends_gives_back_the_operators_switch_as_it_was_before_it(owner, switch):
    """A tool the operator had switched off came back on when a fixed spec ended its hold."""
    provider = ToolProviderFactory(project=owner.project)
    services.tool_set_enabled(tool=_stock_adjust(provider), enabled=switch)
    held = services.provider_reimport(provider=provider, spec=BAD_LIMIT)
    assert (_stock_adjust(provider).enabled, held.diff.switched_off) == (False, ("stock_adjust",) * switch)
    ended = services.provider_reimport(provider=provider, spec=STORE_SPEC)
    tool = _stock_adjust(provider)
    assert (tool.enabled, tool.held_reason, tool.enabled_before_hold) == (switch, "", None)
    assert ended.diff.switched_on == ("stock_adjust",) * switch


def test_a_hold_since_the_import_ends_with_the_switch_its_acc_gives(provider):
    assert services.provider_reimport(provider=provider, spec=STORE_SPEC).diff.switched_on == ("stock_adjust",)
    assert _stock_adjust(provider).enabled is True


def test_switching_on_a_tool_held_since_it_was_read_is_refused_and_leaves_it_off(owner):
    """The look and the write were two statements: an enable that read the tool before a re-import
    held it wrote enabled over the hold, and the tool ran with no rate limit."""
    provider = ToolProviderFactory(project=owner.project)
    read_before = _stock_adjust(provider)
    services.tool_set_enabled(tool=read_before, enabled=False)
    services.provider_reimport(provider=provider, spec=BAD_LIMIT)
    assert read_before.held_reason == ""  # as the enable read it
    with pytest.raises(ToolHeldBySpec):
        services.tool_set_enabled(tool=read_before, enabled=True)
    assert _stock_adjust(provider).enabled is False


def test_the_hold_is_carried_by_the_compiled_tool_not_read_from_the_warnings(owner):
    """The compiler keeps at most MAX_WARNINGS warnings: a hold read from them was lost past it."""
    from apps.tools.compiler import compile_spec

    [held] = [tool for tool in compile_spec(BAD_LIMIT).tools if tool.held_reason]
    assert (held.name, held.enabled, held.held_reason.split(":")[0], "held_reason" in held.as_dict()) == (
        "stock_adjust", False, "acc_execution_rate_limit_invalid", False)


def test_a_tool_switched_off_while_held_stays_off_when_the_hold_ends(owner):
    """The operator's "disable" of a held tool was forgotten: it came back on with the fixed spec."""
    provider = ToolProviderFactory(project=owner.project)
    services.provider_reimport(provider=provider, spec=BAD_LIMIT)
    services.tool_set_enabled(tool=_stock_adjust(provider), enabled=False)
    ended = services.provider_reimport(provider=provider, spec=STORE_SPEC)
    assert (_stock_adjust(provider).enabled, ended.diff.switched_on) == (False, ())
