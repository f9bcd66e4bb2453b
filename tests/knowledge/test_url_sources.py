"""External sources: documents registered by URL and fetched by the worker, against a real local
HTTP server (allowed through KNOWLEDGE_URL_ALLOWED_NETWORKS, as a private address must be)."""

import time
from http.server import BaseHTTPRequestHandler

import pytest

from apps.knowledge import ingest, services
from apps.knowledge.models import Chunk, Document, DocumentContent
from apps.knowledge.pipeline.fetch import FetchRefused, addresses_check
from apps.knowledge.pipeline.retrieve import SearchOptions, search
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.local_server import HANDLED_WAIT_SECONDS, LocalServer

pytestmark = pytest.mark.django_db

LOCAL = ["127.0.0.0/8"]
POLICY = "# 售后政策\n\n## 退款\n\n签收七天内可以无理由退货，商品须完好。".encode()


class Source(LocalServer):
    """A small site: path → (status, headers, body, delay)."""

    def __init__(self):
        self.pages: dict[str, tuple[int, dict, bytes, float]] = {}
        self.hits: list[str] = []
        self.hosts: list[str] = []
        source = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                source.hits.append(self.path)
                source.hosts.append(self.headers.get("Host", ""))
                status, headers, body, delay = source.pages.get(self.path, (404, {}, b"not found", 0.0))
                if delay:
                    time.sleep(delay)
                try:
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass

            def log_message(self, *args):
                pass

        super().__init__(Handler)

    def page(self, path, body=POLICY, *, status=200, content_type="text/markdown; charset=utf-8", delay=0.0,
             headers=None):
        self.pages[path] = (status, {"Content-Type": content_type, **(headers or {})}, body, delay)
        return self.url(path)

    def url(self, path, host="127.0.0.1"):
        return f"http://{host}:{self.port}{path}"


@pytest.fixture
def site():
    with Source() as source:
        yield source


@pytest.fixture
def local(settings):
    settings.KNOWLEDGE_URL_ALLOWED_NETWORKS = LOCAL
    return settings


@pytest.fixture
def kb(owner):
    return KnowledgeBaseFactory(project=owner.project)


def _register(client, kb, url):
    return client.post(f"/api/v1/builder/knowledge-bases/{kb.pk}/documents", {"url": url}, format="json")


def _ingest(document_id) -> Document:
    ingest.document_ingest(document_id=document_id)
    return Document.objects.get(pk=document_id)


def test_a_url_is_registered_fetched_and_searchable(client, kb, site, local):
    url = site.page("/docs/policy.md")
    response = _register(client, kb, url)
    assert response.status_code == 201
    [out] = response.json()["data"]
    assert (out["source_url"], out["filename"], out["status"], out["fetched_at"]) == (url, "policy.md", "pending",
                                                                                      None)
    document = _ingest(out["id"])
    assert (document.status, document.file_type, document.size) == ("completed", "markdown", len(POLICY))
    assert document.fetched_at is not None
    hits = search(kbs=[kb], query="无理由退货", options=SearchOptions(mode="keyword", top_k=1)).hits
    assert hits[0].chapter_path == "售后政策 / 退款"


def test_the_fetch_connects_to_the_checked_address_with_the_url_host(client, kb, site, local):
    url = site.page("/a.md")
    document = _ingest(_register(client, kb, url).json()["data"][0]["id"])
    assert document.status == "completed"
    assert site.hosts == [f"127.0.0.1:{site.port}"]


def test_a_refetch_replaces_changed_content(client, kb, site, local):
    url = site.page("/policy.md")
    document_id = _register(client, kb, url).json()["data"][0]["id"]
    _ingest(document_id)
    site.page("/policy.md", "# 售后政策\n\n## 换货\n\n换货须在十五天内申请。".encode())
    response = client.post(f"/api/v1/builder/documents/{document_id}/refetch")
    assert response.status_code == 202
    assert response.json()["data"]["status"] == "queued"
    document = _ingest(document_id)
    assert document.status == "completed"
    paths = set(Chunk.objects.filter(document=document, kind="child").values_list("chapter_path", flat=True))
    assert paths == {"售后政策 / 换货"}
    assert site.hits == ["/policy.md", "/policy.md"]


def test_a_refetch_of_an_uploaded_file_is_409_and_changes_nothing(client, kb):
    from tests.knowledge.helpers import ingest_texts

    document = ingest_texts(kb, {"a.md": "# A\n\n内容。"})["a.md"]
    response = client.post(f"/api/v1/builder/documents/{document.pk}/refetch")
    assert response.status_code == 409
    assert response.json()["error"] == "not_url_source"
    assert Document.objects.get(pk=document.pk).status == "completed"


