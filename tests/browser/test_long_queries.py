"""The longest query the forms allow, 2000 CJK characters, typed into the search playground, the
RAG Ask page and a route's dry-run panel and submitted, under pytest-django's live server and under
gunicorn as `make run` starts it. Percent-encoded that is 18 KB: no GET of it passes gunicorn's request line limit
(4094 bytes, 8190 at most), so the forms and the playground's buttons post it."""

from __future__ import annotations

import http.client
import json
import re
import uuid
from types import SimpleNamespace
from urllib.parse import urlencode

import pytest

from apps.knowledge.models import PlaygroundQuery
from apps.knowledge.services import route_knowledge_bind
from apps.ledger.models import RagQuery
from tests.browser.conftest import browser_page, session_signed_in
from tests.gunicorn_server import gunicorn_start
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts
from tests.knowledge.test_admin_search import POLICY
from tests.routes.factories import RouteFactory

LONG_QUERY = ("自签收之日起七天内商品完好可申请无理由退款换货不收取费用" * 100)[:2000]


@pytest.fixture(scope="module")
def gunicorn_port(django_db_setup, django_db_blocker, tmp_path_factory):
    # Plain HTTP to 127.0.0.1: the cookies may not be Secure whatever DEBUG says.
    process, port = gunicorn_start("bailinghub.gunicorn", log=tmp_path_factory.mktemp("gunicorn") / "access.log",
                                   extra_env={"SESSION_COOKIE_SECURE": "false", "CSRF_COOKIE_SECURE": "false"})
    try:
        yield port
    finally:
        process.terminate()
        process.wait(30)


@pytest.fixture
def live_server_url(live_server) -> str:
    return live_server.url


@pytest.fixture
def gunicorn_url(gunicorn_port) -> str:
    return f"http://127.0.0.1:{gunicorn_port}"


@pytest.fixture(params=["live_server_url", "gunicorn_url"])
def console(request, browser, operator):
    """A page signed in as the operator, on each server. The session is made here (gunicorn's
    password hasher is not the tests' fast one) and handed to the browser as its cookie."""
    base_url = request.getfixturevalue(request.param)
    with browser_page(request, browser, base_url) as page:
        session_signed_in(page, operator, base_url)
        yield page


@pytest.fixture
def kb(project):
    kb = KnowledgeBaseFactory(project=project, name="After-sales")
    ingest_texts(kb, {"policy.md": POLICY})
    return kb


@pytest.fixture
def route(project, kb):
    route = RouteFactory(project=project, key="store-assistant", name="门店助手", knowledge_enabled=True)
    route_knowledge_bind(route=route, knowledge_base=kb)
    return route


def _search_url(kb) -> str:
    return f"/admin/knowledge/knowledgebase/{kb.pk}/search/"


def _ask_url(kb) -> str:
    return f"/admin/ledger/ragquery/ask/{kb.pk}/"


def _submit(page, selector: str, path: str) -> int:
    """Click `selector`; the status of the POST to `path` it sends."""
    with page.expect_response(lambda r: r.request.method == "POST" and r.url.endswith(path)) as response:
        page.click(selector)
    return response.value.status


def test_a_query_of_2000_chinese_characters_is_searched_in_the_playground(console, kb):
    page = console
    page.goto(_search_url(kb))
    page.fill("input[name=query]", LONG_QUERY)
    assert _submit(page, "#pg-form input[type=submit]", _search_url(kb)) == 200
    page.wait_for_selector("#pg-results")
    assert page.locator(".pg-hit").count() == 4
    assert page.input_value("input[name=query]") == LONG_QUERY
    assert list(PlaygroundQuery.objects.values_list("query", flat=True)) == [LONG_QUERY]


def test_the_playgrounds_buttons_carry_a_query_of_2000_chinese_characters(console, kb):
    page = console
    page.goto(_search_url(kb))
    page.fill("input[name=query]", LONG_QUERY)
    page.click("#pg-form input[type=submit]")
    page.wait_for_selector("#pg-results")
    page.fill("input[name=query]", "")  # the button, not the form, must bring the query back

    assert _submit(page, "#pg-recent .pg-rerun", _search_url(kb)) == 200
    page.wait_for_selector("#pg-results")
    assert page.input_value("input[name=query]") == LONG_QUERY
    assert page.locator(".pg-hit").count() == 4

    assert _submit(page, "#pg-rag-mode button", _ask_url(kb)) == 200
    page.wait_for_selector("#rag-result")
    assert page.input_value("input[name=question]") == LONG_QUERY
    assert list(PlaygroundQuery.objects.values_list("query", flat=True)) == [LONG_QUERY]


def test_a_question_of_2000_chinese_characters_is_asked_on_the_rag_page(console, kb):
    page = console
    page.goto(_ask_url(kb))
    page.fill("input[name=question]", LONG_QUERY)
    assert _submit(page, "#rag-ask-form input[type=submit]", _ask_url(kb)) == 200
    page.wait_for_selector("#rag-result")
    assert page.inner_text("#rag-result .rag-badge") == "answered"
    assert page.input_value("input[name=question]") == LONG_QUERY
    assert RagQuery.objects.count() == 0


def test_a_dry_run_of_2000_chinese_characters_runs_on_the_route_page(console, route):
    """The dry-run panel sent its question in the URL: under gunicorn, 414 "URI Too Long" for any
    question past about 450 Chinese characters, though the field takes 2000."""
    page = console
    page.goto(f"/admin/routes/route/{route.pk}/change/")
    page.fill("#id_dry_run", LONG_QUERY)
    with page.expect_navigation() as navigation:
        page.click("#dry-run input[type=submit]")
    assert navigation.value.status == 200
    page.wait_for_selector("[data-dry-run-result]")
    assert page.locator("[data-dry-run-result] article.bh-entry").count() >= 1
    assert page.input_value("#id_dry_run") == LONG_QUERY


@pytest.mark.parametrize(("path", "field"), [(_search_url, "query"), (_ask_url, "question")])
def test_gunicorn_refuses_the_same_query_in_a_url(gunicorn_port, path, field):
    # Why the forms post: this is the page an operator got when they sent it by GET.
    conn = http.client.HTTPConnection("127.0.0.1", gunicorn_port, timeout=30)
    conn.request("GET", path(SimpleNamespace(pk=uuid.uuid4())) + "?" + urlencode({field: LONG_QUERY}))
    response = conn.getresponse()
    body = response.read()
    conn.close()
    assert response.status == 414
    assert re.fullmatch(r"URI Too Long: Request Line is too large \(\d+ > 4094\)", json.loads(body)["message"])
