import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from apps.projects.models import Membership
from apps.routes.models import Route
from tests.projects.factories import MembershipFactory, ProjectFactory, UserFactory
from tests.routes.factories import RouteFactory

pytestmark = pytest.mark.django_db


def _client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _form_data(project, **overrides):
    data = {
        "project": str(project.pk), "key": "new-route", "name": "New route", "description": "",
        "enabled": "on", "audience_policy": "any", "allowed_audiences": "", "system_prompt": "",
        "agent_client_instructions": "", "agent_client_active_tool_limit": "8",
        "system_info_name": "", "system_info_summary": "", "system_info_domains": "",
        "system_info_boundaries": "", "max_tool_calls": "5", "permission": "full",
        "knowledge_mode": "chunk", "knowledge_top_k": "5", "knowledge_max_docs": "4",
        "knowledge_score_threshold": "", "memory_recent_messages": "12", "memory_recent_budget_chars": "8000",
        "memory_per_message_chars": "2000", "memory_summary_max_chars": "1200",
    }
    data.update(overrides)
    return data


def test_operator_sees_only_routes_of_their_projects():
    membership = MembershipFactory(role=Membership.Role.VIEWER)
    mine = RouteFactory(project=membership.project, key="mine")
    RouteFactory(key="theirs")

    response = _client_for(membership.user).get("/admin/routes/route/")

    assert response.status_code == 200
    assert list(response.context["cl"].queryset) == [mine]


def test_operator_cannot_open_or_change_a_route_of_another_project():
    membership = MembershipFactory()
    other = RouteFactory(name="Theirs")
    client = _client_for(membership.user)

    opened = client.get(f"/admin/routes/route/{other.pk}/change/", follow=True)
    posted = client.post(f"/admin/routes/route/{other.pk}/change/", _form_data(other.project, key=other.key,
                                                                               name="Taken over"))

    assert opened.redirect_chain[0] == ("/admin/", 302)  # the admin's "does not exist" answer
    assert "Theirs" not in opened.content.decode()
    assert posted.status_code == 302
    assert Route.objects.get(pk=other.pk).name == "Theirs"


def test_viewer_can_read_but_not_change_a_route():
    membership = MembershipFactory(role=Membership.Role.VIEWER)
    route = RouteFactory(project=membership.project, name="Before")
    client = _client_for(membership.user)

    assert client.get(f"/admin/routes/route/{route.pk}/change/").status_code == 200
    response = client.post(f"/admin/routes/route/{route.pk}/change/",
                           _form_data(membership.project, key=route.key, name="After"))

    assert response.status_code == 403
    route.refresh_from_db()
    assert route.name == "Before"


def test_editor_creates_a_route_through_the_admin():
    membership = MembershipFactory(role=Membership.Role.EDITOR)
    response = _client_for(membership.user).post("/admin/routes/route/add/", _form_data(membership.project))
    assert response.status_code == 302
    route = Route.objects.get(key="new-route")
    assert (route.write_tools, route.force_approval_tools) == ([], [])
    assert route.unattended_write_tools is None


def test_a_new_route_takes_no_write_tool_before_it_has_tool_sources():
    membership = MembershipFactory(role=Membership.Role.EDITOR)
    response = _client_for(membership.user).post(
        "/admin/routes/route/add/", _form_data(membership.project, write_tools=["order_update"]))
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["write_tools"] == [
        "Select a valid choice. order_update is not one of the available choices."]
    assert Route.objects.count() == 0


def test_admin_form_shows_the_validation_message_and_writes_nothing():
    membership = MembershipFactory(role=Membership.Role.OWNER)
    response = _client_for(membership.user).post(
        "/admin/routes/route/add/", _form_data(membership.project, key="auto", write_tools="*")
    )
    assert response.status_code == 200
    form = response.context["adminform"].form
    assert form.errors["key"] == ["'auto' is reserved and cannot be a route key."]
    assert form.errors["write_tools"] == ["Select a valid choice. * is not one of the available choices."]
    assert Route.objects.count() == 0


