"""The route page's tools: sources and allow lists picked from the project's compiled tools, write
tools and forced approvals picked from those sources, every pick checked by apps.tools.route_tools
and saved through route_tools_set; refusals shown next to their field with nothing changed."""

import html
import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from apps.projects.models import Membership
from apps.routes.models import Route
from apps.runtime.route_tools_form import source_field_name
from apps.tools.builder import route_dry_run
from apps.tools.models import RouteToolSource
from apps.tools.route_tools import SourceSpec, route_tools_set
from tests.projects.factories import MembershipFactory
from tests.routes.factories import RouteFactory
from tests.tools.factories import ToolProviderFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner():
    return MembershipFactory(role=Membership.Role.OWNER)


@pytest.fixture
def client(owner):
    client = Client()
    client.force_login(owner.user)
    return client


@pytest.fixture
def route(owner):
    return RouteFactory(project=owner.project, key="store-assistant", tools_direct_enabled=True)


@pytest.fixture
def store(owner):
    return ToolProviderFactory(project=owner.project, name="store")


def _form(route, **overrides):
    """The route page's POST as a browser sends it: the route's settings, no tool picked."""
    data = {
        "project": str(route.project_id), "key": route.key, "name": route.name, "description": "",
        "enabled": "on", "audience_policy": "any", "allowed_audiences": "", "system_prompt": "",
        "agent_client_enabled": "on", "agent_client_instructions": "", "agent_client_active_tool_limit": "8",
        "system_info_name": "", "system_info_summary": "", "system_info_domains": "", "system_info_boundaries": "",
        "tools_direct_enabled": "on", "max_tool_calls": "5", "permission": "full",
        "knowledge_mode": "chunk", "knowledge_top_k": "5", "knowledge_max_docs": "4", "knowledge_score_threshold": "",
        "memory_recent_messages": "12", "memory_recent_budget_chars": "8000", "memory_per_message_chars": "2000",
        "memory_summary_max_chars": "1200",
        "knowledge_bindings-TOTAL_FORMS": "0", "knowledge_bindings-INITIAL_FORMS": "0",
        "knowledge_bindings-MIN_NUM_FORMS": "0", "knowledge_bindings-MAX_NUM_FORMS": "1000",
    }
    data.update(overrides)
    return data


def _post(client, route, **overrides):
    return client.post(f"/admin/routes/route/{route.pk}/change/", _form(route, **overrides))


def _state(route):
    row = Route.objects.get(pk=route.pk)
    return (row.write_tools, row.force_approval_tools, row.unattended_write_tools, row.permission,
            sorted(RouteToolSource.objects.filter(route=route).values_list("provider__name", "allowed_tools")))


def test_the_page_offers_each_providers_compiled_tools_as_picks(client, route, store):
    form = client.get(f"/admin/routes/route/{route.pk}/change/").context["adminform"].form
    assert [name for name, _ in form.fields[source_field_name(store)].choices] == [
        "product_lookup", "order_status", "stock_adjust", "order_refund", "customer_note"]
    assert [name for name, _ in form.fields["write_tools"].choices] == ["stock_adjust", "order_refund", "customer_note"]


def test_the_page_shows_what_is_allowed_now(client, route, store):
    route_tools_set(route=route, sources=[SourceSpec(provider=store, allowed_tools=["order_status"])])
    form = client.get(f"/admin/routes/route/{route.pk}/change/").context["adminform"].form
    assert form[source_field_name(store)].value() == ["order_status"]


def test_saving_picks_sets_sources_and_policy(client, route, store):
    response = _post(client, route, **{source_field_name(store): ["product_lookup", "stock_adjust"],
                                       "write_tools": ["stock_adjust"], "force_approval_tools": ["stock_adjust"]})
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert _state(route) == (["stock_adjust"], ["stock_adjust"], None, "full",
                             [("store", ["product_lookup", "stock_adjust"])])


def test_saving_picks_changes_the_dry_run(client, route, store):
    _post(client, route, **{source_field_name(store): ["product_lookup", "stock_adjust"],
                            "write_tools": ["stock_adjust"], "force_approval_tools": ["stock_adjust"]})
    route.refresh_from_db()
    capabilities = route_dry_run(route=route)["capabilities"]
    assert (capabilities["authorized_total"], capabilities["writes"], capabilities["approval_required"]) == (2, 1, 1)
    page = client.get(f"/admin/routes/route/{route.pk}/change/").content.decode()
    assert f'<code data-revision title="{capabilities["revision"]}">' in page


