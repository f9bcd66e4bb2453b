import re
from datetime import UTC

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.db.models import Count
from django.test import Client
from django.test.utils import CaptureQueriesContext

from apps.knowledge import ingest, services
from apps.knowledge.models import Document, EmbeddingModel, IndexGeneration, KnowledgeBase
from apps.projects.models import Membership, OperatorToken
from tests.knowledge.factories import CostRecordFactory, EmbeddingModelFactory, KnowledgeBaseFactory
from tests.knowledge.helpers import FIXTURES, ingest_texts, upload
from tests.projects.factories import MembershipFactory
from tests.queries import get_statements
from tests.routes.factories import RouteFactory

pytestmark = pytest.mark.django_db


def _completed(kb, name="policy.zh.md"):
    [document] = services.document_upload(kb=kb, files=[upload(name)])
    ingest.document_ingest(document_id=document.pk)
    document.refresh_from_db()
    return document


def _failed_transiently(kb, name="no-text.pdf"):
    """A failed document that another attempt may ingest (its embeddings endpoint was down): one that
    failed on its own bytes is not retried (test_admin_document_retry)."""
    document = _completed(kb, name)
    Document.objects.filter(pk=document.pk).update(status=Document.Status.FAILED, error_code="embedding_failed")
    document.refresh_from_db()
    return document