def test_blank_audience_items_are_ignored_and_an_empty_listed_policy_is_one_message():
    membership = MembershipFactory(role=Membership.Role.OWNER)
    response = _client_for(membership.user).post(
        "/admin/routes/route/add/",
        _form_data(membership.project, audience_policy="listed", allowed_audiences=",,, ,"))
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {
        "allowed_audiences": ["List at least one audience, or admit any principal."]}
    assert Route.objects.count() == 0


def test_blank_audience_items_are_dropped_around_the_listed_ones():
    membership = MembershipFactory(role=Membership.Role.OWNER)
    response = _client_for(membership.user).post(
        "/admin/routes/route/add/",
        _form_data(membership.project, audience_policy="listed", allowed_audiences=" staff,, ,partners ,"))
    assert response.status_code == 302
    assert Route.objects.get(key="new-route").allowed_audiences == ["staff", "partners"]


def test_operator_cannot_create_a_route_in_a_project_they_do_not_edit():
    membership = MembershipFactory(role=Membership.Role.OWNER)
    foreign = ProjectFactory()
    response = _client_for(membership.user).post("/admin/routes/route/add/", _form_data(foreign))
    assert response.status_code == 200
    assert "project" in response.context["adminform"].form.errors
    assert Route.objects.count() == 0


def test_change_page_shows_the_profile_revision_read_only():
    membership = MembershipFactory()
    route = RouteFactory(project=membership.project)
    from apps.routes.selectors import route_profile

    response = _client_for(membership.user).get(f"/admin/routes/route/{route.pk}/change/")
    assert route_profile(route=route)["revision"] in response.content.decode()


def test_superuser_sees_every_project():
    ProjectFactory.create_batch(3)
    admin = UserFactory(is_superuser=True)
    response = _client_for(admin).get("/admin/projects/project/")
    assert response.context["cl"].result_count == 3


def test_route_list_query_count_does_not_grow_with_rows():
    membership = MembershipFactory()
    RouteFactory.create_batch(3, project=membership.project)
    client = _client_for(membership.user)
    client.get("/admin/routes/route/")  # warm caches (content types, permissions)
    with CaptureQueriesContext(connection) as few:
        client.get("/admin/routes/route/")
    RouteFactory.create_batch(10, project=membership.project)
    with CaptureQueriesContext(connection) as many:
        response = client.get("/admin/routes/route/")
    assert response.context["cl"].result_count == 13
    assert len(many.captured_queries) == len(few.captured_queries)


# Knowledge bindings and the dry-run on the route page (registered by apps.runtime.admin).

def _route_form(route, bindings, *, initial=0, **overrides):
    """The route page's POST: its settings as they are, plus the binding rows."""
    data = _form_data(route.project, key=route.key, name=route.name, knowledge_enabled="on", **overrides)
    data.update({
        "knowledge_bindings-TOTAL_FORMS": str(len(bindings)), "knowledge_bindings-INITIAL_FORMS": str(initial),
        "knowledge_bindings-MIN_NUM_FORMS": "0", "knowledge_bindings-MAX_NUM_FORMS": "1000",
    })
    for n, row in enumerate(bindings):
        for field, value in row.items():
            data[f"knowledge_bindings-{n}-{field}"] = value
        data[f"knowledge_bindings-{n}-route"] = str(route.pk)
    return data


@pytest.fixture
def owner_route():
    membership = MembershipFactory(role=Membership.Role.OWNER)
    return membership, RouteFactory(project=membership.project, key="store-assistant", name="门店助手")


@pytest.fixture
def model():
    from tests.knowledge.factories import EmbeddingModelFactory

    return EmbeddingModelFactory(name="hashing-32")


def _kb(project, model, name):
    from tests.knowledge.factories import KnowledgeBaseFactory

    return KnowledgeBaseFactory(project=project, embedding_model=model, name=name)


def _bound(route) -> list[str]:
    from apps.knowledge.models import RouteKnowledgeBinding

    return sorted(RouteKnowledgeBinding.objects.filter(route=route).values_list("knowledge_base__name", flat=True))


def test_an_owner_binds_several_knowledge_bases_on_the_route_page(owner_route, model):
    membership, route = owner_route
    policies, faq = _kb(route.project, model, "售后政策"), _kb(route.project, model, "常见问题")
    response = _client_for(membership.user).post(
        f"/admin/routes/route/{route.pk}/change/",
        _route_form(route, [{"knowledge_base": str(policies.pk)}, {"knowledge_base": str(faq.pk)}]),
    )
    assert response.status_code == 302
    assert _bound(route) == ["售后政策", "常见问题"]
    route.refresh_from_db()
    assert route.knowledge_enabled is True


