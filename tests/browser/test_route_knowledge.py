"""Journey 6 in Chromium: on a route's page the operator binds knowledge bases (seeing each one's
embedding model and ready state), sets the knowledge settings and dry-runs a turn's knowledge."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from apps.knowledge.models import RouteKnowledgeBinding
from apps.ledger.models import Conversation, Message, Run
from apps.routes.models import Route
from tests.knowledge.factories import EmbeddingModelFactory, KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts
from tests.routes.factories import RouteFactory

SHOTS = Path("/tmp/shots")


def _follow(page, target) -> None:
    """Click a link or submit button and wait until the next page has loaded."""
    with page.expect_navigation():
        target.click()
REFUND = "# 售后政策\n\n## 退款\n\n自签收之日起七天内可以无理由退货，商品须保持完好。退款三个工作日内原路退回。"
DELIVERY = "# 配送说明\n\n同城订单当天送达，外地订单三到五天送达。"


@pytest.fixture
def route(project):
    return RouteFactory(project=project, key="store-assistant", name="门店助手", knowledge_enabled=False)


@pytest.fixture
def kbs(project):
    model = EmbeddingModelFactory(name="hashing-32")
    policies = KnowledgeBaseFactory(project=project, name="售后政策", embedding_model=model)
    delivery = KnowledgeBaseFactory(project=project, name="配送", embedding_model=model)
    ingest_texts(policies, {"refund.md": REFUND})
    ingest_texts(delivery, {"delivery.md": DELIVERY})
    return policies, delivery


@pytest.fixture
def foreign_kb(transactional_db, kbs):
    from tests.projects.factories import ProjectFactory

    return KnowledgeBaseFactory(project=ProjectFactory(name="Other project"), name="别人的知识库",
                                embedding_model=kbs[0].embedding_model)


def _open(page, route):
    page.goto(f"/admin/routes/route/{route.pk}/change/")
    return page


def _bind(page, names):
    for n, name in enumerate(names):
        if n >= page.locator("#knowledge_bindings-group tr.form-row:not(.empty-form)").count():
            page.locator("#knowledge_bindings-group .add-row a").click()
        page.select_option(f"#id_knowledge_bindings-{n}-knowledge_base", label=f"{name} · hashing-32")


def test_an_operator_binds_two_knowledge_bases_and_turns_knowledge_on(logged_in_page, route, kbs, foreign_kb):
    page = _open(logged_in_page, route)
    options = page.locator("#id_knowledge_bindings-0-knowledge_base option").all_inner_texts()
    assert options[0] == "---------"
    assert sorted(options[1:]) == sorted(["配送 · hashing-32", "售后政策 · hashing-32"])  # not 别人的知识库
    _bind(page, ["售后政策", "配送"])
    page.check("#id_knowledge_enabled")
    page.fill("#id_knowledge_top_k", "3")
    _follow(page, page.locator("input[name=_continue]"))

    assert "was changed successfully" in page.locator(".messagelist .success").inner_text()
    assert sorted(RouteKnowledgeBinding.objects.filter(route=route).values_list("knowledge_base__name", flat=True)
                  ) == ["售后政策", "配送"]
    route.refresh_from_db()
    assert (route.knowledge_enabled, route.knowledge_top_k) == (True, 3)
    rows = page.locator("#knowledge_bindings-group tr.has_original")
    assert rows.count() == 2
    for n in range(2):
        text = rows.nth(n).inner_text()
        assert "hashing-32 (32 dims)" in text
        assert "ready (generation #1)" in text
        assert "1 of 1 completed" in text


def test_a_dry_run_shows_the_bound_sources_and_a_sample_turns_knowledge(logged_in_page, route, kbs):
    from apps.knowledge.services import route_knowledge_bind
    from apps.routes.services import route_update

    route_update(route=route, knowledge_enabled=True)
    for kb in kbs:
        route_knowledge_bind(route=route, knowledge_base=kb)
    page = _open(logged_in_page, route)
    panel = page.locator("#dry-run")
    assert panel.locator("[data-sources]").inner_text() == "2"
    page.fill("#id_dry_run", "退款要几天？")
    _follow(page, panel.locator("input[type=submit]"))

    result = page.locator("[data-dry-run-result]")
    assert result.locator("article.bh-entry").first.locator("strong").inner_text() == "refund.md"
    assert "退款三个工作日内原路退回" in result.locator("article.bh-entry pre").first.inner_text()
    # An entry's box stops at 24em and scrolls: the keyboard reaches it (axe scrollable-region-focusable).
    assert result.locator("article.bh-entry pre").first.get_attribute("tabindex") == "0"
    assert page.url.endswith("#dry-run")
    assert (Conversation.objects.count(), Message.objects.count(), Run.objects.count()) == (0, 0, 0)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "route_knowledge.png"), full_page=True)
    result.scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "route_dry_run.png"))


def test_an_empty_dry_run_question_is_explained_next_to_the_field(logged_in_page, route, kbs):
    page = _open(logged_in_page, route)
    _follow(page, page.locator("#dry-run input[type=submit]"))
    assert page.locator("#dry-run .errorlist").inner_text() == (
        "Type a question to see the knowledge a turn would carry.")
    assert page.locator("[data-dry-run-result]").count() == 0


def test_unbinding_a_knowledge_base_from_the_route_page(logged_in_page, route, kbs):
    from apps.knowledge.services import route_knowledge_bind

    for kb in kbs:
        route_knowledge_bind(route=route, knowledge_base=kb)
    page = _open(logged_in_page, route)
    delivery = kbs[1]
    row = page.locator(f"#knowledge_bindings-group tr.has_original:has(option[selected][value='{delivery.pk}'])")
    row.locator("input[type=checkbox][name$=DELETE]").check()
    _follow(page, page.locator("input[name=_continue]"))
    assert "was changed successfully" in page.locator(".messagelist .success").inner_text()
    assert list(RouteKnowledgeBinding.objects.filter(route=route).values_list("knowledge_base__name", flat=True)) == [
        "售后政策"]
    assert Route.objects.get(pk=route.pk).name == "门店助手"


def test_a_long_knowledge_base_name_does_not_push_the_route_page_wider_than_the_window(logged_in_page, route, kbs):
    policies, _ = kbs
    KnowledgeBaseFactory(project=route.project, name="Policies " + "x" * 190, embedding_model=policies.embedding_model)
    page = logged_in_page
    page.goto(f"/admin/routes/route/{route.pk}/change/")
    page.locator("text=Add another Knowledge base this route reads").click()
    table = page.locator(".inline-group .tabular table").first
    last_column = table.locator("thead th").last.bounding_box()
    group = page.locator(".inline-group").first.bounding_box()
    assert last_column is not None and group is not None
    assert last_column["x"] + last_column["width"] <= group["x"] + group["width"] + 1  # every column in view
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth") is True


def test_the_route_saves_after_a_dry_run(logged_in_page, route, kbs):
    """The dry run posts to a page of its own; the route's form on the page it answers still saves
    the route, and a second dry run still runs."""
    page = _open(logged_in_page, route)
    page.fill("#id_dry_run", "退款要几天？")
    _follow(page, page.locator("#dry-run input[type=submit]"))
    assert page.locator("[data-dry-run-result]").count() == 1
    page.fill("#id_name", "门店助手 2")
    _follow(page, page.locator("input[name=_continue]"))
    assert "was changed successfully" in page.locator(".messagelist .success").inner_text()
    assert Route.objects.get(pk=route.pk).name == "门店助手 2"
    page.fill("#id_dry_run", "送达要几天？")
    _follow(page, page.locator("#dry-run input[type=submit]"))
    assert page.locator("[data-dry-run-result] p strong[data-entries]").count() == 1


def test_the_add_page_says_where_knowledge_bases_are_bound_once_the_route_is_saved(logged_in_page, route):
    """The Knowledge help promised knowledge bases "bound below" and "the dry-run panel at the bottom
    of the page" on the add page too, which has neither: both appear once the route is saved."""
    page = logged_in_page
    page.goto("/admin/routes/route/add/")
    help_text = page.locator("fieldset", has=page.locator("input[name=knowledge_enabled]")).locator(
        ".description").inner_text()
    assert help_text == ("How a turn searches the knowledge bases this route reads. Save the route first: its "
                         "page then binds them and dry-runs a turn.")
    assert page.locator("#dry-run").count() == 0
    assert page.locator("#knowledge_bindings-group").count() == 0

    page.goto(f"/admin/routes/route/{route.pk}/change/")
    help_text = page.locator("fieldset", has=page.locator("input[name=knowledge_enabled]")).locator(
        ".description").inner_text()
    assert "try it in the dry-run panel at the bottom of the page" in help_text
    assert page.locator("#dry-run").count() == 1


