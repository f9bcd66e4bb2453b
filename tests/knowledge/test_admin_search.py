"""The search playground on a KB's admin page: its form's POST (or a GET with the form's
parameters, for a short link) runs knowledge_search with explain and shows hits with breadcrumbs,
escaped and highlighted content, and each channel's ranks and scores."""

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from apps.knowledge.playground import highlight
from apps.projects.models import Membership
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts
from tests.projects.factories import MembershipFactory

pytestmark = pytest.mark.django_db

POLICY = (
    "# 售后政策\n\n本政策适用于所有门店。\n\n"
    "## 退款\n\n退款需要提供购物凭证。\n\n"
    "### 七天无理由\n\n自签收之日起七天内，商品完好可申请无理由退款。\n\n"
    "## 换货\n\n换货不收取费用。"
)


@pytest.fixture
def viewer():
    return MembershipFactory(role=Membership.Role.VIEWER)


@pytest.fixture
def browser(viewer) -> Client:
    client = Client()
    client.force_login(viewer.user)
    return client


@pytest.fixture
def policy_kb(viewer):
    kb = KnowledgeBaseFactory(project=viewer.project)
    ingest_texts(kb, {"policy.md": POLICY})
    return kb


def _url(kb) -> str:
    return f"/admin/knowledge/knowledgebase/{kb.pk}/search/"


def _hit_count(page: str) -> int:
    return len(re.findall(r'class="module pg-hit"', page))


def _search_queries(queries) -> list[str]:
    return [q["sql"] for q in queries if "knowledge_chunk" in q["sql"] or "knowledge_keywordtermstat" in q["sql"]]


def test_a_bare_get_shows_the_empty_form_with_defaults_and_runs_no_search(browser, policy_kb):
    with CaptureQueriesContext(connection) as queries:
        response = browser.get(_url(policy_kb))
    page = response.content.decode()
    assert response.status_code == 200
    assert '<option value="hybrid" selected>' in page
    assert 'name="top_k" value="5"' in page
    assert 'id="pg-results"' not in page
    assert _search_queries(queries) == []
    # The box's limit is said (the browser cuts a longer paste without a word).
    assert 'maxlength="2000"' in page
    assert '<div class="help">At most 2,000 characters: a longer paste is cut there.</div>' in page


def test_a_viewer_sees_hits_with_their_chapter_path_and_marked_terms(browser, policy_kb):
    response = browser.get(_url(policy_kb), {"query": "无理由退款", "top_k": "1"})
    page = response.content.decode()
    assert response.status_code == 200
    assert _hit_count(page) == 1
    assert 'data-chapter-path="售后政策 / 退款 / 七天无理由"' in page
    assert ('<span class="pg-crumb"><bdi>售后政策</bdi></span><span class="pg-sep">›</span>'
            '<span class="pg-crumb"><bdi>退款</bdi></span><span class="pg-sep">›</span>'
            '<span class="pg-crumb"><bdi>七天无理由</bdi></span>') in page
    assert "商品完好可申请<mark>无理由退款</mark>。" in page