def test_a_write_tool_no_source_allows_is_refused_next_to_the_field(client, route, store):
    before = _state(route)
    response = _post(client, route, **{source_field_name(store): ["product_lookup"], "write_tools": ["stock_adjust"]})
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["write_tools"] == [
        "'stock_adjust' is not a tool of this route's sources."]
    assert _state(route) == before


def test_a_tool_unticked_in_its_source_leaves_the_policys_picks_and_the_page_says_so(client, route, store):
    """The save was refused ("'stock_adjust' is not a tool of this route's sources") until the
    person found the tool still ticked under Write tools and Force approval tools (browser audit)."""
    route_tools_set(route=route, sources=[SourceSpec(provider=store, allowed_tools=["product_lookup", "stock_adjust",
                                                                                   "order_refund"])],
                    write_tools=["stock_adjust", "order_refund"])
    response = client.post(f"/admin/routes/route/{route.pk}/change/", _form(
        route, **{source_field_name(store): ["product_lookup", "order_refund"],
                  "write_tools": ["stock_adjust", "order_refund"]}), follow=True)
    assert response.redirect_chain, response.context["adminform"].form.errors
    assert _state(route) == (["order_refund"], [], None, "full", [("store", ["product_lookup", "order_refund"])])
    said = [str(message) for message in response.context["messages"]]
    assert said == ["Write tools: stock_adjust left out — no source above allows it.",
                    *[m for m in said if "was changed successfully" in m]]


@pytest.mark.parametrize("policy", [{"force_approval_tools": ["stock_adjust"]},
                                    {"unattended_write_tools": ["stock_adjust"]}])
def test_a_tool_unticked_in_its_source_is_not_dropped_from_an_approval_pick(client, route, store, policy):
    """Dropped from the legacy unattended list, its last name made it no list: every other write
    tool's approval was gone; dropped from the forced approvals, the tool ticked again later would
    run without one (review, high). Still refused beside the field: the person decides."""
    route_tools_set(route=route, sources=[SourceSpec(provider=store, allowed_tools=["stock_adjust", "order_refund"])],
                    write_tools=["stock_adjust", "order_refund"], **policy)
    before = _state(route)
    [(field, names)] = policy.items()
    response = _post(client, route, **{source_field_name(store): ["order_refund"],
                                       "write_tools": ["stock_adjust", "order_refund"], field: names})
    assert response.status_code == 200
    assert response.context["adminform"].form.errors[field] == ["'stock_adjust' is not a tool of this route's sources."]
    assert _state(route) == before


def test_a_read_only_tool_is_no_write_tool_choice(client, route, store):
    before = _state(route)
    response = _post(client, route, **{source_field_name(store): ["product_lookup"],
                                       "force_approval_tools": ["product_lookup"]})
    assert response.context["adminform"].form.errors["force_approval_tools"] == [
        "Select a valid choice. product_lookup is not one of the available choices."]
    assert _state(route) == before


def test_typed_text_is_no_write_tool(client, route, store):
    before = _state(route)
    response = _post(client, route, write_tools="order_update,stock_adjust")
    assert "write_tools" in response.context["adminform"].form.errors
    assert _state(route) == before


def test_one_tool_name_from_two_providers_is_refused_at_the_second(client, route, store, owner):
    twin = ToolProviderFactory(project=owner.project, name="twin")
    before = _state(route)
    response = _post(client, route, **{source_field_name(store): ["product_lookup"],
                                       source_field_name(twin): ["product_lookup"]})
    assert response.context["adminform"].form.errors[source_field_name(twin)] == [
        "product_lookup is already allowed from store; a route's tool names must be unique."]
    assert _state(route) == before


def test_a_tool_name_two_providers_offer_is_one_write_pick_and_the_route_still_saves(client, route, store, owner):
    twin = ToolProviderFactory(project=owner.project, name="twin")  # the same spec: the same tool names
    route_tools_set(route=route, sources=[SourceSpec(provider=store, allowed_tools=["stock_adjust"])],
                    write_tools=["stock_adjust"], tools_direct_enabled=True)
    page = client.get(f"/admin/routes/route/{route.pk}/change/")
    form = page.context["adminform"].form
    assert form.fields["write_tools"].choices == [
        ("stock_adjust", "stock_adjust · store, twin"), ("order_refund", "order_refund · store, twin"),
        ("customer_note", "customer_note · store, twin")]
    html = page.content.decode()
    assert html.count('name="write_tools" value="stock_adjust"') == 1
    # What the browser sends back after an edit of the description only.
    response = _post(client, route, description="Edited.", **{source_field_name(store): ["stock_adjust"],
                                                               source_field_name(twin): [],
                                                               "write_tools": ["stock_adjust"]})
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Route.objects.get(pk=route.pk).description == "Edited."
    assert _state(route)[0] == ["stock_adjust"]