def test_past_the_select_limit_a_knowledge_base_is_found_by_searching_the_routes_project_only(
        logged_in_page, route, kbs, operator, monkeypatch):
    """An operator of two projects: searching a binding row offers this route's project's KBs only
    (the other project's would be refused on save), and the one picked is bound."""
    from apps.projects.models import Membership
    from apps.runtime import admin as runtime_admin
    from tests.projects.factories import MembershipFactory

    monkeypatch.setattr(runtime_admin, "BINDING_CHOICES_MAX", 1)
    elsewhere = MembershipFactory(user=operator, role=Membership.Role.OWNER).project
    KnowledgeBaseFactory(project=elsewhere, name="售后政策 (另一个项目)", embedding_model=kbs[0].embedding_model)
    page = _open(logged_in_page, route)
    page.locator("#knowledge_bindings-group .field-knowledge_base .select2-selection").first.click()
    page.locator(".select2-search__field").fill("售后")
    options = page.locator(".select2-results__option:not(.loading-results)")
    # The search answers as typed: the list is right once it shows the whole term's answer.
    expect(options).to_have_text(["售后政策"])
    options.first.click()
    _follow(page, page.locator("input[name=_continue]"))
    assert list(RouteKnowledgeBinding.objects.filter(route=route).values_list("knowledge_base__name", flat=True)) \
        == ["售后政策"]


def test_on_a_phone_the_dry_runs_advice_to_bind_a_knowledge_base_wraps(logged_in_page, project):
    """The advice, a sentence in a badge kept on one line, made the page 458 px wide at 390."""
    bare = RouteFactory(project=project, key="hr-helpdesk", name="HR Helpdesk", knowledge_enabled=True)
    page = logged_in_page
    page.set_viewport_size({"width": 390, "height": 844})
    _open(page, bare)
    advice = page.locator(".bh-dry-run-summary .bh-warn")
    assert advice.inner_text() == "Bind a knowledge base above, or turns carry no knowledge."
    assert advice.evaluate("e => e.getBoundingClientRect().right") <= page.locator("#dry-run").evaluate(
        "e => e.getBoundingClientRect().right")
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