@pytest.mark.parametrize("url", ["ftp://example.com/a.md", "file:///etc/passwd", "javascript:alert(1)",
                                 "https://user:pw@example.com/a.md", "http:///nohost", "not a url"])
def test_a_bad_url_is_422_and_creates_nothing(client, kb, url):
    response = _register(client, kb, url)
    assert response.status_code == 422
    assert response.json()["error"] == "url_invalid"
    assert Document.objects.filter(knowledge_base=kb).count() == 0


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/a.md", "http://10.0.0.5/a.md",
                                 "http://169.254.169.254/latest/meta-data", "http://[::1]/a.md",
                                 "http://localhost/a.md", "http://100.64.0.1/a.md", "http://[::ffff:10.0.0.1]/a"])
def test_a_private_address_is_refused_at_registration(client, kb, url):
    response = _register(client, kb, url)
    assert response.status_code == 422
    assert response.json()["error"] == "url_address_refused"
    assert Document.objects.filter(knowledge_base=kb).count() == 0


def test_extra_fields_in_a_url_registration_are_refused(client, kb, local, site):
    response = client.post(f"/api/v1/builder/knowledge-bases/{kb.pk}/documents",
                           {"url": site.page("/a.md"), "name": "x"}, format="json")
    assert response.status_code in (400, 422)
    assert Document.objects.filter(knowledge_base=kb).count() == 0


# The name a URL's last path segment decodes to, as an upload's name is kept (Django drops the
# characters that do not print): "%00" was a 500 (PostgreSQL stores no NUL), a bidi control
# showed "a\u202etxt.md" as "adm.txt" in the console, a line break split the document's row.
@pytest.mark.parametrize(("path", "filename"), [("/a%00b.txt", "ab.txt"), ("/a%E2%80%AEtxt.md", "atxt.md"),
                                                ("/new%0Aline.txt", "newline.txt"), ("/%00", "127.0.0.1")])
def test_a_url_whose_name_decodes_to_characters_that_do_not_print_is_registered_without_them(
        client, kb, site, local, path, filename):
    response = _register(client, kb, site.url(path))
    assert response.status_code == 201, response.content
    assert response.json()["data"][0]["filename"] == filename
    assert Document.objects.get(knowledge_base=kb).filename == filename


def test_every_resolved_address_is_checked():
    with pytest.raises(FetchRefused) as refused:
        addresses_check(["93.184.216.34", "10.0.0.1"])
    assert refused.value.code == "url_address_refused"
    assert addresses_check(["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"])


def test_a_private_address_is_refused_again_at_fetch(client, kb, site, local, settings):
    document_id = _register(client, kb, site.page("/a.md")).json()["data"][0]["id"]
    settings.KNOWLEDGE_URL_ALLOWED_NETWORKS = []
    document = _ingest(document_id)
    assert (document.status, document.error_code) == ("failed", "url_address_refused")
    assert site.hits == []


def test_a_redirect_to_another_host_fails_the_document(client, kb, site, local):
    site.page("/elsewhere.md")
    url = site.page("/moved", b"", status=302, headers={"Location": site.url("/elsewhere.md", host="localhost")})
    document = _ingest(_register(client, kb, url).json()["data"][0]["id"])
    assert (document.status, document.error_code) == ("failed", "url_redirect_refused")
    assert url in document.error_message
    assert site.hits == ["/moved"]


def test_a_redirect_on_the_same_host_is_followed(client, kb, site, local):
    site.page("/new.md")
    url = site.page("/old", b"", status=301, headers={"Location": "/new.md"})
    document = _ingest(_register(client, kb, url).json()["data"][0]["id"])
    assert document.status == "completed"
    assert site.hits == ["/old", "/new.md"]


def test_a_refused_content_type_fails_the_document(client, kb, site, local):
    url = site.page("/page", b"<html><body>hi</body></html>", content_type="text/html")
    document = _ingest(_register(client, kb, url).json()["data"][0]["id"])
    assert (document.status, document.error_code) == ("failed", "url_content_type_refused")
    assert not DocumentContent.objects.filter(document=document).exists()


def test_content_over_the_size_cap_fails_the_document(client, kb, site, local, settings):
    settings.KNOWLEDGE_URL_MAX_BYTES = 64
    url = site.page("/big.md", b"# Big\n\n" + b"x" * 200)
    document = _ingest(_register(client, kb, url).json()["data"][0]["id"])
    assert (document.status, document.error_code) == ("failed", "url_too_large")


def test_a_slow_source_times_out(client, kb, site, local, settings):
    settings.KNOWLEDGE_URL_TIMEOUT_SECONDS = 0.3
    url = site.page("/slow.md", delay=1.5)  # it answers, later: url_timeout says the worker did not wait for it
    document = _ingest(_register(client, kb, url).json()["data"][0]["id"])
    assert (document.status, document.error_code) == ("failed", "url_timeout")