def test_an_owner_unbinds_a_knowledge_base(owner_route, model):
    from apps.knowledge.models import RouteKnowledgeBinding
    from apps.knowledge.services import route_knowledge_bind

    membership, route = owner_route
    kb = _kb(route.project, model, "售后政策")
    binding = route_knowledge_bind(route=route, knowledge_base=kb)
    response = _client_for(membership.user).post(
        f"/admin/routes/route/{route.pk}/change/",
        _route_form(route, [{"id": str(binding.pk), "knowledge_base": str(kb.pk), "DELETE": "on"}], initial=1),
    )
    assert response.status_code == 302
    assert not RouteKnowledgeBinding.objects.filter(route=route).exists()


def test_a_knowledge_base_of_another_project_cannot_be_bound(owner_route, model):
    membership, route = owner_route
    foreign = _kb(ProjectFactory(), model, "别人的知识库")
    response = _client_for(membership.user).post(
        f"/admin/routes/route/{route.pk}/change/", _route_form(route, [{"knowledge_base": str(foreign.pk)}]),
    )
    assert response.status_code == 200
    [inline] = response.context["inline_admin_formsets"]
    assert inline.formset.errors[0]["knowledge_base"] == [
        "Select a valid choice. That choice is not one of the available choices."]
    assert "errorlist" in response.content.decode()
    assert _bound(route) == []


def test_the_same_knowledge_base_twice_is_refused(owner_route, model):
    membership, route = owner_route
    kb = _kb(route.project, model, "售后政策")
    response = _client_for(membership.user).post(
        f"/admin/routes/route/{route.pk}/change/",
        _route_form(route, [{"knowledge_base": str(kb.pk)}, {"knowledge_base": str(kb.pk)}]),
    )
    assert response.status_code == 200
    assert "Please correct the duplicate data" in response.content.decode()
    assert _bound(route) == []


def test_a_viewer_cannot_bind_a_knowledge_base(model):
    membership = MembershipFactory(role=Membership.Role.VIEWER)
    route = RouteFactory(project=membership.project)
    kb = _kb(route.project, model, "售后政策")
    response = _client_for(membership.user).post(
        f"/admin/routes/route/{route.pk}/change/", _route_form(route, [{"knowledge_base": str(kb.pk)}]),
    )
    assert response.status_code == 403
    assert _bound(route) == []


def test_the_binding_rows_show_the_embedding_model_and_ready_state(owner_route, model):
    from apps.knowledge.services import route_knowledge_bind

    membership, route = owner_route
    ready, building = _kb(route.project, model, "售后政策"), _kb(route.project, model, "新知识库")
    building.generations.update(status="building")
    for kb in (ready, building):
        route_knowledge_bind(route=route, knowledge_base=kb)
    page = _client_for(membership.user).get(f"/admin/routes/route/{route.pk}/change/").content.decode()
    assert "hashing-32 (32 dims)" in page
    assert "ready (generation #1)" in page
    assert "building its first index" in page


def test_the_route_page_offers_only_its_projects_knowledge_bases(owner_route, model):
    membership, route = owner_route
    _kb(route.project, model, "售后政策")
    _kb(ProjectFactory(), model, "别人的知识库")
    response = _client_for(membership.user).get(f"/admin/routes/route/{route.pk}/change/")
    [inline] = response.context["inline_admin_formsets"]
    field = inline.formset.form.base_fields["knowledge_base"]
    assert [kb.name for kb in field.queryset] == ["售后政策"]
    assert "别人的知识库" not in response.content.decode()


def test_a_new_route_binds_knowledge_after_it_is_saved(owner_route):
    membership, _ = owner_route
    response = _client_for(membership.user).get("/admin/routes/route/add/")
    assert response.context["inline_admin_formsets"] == []