def test_a_search_shows_each_channels_explanation_and_the_timings(browser, policy_kb):
    page = browser.get(_url(policy_kb), {"query": "无理由退款", "top_k": "1"}).content.decode()
    explain = re.search(r'<table class="pg-explain">(.*?)</table>', page, re.S).group(1)
    cells = [re.sub(r"\s+", " ", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", explain, re.S)]
    assert cells[0:2] == ["vector (cosine)", "1"] and re.fullmatch(r"0\.\d{4}", cells[2])
    assert cells[3:5] == ["keyword (BM25)", "1"] and re.fullmatch(r"\d+\.\d{4}", cells[5])
    assert cells[6:9] == ["fused", "", "1.0000"]
    assert cells[9] == "dense weight" and re.fullmatch(r"0\.\d\d", cells[11])
    assert cells[12:14] == ["matched terms", "无, 无理, 款, 理, 理由, 由, 由退, 退, 退款"]
    assert cells[14] == "merged chunks" and cells[15].startswith("1:")
    assert "(hybrid, top 1)." in page
    assert re.search(r"Timings:\s+keyword [\d.]+ ms · query embedding [\d.]+ ms · vector [\d.]+ ms · "
                     r"fusion [\d.]+ ms · total [\d.]+ ms", page)


def test_html_in_a_document_is_shown_escaped_with_marks_only_around_terms(browser, viewer):
    kb = KnowledgeBaseFactory(project=viewer.project)
    ingest_texts(kb, {"page.txt": "Click <script>alert(1)</script> to get a refund & more."})
    page = browser.get(_url(kb), {"query": "alert amp", "mode": "keyword"}).content.decode()
    assert _hit_count(page) == 1
    assert ('<div class="pg-content" tabindex="0"><bdi>Click &lt;script&gt;<mark>alert</mark>(1)&lt;/script&gt; '
            "to get a refund &amp; more.</bdi></div>") in page
    assert "<script>alert(1)</script>" not in page


def test_highlighting_prefers_bigrams_to_their_characters():
    assert highlight("可申请退款。", ["退", "款", "退款"]) == "可申请<mark>退款</mark>。"


def test_highlighting_marks_whole_words_by_stem_in_any_case_and_width_and_never_inside_an_entity():
    text = "Refunds: REFUND & ＲＥＦＵＮＤ <b>refund</b> 退款refund refundable refunder2"
    assert highlight(text, ["refund", "amp", "lt", "b"]) == (
        "<mark>Refunds</mark>: <mark>REFUND</mark> &amp; <mark>ＲＥＦＵＮＤ</mark> "
        "&lt;<mark>b</mark>&gt;<mark>refund</mark>"
        "&lt;/<mark>b</mark>&gt; 退款<mark>refund</mark> <mark>refundable</mark> refunder2"
    )


def test_highlighting_marks_traditional_text_for_a_simplified_query():
    assert highlight("國家的退貨政策", ["国家", "退货", "国", "家"]) == "<mark>國家</mark>的<mark>退貨</mark>政策"


def test_an_invalid_top_k_shows_the_error_and_runs_no_search(browser, policy_kb):
    with CaptureQueriesContext(connection) as queries:
        response = browser.get(_url(policy_kb), {"query": "退款", "top_k": "51"})
    page = response.content.decode()
    assert response.status_code == 200
    assert ('<ul class="errorlist" id="id_top_k_error"><li>Ensure this value is less than or equal to 50.</li></ul>'
            in page)
    assert (_hit_count(page), 'id="pg-results"' in page) == (0, False)
    assert _search_queries(queries) == []


def test_a_missing_query_and_an_out_of_range_threshold_are_both_reported(browser, policy_kb):
    page = browser.get(_url(policy_kb), {"query": "", "score_threshold": "1.5"}).content.decode()
    assert '<ul class="errorlist" id="id_query_error"><li>This field is required.</li></ul>' in page
    assert "Ensure this value is less than or equal to 1.0." in page
    assert _hit_count(page) == 0


def test_a_query_over_2000_characters_is_refused(browser, policy_kb):
    page = browser.get(_url(policy_kb), {"query": "退" * 2001}).content.decode()
    assert "Ensure this value has at most 2000 characters (it has 2001)." in page
    assert _hit_count(page) == 0


def test_a_score_threshold_leaves_out_lower_hits(browser, policy_kb):
    everything = browser.get(_url(policy_kb), {"query": "无理由退款"}).content.decode()
    strict = browser.get(_url(policy_kb), {"query": "无理由退款", "score_threshold": "0.3"}).content.decode()
    assert (_hit_count(everything), _hit_count(strict)) == (4, 2)
    assert "(hybrid, top 5, score ≥ 0.3)." in strict


def test_a_non_member_is_refused_as_on_the_kb_page(policy_kb):
    outsider = MembershipFactory(role=Membership.Role.OWNER)
    client = Client()
    client.force_login(outsider.user)
    change_page = client.get(f"/admin/knowledge/knowledgebase/{policy_kb.pk}/change/")
    with CaptureQueriesContext(connection) as queries:
        response = client.get(_url(policy_kb), {"query": "退款"})
    assert (response.status_code, response["Location"]) == (302, "/admin/")
    assert (change_page.status_code, change_page["Location"]) == (302, "/admin/")
    assert _search_queries(queries) == []


def test_an_anonymous_visitor_is_sent_to_the_login_page(policy_kb):
    response = Client().get(_url(policy_kb), {"query": "退款"})
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/?next=")


def test_the_playground_answers_get_and_post_only(browser, policy_kb):
    response = browser.put(_url(policy_kb), "query=退款", content_type="application/x-www-form-urlencoded")
    assert (response.status_code, response["Allow"]) == (405, "GET, HEAD, POST")


# The form posts: a query of 2000 CJK characters is 18 KB percent-encoded, past any request line
# gunicorn accepts (tests/browser/test_long_queries.py searches one through gunicorn).
LONG_QUERY = ("自签收之日起七天内商品完好可申请无理由退款换货不收取费用" * 100)[:2000]


def _recorded() -> list[str]:
    from apps.knowledge.models import PlaygroundQuery

    return list(PlaygroundQuery.objects.values_list("query", flat=True))


def test_the_form_posts_to_the_playground_with_a_csrf_token(browser, policy_kb):
    page = browser.get(_url(policy_kb)).content.decode()
    form = re.search(r'<form method="post" action="([^"]*)" class="pg-form module" id="pg-form">\s*'
                     r'<input type="hidden" name="csrfmiddlewaretoken"', page)
    assert form.group(1) == _url(policy_kb)


def test_a_posted_search_shows_its_hits_and_is_recorded(browser, policy_kb):
    response = browser.post(_url(policy_kb), {"query": "无理由退款", "top_k": "1"})
    page = response.content.decode()
    assert response.status_code == 200
    assert _hit_count(page) == 1
    assert "商品完好可申请<mark>无理由退款</mark>。" in page
    assert "(hybrid, top 1)." in page
    assert _recorded() == ["无理由退款"]


def test_a_posted_query_of_2000_chinese_characters_is_searched(browser, policy_kb):
    response = browser.post(_url(policy_kb), {"query": LONG_QUERY})
    page = response.content.decode()
    assert response.status_code == 200
    assert 'class="errorlist' not in page
    assert _hit_count(page) == 4
    assert f'name="query" value="{LONG_QUERY}"' in page
    assert _recorded() == [LONG_QUERY]


@pytest.mark.parametrize(("data", "message"), [
    ({"query": ""}, "This field is required."),
    ({"query": "   "}, "This field is required."),
    ({}, "This field is required."),
    ({"query": LONG_QUERY + "退"}, "Ensure this value has at most 2000 characters (it has 2001)."),
    ({"query": "退款", "top_k": "0"}, "Ensure this value is greater than or equal to 1."),
    ({"query": "退款", "top_k": "five"}, "Enter a whole number."),
    ({"query": "退款", "score_threshold": "-1.5"}, "Ensure this value is greater than or equal to -1.0."),
    ({"query": "退款", "score_threshold": "high"}, "Enter a number."),
    ({"query": "退款", "mode": "fuzzy"}, "Select a valid choice. fuzzy is not one of the available choices."),
])
def test_an_invalid_posted_search_shows_its_error_and_runs_and_records_nothing(browser, policy_kb, data, message):
    with CaptureQueriesContext(connection) as queries:
        response = browser.post(_url(policy_kb), data)
    page = response.content.decode()
    assert response.status_code == 200
    assert "Please correct the errors below; no search was run." in page
    assert f"<li>{message}</li>" in page
    assert (_hit_count(page), 'id="pg-results"' in page) == (0, False)
    assert _search_queries(queries) == []
    assert _recorded() == []


def test_posting_the_same_search_again_records_it_once(browser, policy_kb):
    from apps.knowledge.models import PlaygroundQuery

    for _ in range(2):
        browser.post(_url(policy_kb), {"query": "退款", "mode": "keyword"})
    assert list(PlaygroundQuery.objects.values_list("query", "mode")) == [("退款", "keyword")]


def test_a_post_with_the_pages_csrf_token_is_searched(viewer, policy_kb):
    client = Client(enforce_csrf_checks=True)
    client.force_login(viewer.user)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', client.get(_url(policy_kb)).content.decode())
    response = client.post(_url(policy_kb), {"query": "无理由退款", "top_k": "1",
                                             "csrfmiddlewaretoken": token.group(1)})
    assert response.status_code == 200
    assert _hit_count(response.content.decode()) == 1


def test_a_post_without_the_csrf_token_is_refused_and_records_nothing(viewer, policy_kb):
    client = Client(enforce_csrf_checks=True)
    client.force_login(viewer.user)
    with CaptureQueriesContext(connection) as queries:
        response = client.post(_url(policy_kb), {"query": "退款"})
    assert response.status_code == 403
    assert _search_queries(queries) == []
    assert _recorded() == []


def test_a_non_members_post_is_refused_as_on_the_kb_page(policy_kb):
    outsider = MembershipFactory(role=Membership.Role.OWNER)
    client = Client()
    client.force_login(outsider.user)
    with CaptureQueriesContext(connection) as queries:
        response = client.post(_url(policy_kb), {"query": "退款"})
    assert (response.status_code, response["Location"]) == (302, "/admin/")
    assert _search_queries(queries) == []
    assert _recorded() == []


def test_an_anonymous_post_is_sent_to_the_login_page(policy_kb):
    response = Client().post(_url(policy_kb), {"query": "退款"})
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/?next=")
    assert _recorded() == []


def test_the_kb_page_links_to_the_playground_for_a_viewer(browser, policy_kb):
    page = browser.get(f"/admin/knowledge/knowledgebase/{policy_kb.pk}/change/").content.decode()
    assert f'<a href="{_url(policy_kb)}" id="kb-search-link">Search playground</a>' in page


def test_the_page_runs_the_same_queries_for_one_hit_as_for_five(browser, viewer):
    kb = KnowledgeBaseFactory(project=viewer.project)
    ingest_texts(kb, {f"policy-{n}.md": POLICY for n in range(2)})
    browser.get(_url(kb), {"query": "退款", "top_k": "5"})  # warm caches (content types, embedder)
    with CaptureQueriesContext(connection) as one:
        first = browser.get(_url(kb), {"query": "退款", "top_k": "1"}).content.decode()
    with CaptureQueriesContext(connection) as five:
        second = browser.get(_url(kb), {"query": "退款", "top_k": "5"}).content.decode()
    assert (_hit_count(first), _hit_count(second)) == (1, 5)
    assert len(one.captured_queries) == len(five.captured_queries)


# The index's state, channel ranks and explanations, recent searches


def test_a_kb_with_an_active_index_does_not_say_it_has_none(browser, policy_kb):
    page = browser.get(_url(policy_kb), {"query": "退款"}).content.decode()
    assert _hit_count(page) > 0
    assert "no active index" not in page and 'id="pg-empty-index"' not in page


def test_a_kb_without_an_active_generation_says_so(browser, policy_kb):
    from apps.knowledge.models import IndexGeneration

    IndexGeneration.objects.filter(knowledge_base=policy_kb).update(status="retired")
    page = browser.get(_url(policy_kb), {"query": "退款"}).content.decode()
    assert '<p class="errornote" id="pg-no-index">This knowledge base has no active index yet.</p>' in page
    assert _hit_count(page) == 0


def test_a_kb_whose_index_holds_no_document_yet_says_it_is_empty(browser, viewer):
    kb = KnowledgeBaseFactory(project=viewer.project)
    page = browser.get(_url(kb)).content.decode()
    assert "The active index is empty: no document has finished indexing yet." in page
    assert 'id="pg-no-index"' not in page


def _explain_cells(page: str, rank: int) -> list[str]:
    hit = re.search(rf'<div class="module pg-hit" id="hit-{rank}">(.*?)</table>', page, re.S).group(1)
    return [re.sub(r"\s+", " ", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", hit, re.S)]


def test_keyword_search_ranks_every_chunk_with_a_query_term_on_a_small_kb(browser, policy_kb):
    page = browser.get(_url(policy_kb), {"query": "退款 换货 费用", "mode": "keyword"}).content.decode()
    assert _hit_count(page) == 4
    assert [_explain_cells(page, rank)[4] for rank in range(1, 5)] == ["1", "2", "3", "4"]


def test_a_hybrid_hit_shows_its_keyword_rank_not_a_dash(browser, policy_kb):
    page = browser.get(_url(policy_kb), {"query": "门店政策"}).content.decode()
    ranks = sorted(_explain_cells(page, rank)[4] for rank in range(1, 5))
    assert ranks == ["1", "2", "3", "4"]


def test_each_hit_explains_itself_in_a_sentence(browser, policy_kb):
    page = browser.get(_url(policy_kb), {"query": "无理由退款", "top_k": "1"}).content.decode()
    why = re.search(r'<p class="pg-why">(.*?)</p>', page, re.S).group(1)
    assert re.fullmatch(r"Ranked 1st by meaning \(cosine 0\.\d{3}\) and 1st by keywords \(BM25 \d+\.\d\d, "
                        r"matching 无, 无理, 款, 理, 理由, 由, 由退, 退, 退款\); fused 1\.000 = 0\.\d\d × meaning \+ "
                        r"0\.\d\d × keywords, each scaled to the best candidate and blended with those of its "
                        r"best sentence window \(cosine 0\.\d{3}, BM25 \d+\.\d\d\)\.", why)


def test_a_traditional_query_sees_its_matched_terms_as_it_wrote_them(browser, policy_kb):
    """The index reads 退貨 as 退货; the operator who typed 退貨 reads 退貨 back."""
    page = browser.get(_url(policy_kb), {"query": "無理由退款", "top_k": "1"}).content.decode()
    why = re.search(r'<p class="pg-why">(.*?)</p>', page, re.S).group(1)
    assert "matching 無, 無理, 款, 理, 理由, 由, 由退, 退, 退款)" in why
    assert "matched terms</td><td colspan=\"2\">無, 無理, 款, 理, 理由, 由, 由退, 退, 退款</td>" in page


def test_matched_terms_are_shown_as_the_query_writes_them():
    from apps.knowledge.playground import terms_as_typed

    assert terms_as_typed(["货", "费", "运", "运费", "退", "退货"], "退貨 運費") == [
        "貨", "費", "運", "運費", "退", "退貨"]
    assert terms_as_typed(["refund", "退货"], "Refunds 退貨") == ["Refund", "退貨"]  # the stem, in the query's case
    assert terms_as_typed(["polici"], "the policy") == ["polici"]  # a stem the query does not spell
    assert terms_as_typed(["国"], "ＡＢ國") == ["國"]  # NFKC keeps the length: still aligned
    assert terms_as_typed(["kg", "国"], "㎏國") == ["kg", "国"]  # NFKC changes it: shown as matched


def _recent(page: str) -> list[tuple[str, str, dict[str, str]]]:
    """(query shown, where its "Run again" form posts, the fields it posts) per recent search."""
    rows = re.findall(r'<td class="pg-recent-query"><bdi>(.*?)</bdi></td>.*?'
                      r'<form method="post" action="([^"]*)">(.*?)</form>', page, re.S)
    return [(query, action, dict(re.findall(r'<input type="hidden" name="(?!csrfmiddlewaretoken)([^"]+)" '
                                            r'value="([^"]*)">', fields)))
            for query, action, fields in rows]


def test_the_operators_searches_are_listed_newest_first_with_a_button_to_run_again(browser, policy_kb):
    browser.get(_url(policy_kb), {"query": "退款", "mode": "keyword", "top_k": "3"})
    page = browser.post(_url(policy_kb), {"query": "换货", "score_threshold": "0.2"}).content.decode()
    assert _recent(page) == [
        ("换货", _url(policy_kb), {"query": "换货", "mode": "hybrid", "top_k": "5", "score_threshold": "0.2"}),
        ("退款", _url(policy_kb), {"query": "退款", "mode": "keyword", "top_k": "3"}),
    ]


def test_running_a_recent_search_again_runs_it_with_its_parameters(browser, policy_kb):
    browser.post(_url(policy_kb), {"query": "退款", "mode": "keyword", "top_k": "1"})
    browser.post(_url(policy_kb), {"query": "换货"})
    fields = {query: fields for query, _, fields in _recent(browser.get(_url(policy_kb)).content.decode())}["退款"]
    page = browser.post(_url(policy_kb), fields).content.decode()
    assert "(keyword, top 1)." in page and _hit_count(page) == 1
    assert [query for query, _, _ in _recent(page)] == ["退款", "换货"]
    assert "<td>just now</td>" in page


def test_the_same_search_again_moves_up_instead_of_repeating(browser, policy_kb):
    from apps.knowledge.models import PlaygroundQuery

    for query in ["退款", "换货", "退款"]:
        browser.get(_url(policy_kb), {"query": query})
    assert list(PlaygroundQuery.objects.values_list("query", flat=True)) == ["退款", "换货"]


def test_only_the_last_ten_searches_are_kept(browser, policy_kb):
    from apps.knowledge.models import PlaygroundQuery

    for n in range(12):
        browser.get(_url(policy_kb), {"query": f"退款 {n}", "mode": "keyword"})
    assert list(PlaygroundQuery.objects.values_list("query", flat=True)) == [f"退款 {n}" for n in range(11, 1, -1)]


def test_another_operator_does_not_see_my_searches(browser, viewer, policy_kb):
    browser.get(_url(policy_kb), {"query": "退款"})
    colleague = MembershipFactory(project=viewer.project, role=Membership.Role.OWNER)
    client = Client()
    client.force_login(colleague.user)
    assert _recent(client.get(_url(policy_kb)).content.decode()) == []


def test_an_invalid_search_is_not_recorded(browser, policy_kb):
    from apps.knowledge.models import PlaygroundQuery

    browser.get(_url(policy_kb), {"query": "退款", "top_k": "99"})
    assert PlaygroundQuery.objects.count() == 0


def test_a_disabled_chunk_leaves_the_playground(browser, viewer, policy_kb):
    from apps.knowledge import services
    from apps.knowledge.models import Chunk

    chunk = Chunk.objects.get(document__knowledge_base=policy_kb, kind="child", text__contains="无理由退款")
    services.chunk_disable(chunk=chunk, user=viewer.user)
    page = browser.get(_url(policy_kb), {"query": "无理由退款", "mode": "keyword"}).content.decode()
    assert "商品完好可申请" not in page
    assert str(chunk.pk) not in page


def test_a_hit_beyond_a_channels_candidates_is_explained_as_such():
    from apps.knowledge.playground import explain_sentence

    explain = {"vector": {"rank": None, "score": 0.5}, "keyword": {"rank": 1, "score": 2.0}, "matched_terms": ["a"],
               "fused_score": 0.4, "dense_weight": 0.6}
    assert explain_sentence(explain, candidate_limit=50) == (
        "Ranked beyond the vector channel's top 50 (cosine 0.500) and 1st by keywords (BM25 2.00, matching a); "
        "fused 0.400 = 0.60 × meaning + 0.40 × keywords, each scaled to the best candidate.")
    explain["window"] = {"cosine": 0.9123, "bm25": 3.4, "blend": "best window"}
    assert explain_sentence(explain, candidate_limit=50).endswith(
        "each scaled to the best candidate and blended with those of its best sentence window (cosine 0.912, "
        "BM25 3.40).")
    # Outside the window pool: its own scores stood in, and the sentence says so.
    explain["window"] = {"cosine": None, "bm25": None, "blend": "own scores"}
    assert explain_sentence(explain, candidate_limit=50).endswith(
        "each scaled to the best candidate, its own scores standing in for a sentence window's (its windows were "
        "not read).")
    explain["window"] = {"cosine": None, "bm25": None, "blend": None}  # a KB without windows
    assert explain_sentence(explain, candidate_limit=50).endswith("each scaled to the best candidate.")
    # A calibrated model: the factor for whether the KB answers at all follows.
    explain["answerability"] = 0.0734
    assert explain_sentence(explain, candidate_limit=50).endswith(
        "each scaled to the best candidate; then × 0.07, how likely the knowledge base answers this question at all.")
    explain["answerability"] = None
    assert explain_sentence(explain, candidate_limit=50).endswith("each scaled to the best candidate.")


def test_a_model_row_with_options_that_are_not_an_object_is_a_configuration_error_not_a_500(browser, policy_kb):
    from apps.knowledge.models import EmbeddingModel

    EmbeddingModel.objects.filter(pk=policy_kb.embedding_model_id).update(options=[1, 2, 3])  # an old row
    response = browser.get(_url(policy_kb), {"query": "无理由退款"})
    assert response.status_code == 200
    assert (f"The search could not run: The options of embedding model {policy_kb.embedding_model.name} must be "
            "a JSON object, like {&quot;batch_size&quot;: 16}, not a list.") in response.content.decode()
    assert _hit_count(response.content.decode()) == 0


def test_a_passage_under_no_heading_says_where_it_is_not_that_a_chapter_is_missing(browser, viewer):
    """h4: "no chapter" in italics on every hit of a flat file read like an error."""
    kb = KnowledgeBaseFactory(project=viewer.project)
    ingest_texts(kb, {"returns.txt": "Rain jackets can be returned within 30 days with the receipt."})
    page = browser.get(_url(kb), {"query": "rain jacket returned", "top_k": "1"}).content.decode()
    assert "top of the document, under no heading</span>" in page
    assert "<em>no chapter</em>" not in page