def test_forced_approval_and_legacy_unattended_cannot_combine(client, route, store):
    before = _state(route)
    response = _post(client, route, **{source_field_name(store): ["stock_adjust", "order_refund"],
                                       "write_tools": ["stock_adjust", "order_refund"],
                                       "force_approval_tools": ["stock_adjust"],
                                       "unattended_write_tools": ["order_refund"]})
    assert "cannot be combined" in response.context["adminform"].form.errors["unattended_write_tools"][0]
    assert _state(route) == before


def test_unticking_every_tool_removes_the_source(client, route, store):
    route_tools_set(route=route, sources=[SourceSpec(provider=store, allowed_tools=["order_status"])])
    _post(client, route)
    assert RouteToolSource.objects.filter(route=route).count() == 0


def test_another_projects_providers_are_not_offered(client, route, store):
    foreign = ToolProviderFactory(name="foreign")
    form = client.get(f"/admin/routes/route/{route.pk}/change/").context["adminform"].form
    assert source_field_name(foreign) not in form.fields


def test_the_page_reads_the_tools_in_a_fixed_number_of_queries(client, route, owner):
    ToolProviderFactory(project=owner.project, name="first")
    client.get(f"/admin/routes/route/{route.pk}/change/")  # warm caches (content types, compiled tools)
    with CaptureQueriesContext(connection) as one:
        client.get(f"/admin/routes/route/{route.pk}/change/")
    ToolProviderFactory(project=owner.project, name="second")
    ToolProviderFactory(project=owner.project, name="third")
    client.get(f"/admin/routes/route/{route.pk}/change/")
    with CaptureQueriesContext(connection) as three:
        client.get(f"/admin/routes/route/{route.pk}/change/")
    assert len(three.captured_queries) == len(one.captured_queries)


def test_a_viewer_reads_the_tools_without_changing_them(route, store):
    viewer = MembershipFactory(project=route.project, role=Membership.Role.VIEWER)
    route_tools_set(route=route, sources=[SourceSpec(provider=store, allowed_tools=["order_status"])])
    client = Client()
    client.force_login(viewer.user)
    page = client.get(f"/admin/routes/route/{route.pk}/change/")
    assert page.status_code == 200
    assert "<strong>store</strong>: order_status" in page.content.decode()
    before = _state(route)
    response = _post(client, route, **{source_field_name(store): ["product_lookup"]})
    assert response.status_code == 403
    assert _state(route) == before


def test_the_tool_picks_render_in_templates_that_do_not_grow_with_the_tools(client, route, owner):
    """Each box was a template include (three templates a box): a project of 300 providers offered
    3,000 boxes and the route's page took seconds to render."""
    url = f"/admin/routes/route/{route.pk}/change/"

    def box_templates() -> int:
        response = client.get(url)
        assert response.status_code == 200
        return sum(1 for template in response.templates if template.name == "django/forms/widgets/input_option.html")

    ToolProviderFactory(project=owner.project, name="store")
    one = box_templates()
    ToolProviderFactory(project=owner.project, name="warehouse")
    ToolProviderFactory(project=owner.project, name="crm")
    assert box_templates() == one


@pytest.mark.parametrize(("attrs", "choices"), [
    ({"id": "id_tools_from_x"}, [("a", "a — GET /a <b>"), ("b", "b — POST /b")]),
    ({}, [("a", "a"), ("b", 'b "quoted" & <tag>')]),
    ({"id": "id_x", "disabled": True, "aria-describedby": "help_x"}, [("a", "a")]),
    ({"id": "id_x", "data-off": False}, [("a", "a")]),
    ({"id": "id_x"}, [("reads", [("a", "a"), ("b", "b")]), ("writes", [("c", "c")])]),
])
def test_the_tool_picks_are_written_as_djangos_templates_write_them(attrs, choices):
    from django import forms

    from apps.runtime.route_tools_form import PICKS, ToolPicks

    ours, djangos = ToolPicks(attrs=PICKS), forms.CheckboxSelectMultiple(attrs=PICKS)
    ours.choices = djangos.choices = choices
    assert ours.render("tools_from_x", ["a"], attrs) == djangos.render("tools_from_x", ["a"], attrs)