def test_an_http_error_fails_the_document(client, kb, site, local):
    document = _ingest(_register(client, kb, site.url("/missing.md")).json()["data"][0]["id"])
    assert (document.status, document.error_code) == ("failed", "url_http_error")
    assert "404" in document.error_message


def test_the_service_refuses_a_private_address_without_the_allowlist(kb):
    from apps.knowledge.errors import UrlAddressRefused

    with pytest.raises(UrlAddressRefused):
        services.document_register_url(kb=kb, url="http://192.168.1.1/a.md")
    assert not Document.objects.filter(knowledge_base=kb).exists()




def test_the_admin_registers_a_url_and_shows_it_in_the_document_list(browser, kb, site, local):
    url = site.page("/guide.md")
    response = browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/register-url/", {"url": url})
    assert response.status_code == 302
    document = Document.objects.get(knowledge_base=kb)
    assert document.source_url == url
    page = browser.get("/admin/knowledge/document/").content.decode()
    assert f'href="{url}"' in page
    detail = browser.get(f"/admin/knowledge/document/{document.pk}/change/").content.decode()
    assert url in detail


def test_the_admin_shows_a_refused_url_beside_the_field_and_creates_nothing(browser, kb):
    response = browser.post(f"/admin/knowledge/knowledgebase/{kb.pk}/register-url/",
                            {"url": "http://169.254.169.254/latest/meta-data"})
    page = response.content.decode()
    assert response.status_code == 200
    errors = page.split('id="kb-url-errors"', 1)[1].split("</div>", 1)[0]
    assert 'class="errorlist' in errors and "private, loopback" in errors
    assert not Document.objects.filter(knowledge_base=kb).exists()


def test_the_admin_fetches_a_url_document_again(browser, kb, site, local):
    url = site.page("/guide.md")
    document = services.document_register_url(kb=kb, url=url)
    _ingest(document.pk)
    response = browser.post(f"/admin/knowledge/document/{document.pk}/refetch/")
    assert response.status_code == 302
    assert Document.objects.get(pk=document.pk).status == "queued"
    assert Document.objects.get(pk=document.pk).fetched_at is None


def test_a_host_name_is_resolved_checked_and_sent_as_the_host_header(client, kb, site, local):
    site.page("/named.md")
    document = _ingest(_register(client, kb, site.url("/named.md", host="localhost")).json()["data"][0]["id"])
    assert document.status == "completed"
    # The connection went to the checked address; the URL's own host name travelled as Host.
    assert site.hosts == [f"localhost:{site.port}"]


def test_changed_content_is_confirmed_again_where_the_kb_confirms(client, owner, site, local):
    kb = KnowledgeBaseFactory(project=owner.project, require_confirmation=True)
    url = site.page("/policy.md")
    document_id = _register(client, kb, url).json()["data"][0]["id"]
    assert _ingest(document_id).status == "awaiting_confirmation"
    services.document_confirm(document=Document.objects.get(pk=document_id))
    assert _ingest(document_id).status == "completed"
    site.page("/policy.md", "# 售后政策\n\n## 换货\n\n换货须在十五天内申请。".encode())
    services.document_refetch(document=Document.objects.get(pk=document_id))
    assert _ingest(document_id).status == "awaiting_confirmation"


def test_unchanged_content_keeps_its_confirmation(client, owner, site, local):
    kb = KnowledgeBaseFactory(project=owner.project, require_confirmation=True)
    document_id = _register(client, kb, site.page("/policy.md")).json()["data"][0]["id"]
    _ingest(document_id)
    services.document_confirm(document=Document.objects.get(pk=document_id))
    _ingest(document_id)
    services.document_refetch(document=Document.objects.get(pk=document_id))
    assert _ingest(document_id).status == "completed"


def test_a_source_trickling_its_headers_times_out_at_the_deadline(client, kb, local, settings):
    """Each byte within the timeout, the whole far over it: httpx's per-read timeout never fired, and
    the worker waited for the page to its end before it said url_timeout."""
    from tests.local_server import TricklingServer

    settings.KNOWLEDGE_URL_TIMEOUT_SECONDS = 0.4
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: text/markdown\r\nContent-Length: 8\r\n\r\n# Policy"
    # The headers trickled, the body at once with their last byte: read whole without the deadline.
    with TricklingServer(answer, tail=answer.index(b"#")) as source:
        document = _ingest(_register(client, kb, f"http://127.0.0.1:{source.port}/policy.md").json()["data"][0]["id"])
        assert source.handled.wait(HANDLED_WAIT_SECONDS)
    assert (document.status, document.error_code) == ("failed", "url_timeout")
    assert source.outcomes == ["cut"]