def test_the_route_page_query_count_does_not_grow_with_bindings(owner_route, model):
    from apps.knowledge.services import route_knowledge_bind

    membership, route = owner_route
    client = _client_for(membership.user)
    route_knowledge_bind(route=route, knowledge_base=_kb(route.project, model, "kb-0"))
    client.get(f"/admin/routes/route/{route.pk}/change/")
    with CaptureQueriesContext(connection) as one:
        client.get(f"/admin/routes/route/{route.pk}/change/")
    expected = len(one.captured_queries)
    for n in range(1, 5):
        route_knowledge_bind(route=route, knowledge_base=_kb(route.project, model, f"kb-{n}"))
    with CaptureQueriesContext(connection) as five:
        client.get(f"/admin/routes/route/{route.pk}/change/")
    assert len(five.captured_queries) == expected


REFUND = "# 售后政策\n\n## 退款\n\n自签收之日起七天内可以无理由退货，商品须保持完好。退款三个工作日内原路退回。"
DELIVERY = "# 配送\n\n同城订单当天送达，外地订单三到五天送达。"


@pytest.fixture
def bound_route(owner_route, model):
    from apps.knowledge.services import route_knowledge_bind
    from apps.routes.services import route_update
    from tests.knowledge.helpers import ingest_texts

    membership, route = owner_route
    route = route_update(route=route, knowledge_enabled=True)
    policies, delivery = _kb(route.project, model, "售后政策"), _kb(route.project, model, "配送")
    ingest_texts(policies, {"refund.md": REFUND})
    ingest_texts(delivery, {"delivery.md": DELIVERY})
    for kb in (policies, delivery):
        route_knowledge_bind(route=route, knowledge_base=kb)
    return membership, route


def _dry_run(membership, route, **params):
    return _client_for(membership.user).get(f"/admin/routes/route/{route.pk}/change/", params)


def test_the_dry_run_counts_the_bound_sources(bound_route):
    response = _dry_run(*bound_route)
    assert response.context["dry_run_sources"] == 2
    assert response.context["dry_run"] is None
    assert "a turn searches <strong data-sources>2</strong> bound sources" in response.content.decode()


def test_the_dry_run_leaves_out_a_kb_turned_off_and_says_so(bound_route):
    from apps.knowledge.models import KnowledgeBase
    from apps.knowledge.services import knowledge_base_update

    membership, route = bound_route
    before = _dry_run(membership, route, dry_run="同城订单多久送达").context["dry_run"]
    assert "delivery.md" in [entry.title for entry in before.entries]
    knowledge_base_update(kb=KnowledgeBase.objects.get(project=route.project, name="配送"), enabled=False)
    response = _dry_run(membership, route, dry_run="同城订单多久送达")
    page = response.content.decode()
    assert response.context["dry_run_sources"] == 1
    assert "a turn searches <strong data-sources>1</strong> bound source" in page
    assert "1 bound knowledge base turned off" in page
    assert "turned off, agents do not read it; ready (generation #1)" in page
    dry_run = response.context["dry_run"]
    assert (dry_run.failure, "delivery.md" in [entry.title for entry in dry_run.entries]) == ("", False)


def test_a_binding_row_counts_the_documents_turned_off(bound_route):
    from apps.knowledge.models import Document

    membership, route = bound_route
    Document.objects.filter(filename="delivery.md").update(enabled=False)
    page = _dry_run(membership, route).content.decode()
    assert "1 of 1 completed, 1 turned off" in page and "1 of 1 completed<" in page


def test_the_dry_run_shows_exactly_the_knowledge_a_turn_carries(bound_route):
    from rest_framework.test import APIClient

    from tests.agent_auth.factories import AgentClientFactory
    from tests.agent_auth.helpers import session_for
    from tests.ledger.helpers import open_turn

    membership, route = bound_route
    response = _dry_run(membership, route, dry_run="退款要几天？")
    entries = [(e.ref, e.title, e.content) for e in response.context["dry_run"].entries]
    issued = session_for(AgentClientFactory(project=route.project, allowed_routes=[route.key]))
    turn = open_turn(APIClient(), issued.access_token, route.key, user_input="退款要几天？").json()
    assert entries == [(k["ref"], k["title"], k["content"]) for k in turn["context"]["knowledge"]]
    assert entries[0][1] == "refund.md"
    assert "七天内可以无理由退货" in response.content.decode()