@pytest.fixture
def many_providers(monkeypatch, owner, route, store):
    """A project past the page's limit: the route's source `store`, and `billing` and `crm`."""
    from apps.runtime import admin as runtime_admin

    monkeypatch.setattr(runtime_admin, "ROUTE_PAGE_PROVIDERS_ALL", 2)
    route_tools_set(route=route, sources=[SourceSpec(provider=store, allowed_tools=["order_status"])])
    return {name: ToolProviderFactory(project=owner.project, name=name) for name in ("billing", "crm")}


def test_past_the_limit_the_page_offers_its_sources_picks_and_the_other_providers_to_add(client, route, store,
                                                                                        many_providers):
    """Every provider's picks on the page made it 1.1 MB at 280 providers of 10 tools."""
    response = client.get(f"/admin/routes/route/{route.pk}/change/")
    form = response.context["adminform"].form
    assert [name for name in form.fields if name.startswith("tools_from_")] == [source_field_name(store)]
    assert form[source_field_name(store)].value() == ["order_status"]
    page = response.content.decode()
    adder = page.split('<select name="add_source"', 1)[1].split("</select>", 1)[0]
    assert [(str(p.pk), p.name) for p in many_providers.values()] == re.findall(r'<option value="([^"]+)">([^<]+)<',
                                                                                  adder)
    assert '<form id="bh-add-source" method="get" action="#tool-sources" hidden></form>' in page


def test_an_added_provider_is_offered_and_its_picks_saved_as_a_source(client, route, store, many_providers):
    billing = many_providers["billing"]
    url = f"/admin/routes/route/{route.pk}/change/?add_source={billing.pk}"
    form = client.get(url).context["adminform"].form
    assert [name for name in form.fields if name.startswith("tools_from_")] == [
        source_field_name(billing), source_field_name(store)]
    response = client.post(url, _form(route, **{source_field_name(store): ["order_status"],
                                                source_field_name(billing): ["product_lookup"]}))
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert _state(route)[4] == [("billing", ["product_lookup"]), ("store", ["order_status"])]


def test_adding_a_source_keeps_the_lists_filters_that_save_returns_to(client, route, many_providers):
    billing = many_providers["billing"]
    page = client.get(f"/admin/routes/route/{route.pk}/change/", {
        "_changelist_filters": "enabled__exact=1", "add_source": str(billing.pk)}).content.decode()
    assert ('<input type="hidden" name="_changelist_filters" value="enabled__exact=1" form="bh-add-source">'
            in page)
    assert f'<input type="hidden" name="add_source" value="{billing.pk}" form="bh-add-source">' in page
    assert page.count('name="add_source" value=') == 1  # the kept one, not again from the page's own


def test_another_projects_provider_cannot_be_added(client, route, many_providers):
    foreign = ToolProviderFactory(name="foreign")
    form = client.get(f"/admin/routes/route/{route.pk}/change/", {"add_source": str(foreign.pk)}
                      ).context["adminform"].form
    assert source_field_name(foreign) not in form.fields


def test_saving_after_a_dry_run_returns_to_the_filtered_list(client, route):
    """The dry-run panel posted to its own URL without the list's filters, and the page it answered
    saved the route to the bare change URL: Save went back to the whole, unfiltered list."""
    filters = {"_changelist_filters": "enabled__exact=1&q=store"}
    page = client.get(f"/admin/routes/route/{route.pk}/change/", filters).content.decode()
    [action] = re.findall(r'<form method="post" action="([^"]*)" class="bh-dry-run-form"', page)
    action = html.unescape(action).split("#")[0]
    assert action == f"/admin/routes/route/{route.pk}/dry-run/?_changelist_filters=enabled__exact%3D1%26q%3Dstore"
    answered = client.post(action, {"dry_run": "退款要几天？"})
    assert answered.status_code == 200 and answered.context["dry_run_form"].is_valid()
    [form_action] = re.findall(r'<form [^>]*action="([^"]*)"[^>]*id="route_form"', answered.content.decode())
    saved = client.post(html.unescape(form_action), _form(route, name="Store desk", _save="Save"))
    assert saved.status_code == 302
    assert saved["Location"] == "/admin/routes/route/?enabled__exact=1&q=store"
    assert Route.objects.get(pk=route.pk).name == "Store desk"