def test_the_kb_page_shows_documents_with_progress_and_failures_with_reasons(browser, owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    _completed(kb)
    _completed(kb, "no-text.pdf")
    response = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/change/")
    page = response.content.decode()
    assert response.status_code == 200
    assert '<progress class="bh-progress" max="100" value="100"' in page
    failed = Document.objects.get(filename="no-text.pdf")
    reason = re.search(rf'<tr data-document-id="{failed.pk}".*?(<td class="bh-reason".*?</td>)', page, re.S).group(1)
    assert reason == (f'<td class="bh-reason" data-field="error" title="{failed.error_code}">'
                      f"{failed.error_message}</td>")
    assert failed.error_message.startswith("Document conversion failed: The PDF has no extractable text")
    # A scan without text fails the same way on a retry: its row says what to do on its page instead.
    assert f"/admin/knowledge/document/{failed.pk}/retry/" not in page
    assert f'href="/admin/knowledge/document/{failed.pk}/change/#document-fix" class="bh-nowrap"' in page
    assert "Rebuild with the current strategy" in page


def _generation_documents(page: str) -> list[str]:
    """The generations table's Documents cells, in its order."""
    return re.findall(r'<td class="field-progress">\s*<p>(.*?)</p>', page, re.S)


def test_the_active_generation_counts_the_documents_indexed_in_it(browser, owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    url = f"/admin/knowledge/knowledgebase/{kb.pk}/change/"
    assert _generation_documents(browser.get(url).content.decode()) == ["0 indexed"]
    _completed(kb)
    _completed(kb, "products.csv")
    failed = _completed(kb, "no-text.pdf")
    assert failed.status == Document.Status.FAILED  # failed: nothing of it in the index
    assert _generation_documents(browser.get(url).content.decode()) == ["2 indexed"]


def test_the_kb_page_reads_its_generations_in_queries_that_do_not_grow_with_them(browser, owner):

    kb = KnowledgeBaseFactory(project=owner.project)
    _completed(kb)
    url = f"/admin/knowledge/knowledgebase/{kb.pk}/change/"
    active = IndexGeneration.objects.get(knowledge_base=kb)

    def retired(number: int) -> None:
        IndexGeneration.objects.create(knowledge_base=kb, number=number, status="retired",
                                       chunk_strategy=active.chunk_strategy)

    retired(2)
    browser.get(url)  # the process's first page fills caches (content types, say) with queries of its own
    with CaptureQueriesContext(connection) as two:
        browser.get(url)
    retired(3)
    retired(4)
    with CaptureQueriesContext(connection) as four:
        page = browser.get(url).content.decode()
    assert _generation_documents(page) == ["0 indexed", "0 indexed", "0 indexed", "1 indexed"]  # newest first
    assert len(four.captured_queries) == len(two.captured_queries)


def test_the_add_form_starts_on_the_recommended_embedding_model(browser, owner):
    EmbeddingModelFactory()  # a third model: still no reason to start anywhere else
    recommended = EmbeddingModel.objects.get(name="multilingual-e5-small")
    page = browser.get("/admin/knowledge/knowledgebase/add/").content.decode()
    select = page.split('name="embedding_model"')[1].split("</select>")[0]
    assert re.findall(r'<option value="([^"]+)" selected>', select) == [str(recommended.pk)]


def test_creating_a_kb_in_the_admin_goes_through_the_service(browser, owner):
    model = EmbeddingModelFactory()
    response = browser.post("/admin/knowledge/knowledgebase/add/", {
        "project": str(owner.project_id), "name": "售后", "description": "",
        "embedding_model": str(model.pk), "strategy": "by_section", "min_chars": "100", "max_chars": "600",
        "overlap_chars": "0",
        "generations-TOTAL_FORMS": "0", "generations-INITIAL_FORMS": "0",
        "route_bindings-TOTAL_FORMS": "0", "route_bindings-INITIAL_FORMS": "0",
    })
    assert response.status_code == 302, response.content.decode()[:2000]
    kb = KnowledgeBase.objects.get(name="售后")
    assert response["Location"] == f"/admin/knowledge/knowledgebase/{kb.pk}/change/"  # its page, to upload to
    assert (kb.embedding_dim, kb.chunk_strategy) == (32, {"strategy": "by_section", "min_chars": 100,
                                                          "max_chars": 600, "overlap_chars": 0})
    assert IndexGeneration.objects.filter(knowledge_base=kb, status="active").count() == 1


def test_an_invalid_overlap_is_shown_next_to_its_field_and_nothing_is_created(browser, owner):
    response = browser.post("/admin/knowledge/knowledgebase/add/", {
        "project": str(owner.project_id), "name": "售后", "embedding_model": str(EmbeddingModelFactory().pk),
        "strategy": "auto", "min_chars": "0", "max_chars": "400", "overlap_chars": "300",
        "generations-TOTAL_FORMS": "0", "generations-INITIAL_FORMS": "0",
        "route_bindings-TOTAL_FORMS": "0", "route_bindings-INITIAL_FORMS": "0",
    })
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {
        "overlap_chars": ["Must be between 0 and half of the maximum characters."]}
    assert "field-overlap_chars" in response.content.decode()
    assert KnowledgeBase.objects.count() == 0


def test_an_unknown_strategy_is_refused_next_to_the_select(browser, owner):
    response = browser.post("/admin/knowledge/knowledgebase/add/", {
        "project": str(owner.project_id), "name": "售后", "embedding_model": str(EmbeddingModelFactory().pk),
        "strategy": "semantic", "min_chars": "0", "max_chars": "400", "overlap_chars": "0",
        "generations-TOTAL_FORMS": "0", "generations-INITIAL_FORMS": "0",
        "route_bindings-TOTAL_FORMS": "0", "route_bindings-INITIAL_FORMS": "0",
    })
    assert response.status_code == 200
    assert list(response.context["adminform"].form.errors) == ["strategy"]
    assert KnowledgeBase.objects.count() == 0


def test_the_kb_form_explains_each_strategy_and_starts_from_the_defaults(browser, owner):
    page = browser.get("/admin/knowledge/knowledgebase/add/").content.decode()
    assert 'name="chunk_strategy"' not in page
    for name in ("auto", "by_section", "by_paragraph", "fixed", "legacy"):
        assert f"<li><b>{name}</b>:" in page
    assert '<option value="auto" selected>' in page
    assert 'name="max_chars" value="768"' in page


def test_changing_the_strategy_on_the_kb_page_goes_through_the_service(browser, owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    response = browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/change/", {
        "name": kb.name, "description": "", "strategy": "fixed", "min_chars": "0", "max_chars": "300",
        "overlap_chars": "30",
        "generations-TOTAL_FORMS": "0", "generations-INITIAL_FORMS": "1",
        "route_bindings-TOTAL_FORMS": "0", "route_bindings-INITIAL_FORMS": "0",
    })
    assert response.status_code == 302, response.content.decode()[:3000]
    kb.refresh_from_db()
    assert kb.chunk_strategy == {"strategy": "fixed", "min_chars": 0, "max_chars": 300, "overlap_chars": 30}


def test_uploading_on_the_kb_page_queues_documents(browser, owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    with open(FIXTURES / "policy.zh.md", "rb") as first, open(FIXTURES / "plain.txt", "rb") as second:
        response = browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/upload/", {"files": [first, second]})
    assert response.status_code == 302
    assert sorted(Document.objects.filter(knowledge_base=kb).values_list("filename", "status")) == [
        ("plain.txt", "pending"), ("policy.zh.md", "pending")]


def test_an_upload_error_is_shown_and_nothing_is_created(browser, owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    with open(FIXTURES / "broken.json", "rb") as handle:
        response = browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/upload/", {"files": [handle]}, follow=True)
    assert "Not uploaded: broken.json — cannot be read: the file is not valid JSON" in response.content.decode()
    assert Document.objects.count() == 0


def test_a_viewer_cannot_upload_or_rebuild(owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    viewer = MembershipFactory(project=owner.project, role=Membership.Role.VIEWER)
    client = Client()
    client.force_login(viewer.user)
    with open(FIXTURES / "plain.txt", "rb") as handle:
        assert client.post(f"/admin/knowledge/knowledgebase/{kb.pk}/upload/", {"files": [handle]}).status_code == 403
    assert client.post(f"/admin/knowledge/knowledgebase/{kb.pk}/rebuild/").status_code == 403
    assert (Document.objects.count(), IndexGeneration.objects.count()) == (0, 1)


def test_another_projects_kb_is_not_found(browser):
    kb = KnowledgeBaseFactory()
    assert browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/rebuild/").status_code == 404
    assert IndexGeneration.objects.filter(knowledge_base=kb).count() == 1


def test_rebuild_from_the_kb_page_starts_a_generation_and_shows_its_progress(browser, owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/rebuild/")
    assert IndexGeneration.objects.filter(knowledge_base=kb, status="building").count() == 1
    page = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/change/").content.decode()
    assert '#<span data-field="number">2</span>' in page
    assert '<span class="bh-doc-badge bh-gen-building" data-field="status">Building</span>' in page


def test_the_document_page_previews_chunks_with_chapter_paths(browser, owner):
    document = _completed(KnowledgeBaseFactory(project=owner.project))
    page = browser.get(f"/admin/knowledge/document/{document.pk}/change/").content.decode()
    assert "售后政策 / 退款 / 七天无理由" in page
    assert "自签收之日起七天内" in page


def test_the_retry_action_requeues_failed_documents(browser, owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    failed = _failed_transiently(kb)
    done = _completed(kb, "plain.txt")
    browser.post("/admin/knowledge/document/", {"action": "retry_documents",
                                                "_selected_action": [str(failed.pk), str(done.pk)]})
    assert dict(Document.objects.values_list("filename", "status")) == {"no-text.pdf": "queued",
                                                                        "plain.txt": "completed"}


@pytest.mark.parametrize(("failures", "text"), [(["no-text.pdf"], "Queued 1 document."),
                                               (["no-text.pdf", "no-text.pdf"], "Queued 2 documents.")])
def test_the_retry_action_counts_in_words_that_agree_with_the_number(browser, owner, failures, text):
    kb = KnowledgeBaseFactory(project=owner.project)
    ids = [str(_failed_transiently(kb, name).pk) for name in failures]
    response = browser.post("/admin/knowledge/document/", {"action": "retry_documents", "_selected_action": ids})
    assert [str(message) for message in get_messages(response.wsgi_request)] == [text]


def test_an_action_refused_for_a_document_says_why_with_the_services_reason(browser, owner):
    """"Fetch again" on an uploaded file said "Not in a state for this: kettle.txt" (browser audit)."""
    kb = KnowledgeBaseFactory(project=owner.project)
    uploaded = _completed(kb, "plain.txt")
    response = browser.post("/admin/knowledge/document/", {"action": "refetch_documents",
                                                           "_selected_action": [str(uploaded.pk)]})
    assert [str(message) for message in get_messages(response.wsgi_request)] == [
        "Not done for plain.txt: Only a document registered by URL can be fetched again."]
    assert Document.objects.get().status == "completed"


def test_the_document_list_runs_a_fixed_number_of_queries(browser, owner, django_assert_max_num_queries):
    kb = KnowledgeBaseFactory(project=owner.project)
    for _ in range(4):
        _completed(kb, "plain.txt")
    with django_assert_max_num_queries(12):
        response = browser.get("/admin/knowledge/document/")
    assert response.status_code == 200


def test_the_knowledge_base_list_makes_as_many_queries_with_four_kbs_as_with_one(browser, owner):
    _completed(KnowledgeBaseFactory(project=owner.project), "plain.txt")
    with_one = get_statements(browser, "/admin/knowledge/knowledgebase/")
    for _ in range(3):
        _completed(KnowledgeBaseFactory(project=owner.project), "plain.txt")
    assert get_statements(browser, "/admin/knowledge/knowledgebase/") == with_one


def test_the_cost_record_list_makes_as_many_queries_with_four_records_as_with_one(browser, owner):
    route = RouteFactory(project=owner.project)
    CostRecordFactory(knowledge_base=KnowledgeBaseFactory(project=owner.project), route=route)
    with_one = get_statements(browser, "/admin/knowledge/costrecord/")
    for _ in range(3):
        CostRecordFactory(knowledge_base=KnowledgeBaseFactory(project=owner.project), route=route)
    assert get_statements(browser, "/admin/knowledge/costrecord/") == with_one


def test_a_new_operator_token_is_shown_once(browser, owner):
    response = browser.post("/admin/projects/operatortoken/add/", {
        "name": "ci", "scopes": ["knowledge:ingest", "knowledge:debug"]}, follow=True)
    token = OperatorToken.objects.get(name="ci")
    page = response.content.decode()
    assert "copy it now, it will not be shown again" in page
    assert (token.user_id, token.scopes) == (owner.user_id, ["knowledge:debug", "knowledge:ingest"])
    listing = browser.get("/admin/projects/operatortoken/").content.decode()
    assert "copy it now" not in listing


def test_a_superuser_registers_an_embedding_model_without_an_index_across_kbs(admin_client):

    response = admin_client.post("/admin/knowledge/embeddingmodel/add/", {
        "name": "bge-m3-remote", "provider": "openai", "dimension": "1024",
        "options": '{"base_url": "https://embeddings.example.com/v1"}'})
    assert response.status_code == 302
    from apps.knowledge.models import EmbeddingModel

    model = EmbeddingModel.objects.get(name="bge-m3-remote")
    assert (model.provider, model.dimension) == ("openai", 1024)
    with connection.cursor() as cursor:  # indexes are per generation (apps.knowledge.generation_indexes)
        cursor.execute("SELECT count(*) FROM pg_indexes WHERE indexdef LIKE %s", [f"%{model.pk}%"])
        assert cursor.fetchone() == (0,)


def test_a_local_model_at_a_wrong_dimension_is_refused_in_the_admin(admin_client):
    from apps.knowledge.models import EmbeddingModel

    before = EmbeddingModel.objects.count()
    response = admin_client.post("/admin/knowledge/embeddingmodel/add/", {
        "name": "e5-768", "provider": "local", "dimension": "768", "options": "{}"})
    assert response.status_code == 200
    assert "The local provider embeds in 384 dimensions." in response.content.decode()
    assert EmbeddingModel.objects.count() == before


@pytest.mark.parametrize(("options", "kind"), [("[1,2,3]", "a list"), ('"hello"', "a string")])
def test_options_that_are_not_a_json_object_are_refused_in_the_admin(admin_client, options, kind):
    from apps.knowledge.models import EmbeddingModel

    before = EmbeddingModel.objects.count()
    response = admin_client.post("/admin/knowledge/embeddingmodel/add/", {
        "name": "m-bad", "provider": "hashing", "dimension": "32", "options": options})
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {"options": [
        'The options of embedding model m-bad must be a JSON object, like {"batch_size": 16}, not ' + kind + "."]}
    assert EmbeddingModel.objects.count() == before


def test_an_openai_model_without_an_http_base_url_is_refused_in_the_admin(admin_client):
    from apps.knowledge.models import EmbeddingModel

    before = EmbeddingModel.objects.count()
    response = admin_client.post("/admin/knowledge/embeddingmodel/add/", {
        "name": "m3", "provider": "openai", "dimension": "1024", "options": '{"base_url": "javascript:x"}'})
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {
        "options": ["Embedding model m3 needs an http(s) base_url option."]}
    assert EmbeddingModel.objects.count() == before


def test_a_key_in_an_openai_models_options_is_refused_in_the_admin_and_never_shown(admin_client):
    from apps.knowledge.models import EmbeddingModel

    before = EmbeddingModel.objects.count()
    response = admin_client.post("/admin/knowledge/embeddingmodel/add/", {
        "name": "m4", "provider": "openai", "dimension": "1024",
        "options": '{"base_url": "https://api.example.com/v1", "api_key": "sk-audit52SECRET"}'})
    assert response.status_code == 200
    [error] = response.context["adminform"].form.errors["options"]
    assert error.startswith("Unknown option 'api_key': the openai provider takes api_key_env, ")
    assert "name that variable in api_key_env" in error
    assert EmbeddingModel.objects.count() == before
    # The form names the options each provider takes before anyone types one.
    page = admin_client.get("/admin/knowledge/embeddingmodel/add/").content.decode()
    assert "api_key_env (the name of the environment variable that holds the key, never the key" in page


def test_a_document_page_leads_back_to_its_kb_and_says_its_size_in_units(browser, owner):
    kb = KnowledgeBaseFactory(project=owner.project, name="门店知识库")
    document = _completed(kb, "products.csv")
    Document.objects.filter(pk=document.pk).update(size=1536)
    page = browser.get(f"/admin/knowledge/document/{document.pk}/change/").content.decode()
    trail = re.search(r'<div class="breadcrumbs">(.*?)</div>', page, re.S).group(1)
    assert re.findall(r'<a href="([^"]+)">', trail) == [
        "/admin/", "/admin/knowledge/", f"/admin/knowledge/knowledgebase/{kb.pk}/change/",
        f"/admin/knowledge/document/?knowledge_base__id__exact={kb.pk}"]
    assert "门店知识库" in trail
    assert re.search(r"Size:</label>\s*<div class=\"readonly\">1.5\xa0KB \(1,536 bytes\)</div>", page)
    Document.objects.filter(pk=document.pk).update(size=453)
    page = browser.get(f"/admin/knowledge/document/{document.pk}/change/").content.decode()
    assert re.search(r"Size:</label>\s*<div class=\"readonly\">453\xa0bytes</div>", page)


def test_a_document_page_shows_the_actions_its_state_allows(browser, owner):
    kb = KnowledgeBaseFactory(project=owner.project)
    completed = _completed(kb, "products.csv")
    failed = _failed_transiently(kb)
    page = browser.get(f"/admin/knowledge/document/{completed.pk}/change/").content.decode()
    # An uploaded file that is indexed can only be turned off.
    assert re.findall(r'action="/admin/knowledge/document/[^/]+/([a-z-]+)/"', page) == ["turn-off"]
    page = browser.get(f"/admin/knowledge/document/{failed.pk}/change/").content.decode()
    assert 'id="document-actions"' in page
    assert f'action="/admin/knowledge/document/{failed.pk}/retry/"' in page
    Document.objects.filter(pk=failed.pk).update(status=Document.Status.AWAITING_CONFIRMATION)
    page = browser.get(f"/admin/knowledge/document/{failed.pk}/change/").content.decode()
    assert f'action="/admin/knowledge/document/{failed.pk}/confirm/"' in page
    Document.objects.filter(pk=completed.pk).update(source_url="https://docs.example.com/policy")
    page = browser.get(f"/admin/knowledge/document/{completed.pk}/change/").content.decode()
    assert 'id="document-actions"' in page  # a fetched page can be fetched again
    assert f'action="/admin/knowledge/document/{completed.pk}/refetch/"' in page


def test_the_document_page_names_the_time_zone_of_its_times(browser, owner):
    document = _completed(KnowledgeBaseFactory(project=owner.project))
    page = " ".join(browser.get(f"/admin/knowledge/document/{document.pk}/change/").content.decode().split())
    completed = document.completed_at.astimezone(UTC)
    # One format across the console: the one its lists, tasks and approvals write.
    assert f'<label>Completed at:</label> <div class="readonly">{completed:%Y-%m-%d %H:%M} UTC</div>' in page


def test_the_kb_page_names_the_time_zone_of_its_uploads_once_in_the_header(browser, owner):
    # In the header, not in every cell: the table has no width to spare beside a long file name.
    kb = KnowledgeBaseFactory(project=owner.project)
    document = _completed(kb)
    page = browser.get(f"/admin/knowledge/knowledgebase/{kb.pk}/change/").content.decode()
    assert "<th>File · type · uploaded (UTC)</th>" in page
    assert (f'<span class="bh-muted" data-field="uploaded">{document.file_type} · '
            f"{document.created_at.astimezone(UTC):%Y-%m-%d %H:%M}</span>") in page


def test_the_kb_page_reads_its_routes_in_queries_that_do_not_grow_with_them(browser, owner):
    """A route is picked by searching (autocomplete): no row lists every route of the project,
    and no row reads its route or its KB again."""

    from tests.routes.factories import RouteFactory

    kb = KnowledgeBaseFactory(project=owner.project)
    routes = RouteFactory.create_batch(6, project=owner.project)
    url = f"/admin/knowledge/knowledgebase/{kb.pk}/change/"
    for route in routes[:2]:
        services.route_knowledge_bind(route=route, knowledge_base=kb)
    browser.get(url)  # the first page fills caches (content types, say) with queries of its own
    with CaptureQueriesContext(connection) as two:
        browser.get(url)
    for route in routes[2:]:
        services.route_knowledge_bind(route=route, knowledge_base=kb)
    with CaptureQueriesContext(connection) as six:
        page = browser.get(url).content.decode()
    assert len(six.captured_queries) == len(two.captured_queries)
    selects = re.findall(r'<select name="route_bindings-\d+-route".*?</select>', page, re.S)
    assert len(selects) == 6
    # Each row's select holds its own route alone; the others are found by searching.
    selected = [re.findall(r'<option value="([^"]+)" selected>', select) for select in selects]
    assert sorted(selected) == sorted([str(route.pk)] for route in routes)
    assert all(select.count("<option") == 1 for select in selects)
    assert f'data-ajax--url="/admin/autocomplete/?project={kb.project_id}"' in selects[0]


def test_the_kb_delete_page_counts_what_goes_with_it_in_queries_that_do_not_grow(browser, owner):

    kb = KnowledgeBaseFactory(project=owner.project)
    _completed(kb)
    url = f"/admin/knowledge/knowledgebase/{kb.pk}/delete/"
    browser.get(url)  # the first page fills caches (content types, say) with queries of its own
    with CaptureQueriesContext(connection) as one:
        browser.get(url)
    _completed(kb, "products.csv")
    _completed(kb, "plain.txt")
    with CaptureQueriesContext(connection) as three:
        response = browser.get(url)
    assert len(three.captured_queries) == len(one.captured_queries)
    page = response.content.decode()
    assert response.context["perms_lacking"] == set()
    counted = dict(response.context["model_count"])
    assert counted["documents"] == 3
    assert "<li>3 documents</li>" in page
    chunks = counted["chunks"]
    assert chunks == kb.documents.aggregate(n=Count("chunks"))["n"] > 3
    assert f"<li>{chunks:,} chunks</li>" in page


def test_a_counted_delete_names_the_protected_rows_that_refuse_it(rf):
    """Deleting an embedding model a KB uses is refused (PROTECT): the count says so, as Django's
    collector would."""
    from django.contrib import admin
    from django.contrib.auth import get_user_model

    from apps.projects.admin import deletion_counted

    kb = KnowledgeBaseFactory()
    request = rf.get("/")
    request.user = get_user_model().objects.create_superuser("root", "root@example.com", "pw-for-the-test")
    deleted, counts, perms_needed, protected = deletion_counted(
        admin.site.get_model_admin(EmbeddingModel), [kb.embedding_model], request)
    assert protected == ["1 knowledge base"]
    assert counts == {"embedding models": 1}
    assert perms_needed == set()
    assert deleted == [f'Embedding model: <a href="/admin/knowledge/embeddingmodel/{kb.embedding_model_id}/change/">'
                       f"{kb.embedding_model}</a>"]


def test_a_documents_progress_says_it_counts_passages_not_the_chunks_listed(browser, owner):
    """A document of 31 chunks read "Progress 5/5" beside "Chunks (31)": its chunks repeat each
    other's text, and a text is embedded once (browser audit, low)."""
    kb = KnowledgeBaseFactory(project=owner.project)
    document = ingest_texts(kb, {"longword.txt": "x" * 20_000})["longword.txt"]
    chunks = document.chunks.filter(kind="child").count()
    assert document.progress_total < chunks
    page = browser.get(f"/admin/knowledge/document/{document.pk}/change/").content.decode()
    passages = re.search(r'<div class="readonly">(<progress.*?)</div>\s*</div>', page, re.S).group(1)
    assert re.sub(r"<progress[^>]*></progress> ", "", passages).startswith(
        f"{document.progress_total}/{document.progress_total} passages<div class=\"help\">The distinct texts")
    assert f"Chunks ({chunks})" in page


def test_the_documents_list_filters_by_the_operators_knowledge_bases_only(browser, owner):
    """With every document in one KB the filter by KB was not shown at all (it offered the KBs the
    documents are in), so a second KB could not be picked (browser audit, low)."""
    shop = KnowledgeBaseFactory(project=owner.project, name="门店知识库")
    ingest_texts(shop, {"hours.txt": "We open at nine."})
    KnowledgeBaseFactory(project=owner.project, name="After-sales")
    KnowledgeBaseFactory(name="Another project's secret KB")
    response = browser.get("/admin/knowledge/document/", {"_facets": "True"})
    kbs = next(spec for spec in response.context["cl"].filter_specs if spec.title == "knowledge base")
    assert [name for _, name in kbs.lookup_choices] == ["After-sales", "门店知识库"]
    page = response.content.decode()
    assert f'<a href="?_facets=True&amp;knowledge_base__id__exact={shop.pk}">门店知识库 (1)</a>' in page
    assert "secret" not in page


def test_past_thirty_knowledge_bases_the_documents_filter_is_a_drop_down(browser, owner):
    kbs = [KnowledgeBaseFactory(project=owner.project, name=f"KB {n:02}") for n in range(30)]
    page = browser.get("/admin/knowledge/document/", {"status__exact": "completed"}).content.decode()
    form = page.split('<form method="get" class="bh-filter-select">', 1)[1].split("</form>", 1)[0]
    assert '<input type="hidden" name="status__exact" value="completed">' in form
    assert f'<option value="{kbs[29].pk}">KB 29</option>' in form
    # "All" sends the parameter empty: the whole list, not an error.
    assert browser.get("/admin/knowledge/document/", {"knowledge_base__id__exact": ""}).status_code == 200