def test_the_dry_run_writes_nothing_to_the_ledger(bound_route):
    from tests.ledger.helpers import ledger_counts

    before = ledger_counts()
    response = _dry_run(*bound_route, dry_run="退款要几天？")
    assert len(response.context["dry_run"].entries) >= 1
    assert ledger_counts() == before == {"Conversation": 0, "Message": 0, "Run": 0, "MemoryNote": 0}


def test_an_empty_dry_run_question_is_an_error_next_to_the_field(bound_route):
    response = _dry_run(*bound_route, dry_run="   ")
    assert response.context["dry_run"] is None
    assert response.context["dry_run_form"].errors["dry_run"] == [
        "Type a question to see the knowledge a turn would carry."]
    assert '<div class="form-row errors">' in response.content.decode()


def test_a_too_long_dry_run_question_is_refused(bound_route):
    response = _dry_run(*bound_route, dry_run="退" * 2001)
    assert response.context["dry_run"] is None
    assert response.context["dry_run_form"].errors["dry_run"] == [
        "Ensure this value has at most 2000 characters (it has 2001)."]


def test_a_dry_run_with_knowledge_off_carries_nothing_and_says_why(bound_route):
    from apps.routes.services import route_update

    membership, route = bound_route
    route_update(route=route, knowledge_enabled=False)
    response = _dry_run(membership, route, dry_run="退款要几天？")
    assert response.context["dry_run"].entries == []
    assert "No knowledge: knowledge is off for this route." in response.content.decode()


def test_an_operator_of_another_project_cannot_dry_run_a_route(bound_route):
    from tests.ledger.helpers import ledger_counts

    _, route = bound_route
    stranger = MembershipFactory()
    before = ledger_counts()
    response = _dry_run(stranger, route, dry_run="退款要几天？")
    assert response.status_code == 302
    assert response["Location"] == "/admin/"
    assert ledger_counts() == before


def test_the_route_list_counts_each_routes_knowledge_sources(bound_route):
    membership, route = bound_route
    RouteFactory(project=route.project, key="no-knowledge")
    response = _client_for(membership.user).get("/admin/routes/route/")
    assert sorted((r.key, r.knowledge_source_read) for r in response.context["cl"].result_list) == [
        ("no-knowledge", 0), ("store-assistant", 2)]
    assert re.search(r'<td class="field-knowledge_sources"><img [^>]*alt="True">'
                     r'<br><span class="bh-muted">2 sources</span></td>', response.content.decode())


def test_the_route_list_tells_the_sources_read_from_those_turned_off(bound_route):
    from apps.knowledge.models import KnowledgeBase

    membership, route = bound_route
    KnowledgeBase.objects.filter(project=route.project, name="配送").update(enabled=False)
    response = _client_for(membership.user).get("/admin/routes/route/")
    assert '<span class="bh-muted">1 source (+1 off)</span></td>' in response.content.decode()
    # The column sorts by what it shows first: the sources read.
    assert [(r.knowledge_source_read, r.knowledge_source_off) for r in response.context["cl"].result_list] == [(1, 1)]


def test_the_add_form_starts_on_the_only_project_the_operator_edits():
    editor = MembershipFactory(role=Membership.Role.EDITOR)
    MembershipFactory(user=editor.user, role=Membership.Role.VIEWER)  # viewed, not a place to add routes
    response = _client_for(editor.user).get("/admin/routes/route/add/")
    assert response.context["adminform"].form.initial["project"] == editor.project_id


def test_the_add_form_leaves_the_project_to_pick_when_the_operator_edits_several():
    editor = MembershipFactory(role=Membership.Role.EDITOR)
    MembershipFactory(user=editor.user, role=Membership.Role.OWNER)
    response = _client_for(editor.user).get("/admin/routes/route/add/")
    assert "project" not in response.context["adminform"].form.initial


@pytest.mark.parametrize("value", ["-1", "0"])
def test_a_count_below_one_is_refused_saying_one_is_the_least(value):
    """The form said "greater than or equal to 0" of -1, where 0 is refused too."""
    membership = MembershipFactory(role=Membership.Role.OWNER)
    response = _client_for(membership.user).post("/admin/routes/route/add/",
                                                 _form_data(membership.project, knowledge_top_k=value))
    page = response.content.decode()
    assert response.status_code == 200
    assert "Ensure this value is greater than or equal to 1." in page
    assert "greater than or equal to 0" not in page
    [field] = re.findall(r'<input type="number" name="knowledge_top_k"[^>]*>', page)
    assert 'min="1"' in field
    assert not Route.objects.filter(key="new-route").exists()


def test_the_console_search_box_holds_at_most_200_characters():
    """A search of 5,000 characters made a URL over the server's request-line limit: a bare JSON
    414 instead of a page."""
    membership = MembershipFactory(role=Membership.Role.OWNER)
    page = _client_for(membership.user).get("/admin/routes/route/").content.decode()
    [box] = re.findall(r'<input type="text"[^>]*id="searchbar"[^>]*>', page)
    assert 'maxlength="200"' in box


def test_a_posted_dry_run_answers_the_route_page_and_changes_nothing(bound_route):
    membership, route = bound_route
    before = (route.name, route.updated_at)
    response = _client_for(membership.user).post(f"/admin/routes/route/{route.pk}/dry-run/",
                                                 {"dry_run": "退款要几天？", "name": "changed"})
    assert response.status_code == 200
    assert response.context["dry_run"].entries[0].title == "refund.md"
    assert f'action="/admin/routes/route/{route.pk}/change/"' in response.content.decode()
    route.refresh_from_db()
    assert (route.name, route.updated_at) == before


def test_an_operator_of_another_project_cannot_post_a_dry_run(bound_route):
    from tests.ledger.helpers import ledger_counts

    _, route = bound_route
    before = ledger_counts()
    response = _client_for(MembershipFactory().user).post(f"/admin/routes/route/{route.pk}/dry-run/",
                                                          {"dry_run": "退款要几天？"})
    assert response.status_code == 302
    assert response["Location"] == "/admin/"
    assert ledger_counts() == before


def test_a_dry_run_posted_in_a_popup_answers_the_popup(bound_route):
    """The route page opened from a related-object "+"/pencil keeps its popup after a dry run (its
    form still carries _popup, so saving closes the popup)."""
    membership, route = bound_route
    client = _client_for(membership.user)
    page = client.get(f"/admin/routes/route/{route.pk}/change/", {"_popup": "1"}).content.decode()
    [action] = re.findall(r'<form method="post" action="([^"]*)" class="bh-dry-run-form"', page)
    response = client.post(action.split("#")[0], {"dry_run": "退款要几天？"})
    assert response.status_code == 200
    assert response.context["is_popup"] is True
    assert response.context["dry_run"].entries[0].title == "refund.md"


def test_past_the_select_limit_a_binding_row_picks_its_knowledge_base_by_searching(owner_route, model, monkeypatch):
    """A project of many KBs: no row lists them all, and no row reads its KB again."""
    from apps.knowledge.services import route_knowledge_bind
    from apps.runtime import admin as runtime_admin

    monkeypatch.setattr(runtime_admin, "BINDING_CHOICES_MAX", 2, raising=False)
    membership, route = owner_route
    kbs = [_kb(route.project, model, f"kb-{n}") for n in range(5)]
    client = _client_for(membership.user)
    url = f"/admin/routes/route/{route.pk}/change/"
    route_knowledge_bind(route=route, knowledge_base=kbs[0])
    client.get(url)
    with CaptureQueriesContext(connection) as one:
        client.get(url)
    for kb in kbs[1:4]:
        route_knowledge_bind(route=route, knowledge_base=kb)
    with CaptureQueriesContext(connection) as four:
        page = client.get(url).content.decode()
    assert len(four.captured_queries) == len(one.captured_queries)
    selects = re.findall(r'<select name="knowledge_bindings-(?:\d+|__prefix__)-knowledge_base".*?</select>', page, re.S)
    assert len(selects) == 6  # four rows, the new one and the template for more
    assert all(f'data-ajax--url="/admin/autocomplete/?project={route.project_id}"' in select for select in selects)
    selected = [re.findall(r'<option value="([^"]+)" selected>([^<]*)</option>', select) for select in selects[:4]]
    assert sorted(selected) == sorted([(str(kb.pk), kb.name)] for kb in kbs[:4])
    assert "kb-4" not in page


def test_past_the_select_limit_a_knowledge_base_picked_by_searching_is_bound(owner_route, model, monkeypatch):
    from apps.runtime import admin as runtime_admin

    monkeypatch.setattr(runtime_admin, "BINDING_CHOICES_MAX", 2, raising=False)
    membership, route = owner_route
    kbs = [_kb(route.project, model, f"kb-{n}") for n in range(3)]
    foreign = _kb(ProjectFactory(), model, "别人的知识库")
    client = _client_for(membership.user)
    refused = client.post(f"/admin/routes/route/{route.pk}/change/",
                          _route_form(route, [{"knowledge_base": str(foreign.pk)}]))
    assert refused.status_code == 200
    assert _bound(route) == []
    response = client.post(f"/admin/routes/route/{route.pk}/change/",
                           _route_form(route, [{"knowledge_base": str(kbs[2].pk)}]))
    assert response.status_code == 302
    assert _bound(route) == ["kb-2"]


def test_past_the_select_limit_a_binding_rows_search_offers_only_the_routes_projects_knowledge_bases(
        owner_route, model, monkeypatch):
    """An operator of two projects searching a route's binding row: the other project's KBs, which
    the row would refuse, are not offered."""
    from apps.runtime import admin as runtime_admin

    monkeypatch.setattr(runtime_admin, "BINDING_CHOICES_MAX", 2, raising=False)
    membership, route = owner_route
    other = MembershipFactory(user=membership.user, role=Membership.Role.OWNER).project
    for name in ("售后政策 a", "售后政策 b", "售后政策 c"):
        _kb(route.project, model, name)
    _kb(other, model, "售后政策 另一个项目")
    client = _client_for(membership.user)
    page = client.get(f"/admin/routes/route/{route.pk}/change/").content.decode()
    urls = set(re.findall(r'data-ajax--url="([^"]+)"', page))
    assert urls == {f"/admin/autocomplete/?project={route.project_id}"}
    search = {"app_label": "knowledge", "model_name": "routeknowledgebinding", "field_name": "knowledge_base",
              "term": "售后"}
    found = client.get("/admin/autocomplete/", {**search, "project": str(route.project_id)})
    assert [result["text"] for result in found.json()["results"]] == ["售后政策 a", "售后政策 b", "售后政策 c"]
    elsewhere = client.get("/admin/autocomplete/", {**search, "project": str(other.pk)})
    assert [result["text"] for result in elsewhere.json()["results"]] == ["售后政策 另一个项目"]
    stranger = client.get("/admin/autocomplete/", {**search, "project": str(ProjectFactory().pk)})
    assert stranger.status_code == 200 and stranger.json()["results"] == []
    for hostile in ("not-a-uuid", "\x00", "1" * 40):
        response = client.get("/admin/autocomplete/", {**search, "project": hostile})
        assert response.status_code == 200 and response.json()["results"] == []


def test_the_knowledge_base_search_of_a_binding_row_finds_only_the_operators_knowledge_bases(owner_route, model):
    membership, route = owner_route
    for name in ("售后政策 b", "售后政策 a", "售后政策 c"):
        _kb(route.project, model, name)
    _kb(ProjectFactory(), model, "售后政策 别人的")
    response = _client_for(membership.user).get("/admin/autocomplete/", {
        "app_label": "knowledge", "model_name": "routeknowledgebinding", "field_name": "knowledge_base",
        "term": "售后"})
    assert response.status_code == 200
    # In name order, as the results are paged through.
    assert [result["text"] for result in response.json()["results"]] == ["售后政策 a", "售后政策 b", "售后政策 c"]


def test_the_add_page_shows_no_profile_revision_of_a_route_not_yet_saved():
    """A new route's id is set before it is saved: the page showed the revision of a route that
    does not exist."""
    membership = MembershipFactory(role=Membership.Role.EDITOR)
    page = _client_for(membership.user).get("/admin/routes/route/add/")
    assert page.status_code == 200
    field = re.search(r'<div class="readonly">([^<]*)</div>', page.content.decode().split("Profile revision", 1)[1])
    assert field is not None and field.group(1) == "—"
    assert not re.search(r"\b[0-9a-f]{64}\b", page.content.decode())
    assert Route.objects.count() == 0
