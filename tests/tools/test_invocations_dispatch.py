"""Signed dispatch through the Celery worker to a real business server: what is sent, and the state
each kind of answer gives."""

import hashlib

import pytest

from apps.demo_business.verify import bailing_headers
from apps.tools.invocations import invocation_key
from apps.tools.models import Invocation, InvocationJournalEntry
from tests.tools.business_server import BusinessServer
from tests.tools.invocation_helpers import new_id, stored

pytest_plugins = ["tests.tools.invocation_fixtures"]


def _journal(invocation_id: str) -> list[str]:
    return list(InvocationJournalEntry.objects.filter(invocation__invocation_id=invocation_id)
                .order_by("created_at").values_list("state", flat=True))


def test_a_read_is_sent_signed_with_its_arguments_in_place(shop, dispatching):
    shop.server.respond("/api/items", body='{"name":"茶"}'.encode())
    invocation_id = new_id()
    response = shop.invoke("item_read", {"item_id": "a b/c", "q": "绿 茶", "X-Shop-Locale": "zh-CN"},
                           invocation_id=invocation_id)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body == {"schema_version": "bailing.agent-tool-invocation.v1", "invocation_id": invocation_id,
                    "route": "shop-assistant", "tool": "item_read", "state": "executed", "ok": True,
                    "auto_retry_allowed": False, "text": '{"name":"茶"}', "business_status": 200}
    [received] = shop.server.received
    assert received.signature_valid
    assert (received.method, received.target) == ("GET", "/api/items/a%20b%2Fc?q=%E7%BB%BF%20%E8%8C%B6")
    assert received.headers["X-Shop-Locale"] == "zh-CN"
    headers = bailing_headers(received.headers)
    inv = Invocation.objects.get(invocation_id=invocation_id)
    assert (headers.tool_scope, headers.job_id, headers.on_behalf_of) == ("items.read", str(inv.pk), "ada@example.com")
    assert headers.idempotency_key == invocation_key(session_id=shop.session.pk, invocation_id=invocation_id)
    assert _journal(invocation_id) == ["dispatching", "response_recorded", "completed"]
    assert inv.frozen_arguments == ""


def test_a_header_argument_compiled_before_the_hub_reserved_its_name_is_not_sent():
    # A tool compiled before the compiler left the hub's headers out still carries the location:
    # the request goes with the hub's values alone.
    from apps.tools.dispatch import request_build

    locations = [{"argument": "forged", "in": "header", "name": "x-bailing-on-behalf-of"},
                 {"argument": "agent", "in": "header", "name": "user-agent"},
                 {"argument": "locale", "in": "header", "name": "X-Shop-Locale"}]
    request = request_build(base_url="https://shop.example", secret="s" * 16, job_id="job-1", idempotency_key="k1",
                            on_behalf_of="alice@example.com", timestamp=1_700_000_000,
                            arguments={"forged": "mallory@example.com", "agent": "curl", "locale": "zh-CN"},
                            compiled={"method": "GET", "path": "/orders", "scope": "orders.read",
                                      "parameter_locations": locations})
    lowered = [name.lower() for name in request.headers]
    assert lowered.count("x-bailing-on-behalf-of") == 1 and lowered.count("user-agent") == 1
    assert bailing_headers(request.headers).on_behalf_of == "alice@example.com"
    assert request.headers["User-Agent"] != "curl" and request.headers["X-Shop-Locale"] == "zh-CN"
    underscored = [{"argument": "forged", "in": "header", "name": "X_Bailing_On_Behalf_Of"}]
    request = request_build(base_url="https://shop.example", secret="s" * 16, job_id="job-1", idempotency_key="k1",
                            on_behalf_of="alice@example.com", timestamp=1_700_000_000,
                            arguments={"forged": "mallory@example.com"},
                            compiled={"method": "GET", "path": "/orders", "parameter_locations": underscored})
    assert "mallory@example.com" not in request.headers.values()


def test_a_header_argument_compiled_under_a_name_no_header_can_have_is_not_placed():
    from apps.tools.dispatch import ArgumentUnplaceable, request_build

    with pytest.raises(ArgumentUnplaceable):
        request_build(base_url="https://shop.example", secret="s" * 16, job_id="job-1", idempotency_key="k1",
                      on_behalf_of="alice@example.com", timestamp=1_700_000_000, arguments={"shop": "x"},
                      compiled={"method": "GET", "path": "/orders",
                                "parameter_locations": [{"argument": "shop", "in": "header", "name": "X Shop"}]})


def _path_built(path: str, arguments: dict, locations: list[str]):
    from apps.tools.dispatch import request_build

    return request_build(base_url="https://bank.example/api", secret="s" * 16, job_id="job-1", idempotency_key="k1",
                         on_behalf_of="", timestamp=1_700_000_000, arguments=arguments,
                         compiled={"method": "GET", "path": path, "parameter_locations": [
                             {"argument": name, "in": "path", "name": name} for name in locations]})


@pytest.mark.parametrize("value", ["..", ".", ""])
def test_a_path_parameter_that_would_make_a_dot_segment_or_an_empty_one_is_not_placed(value):
    """``..`` in /accounts/{id}/statement reached /api/statement (httpx resolves dot-segments, as a
    proxy or a router would), signed as the tool: an agent could reach any path of the business
    system through one allowed tool (hostile-input audit, high)."""
    from apps.tools.dispatch import ArgumentUnplaceable

    with pytest.raises(ArgumentUnplaceable) as refused:
        _path_built("/accounts/{id}/statement", {"id": value}, ["id"])
    assert refused.value.field == "id" and "another path" in refused.value.message
    with pytest.raises(ArgumentUnplaceable):  # two values that make one segment ".." between them
        _path_built("/files/{a}{b}", {"a": ".", "b": "."}, ["a", "b"])


@pytest.mark.parametrize("value", ["../../admin/users", "..\\..\\admin\\users", "x/../../admin", "./x", "a\\."])
def test_a_path_parameter_whose_own_pieces_climb_is_not_placed(value):
    """Sent as ..%2F..%2Fadmin%2Fusers, httpx keeps it in its segment, but a proxy that decodes %2F
    before it resolves dot-segments (nginx) or takes \\ for / (IIS) reaches /admin/users (review)."""
    from apps.tools.dispatch import ArgumentUnplaceable

    with pytest.raises(ArgumentUnplaceable) as refused:
        _path_built("/items/{id}", {"id": value}, ["id"])
    assert refused.value.field == "id" and "another path" in refused.value.message


@pytest.mark.parametrize(("path", "arguments", "target"), [
    ("/accounts/{id}/statement", {"id": "..."}, "/api/accounts/.../statement"),
    ("/accounts/{id}/statement", {"id": "a/b.c"}, "/api/accounts/a%2Fb.c/statement"),
    ("/accounts/{id}/statement", {"id": "..a/b..\\.c"}, "/api/accounts/..a%2Fb..%5C.c/statement"),
    ("/accounts/{id}/statement", {"id": "%2E%2E"}, "/api/accounts/%252E%252E/statement"),
    ("/files/{name}.json", {"name": ".."}, "/api/files/...json"),
    ("/files/{name}", {"name": ".env"}, "/api/files/.env"),
])
def test_a_path_parameter_with_dots_inside_its_segment_is_sent_as_it_is(path, arguments, target):
    assert _path_built(path, arguments, list(arguments)).target == target


def test_a_call_whose_path_parameter_would_name_another_path_is_refused_when_made_and_nothing_is_sent(
        shop, dispatching):
    before = stored()
    body = shop.invoke("item_read", {"item_id": ".."}).json()
    assert (body["state"], body["auto_retry_allowed"]) == ("rejected_before_dispatch", False)
    assert body["text"].startswith("The arguments cannot be sent: item_id: a path parameter cannot be '..'")
    assert shop.server.received == []
    assert stored()["journal"] == before["journal"]
    assert Invocation.objects.get(invocation_id=body["invocation_id"]).journal_state == "absent"


def test_a_write_sends_its_json_body(shop, dispatching):
    response = shop.invoke("stock_write", {"sku": "TEA-1", "quantity": 5, "note": None})
    assert response.json()["state"] == "executed"
    [received] = shop.server.received
    assert received.headers["Content-Type"] == "application/json"
    assert received.json() == {"sku": "TEA-1", "quantity": 5, "note": None}
    assert received.headers["X-Bailing-Timestamp"].isdigit()
    assert received.headers["X-Bailing-Signature"].startswith("v1=")
    assert hashlib.sha256(received.body).hexdigest()  # the signature covered exactly these bytes


def test_control_characters_in_a_business_answer_are_replaced_and_tabs_and_line_feeds_kept(shop, dispatching):
    shop.server.respond("/api/items", body="\x00a\x1bb\tc\nd\r\x7f\x85e".encode())
    body = shop.invoke("item_read", {"item_id": "x"}).json()
    assert (body["state"], body["text"]) == ("executed", "\ufffda\ufffdb\tc\nd\ufffd\ufffd\ufffde")


def test_a_business_4xx_is_business_rejected(shop, dispatching):
    shop.server.respond("/api/stock", status=422, body=b'{"error":"unknown_sku"}')
    body = shop.invoke("stock_write", {"sku": "NOPE", "quantity": 1}).json()
    assert (body["state"], body["ok"], body["business_status"], body["auto_retry_allowed"]) == (
        "business_rejected", False, 422, False)
    assert body["text"] == '{"error":"unknown_sku"}'


PAGE = (b"<!DOCTYPE html><html><head><title>Page not found</title><style>body{color:red}</style>"
        b"<script>var debug=1</script></head><body><h1>Not Found</h1><p>The path &amp; <b>/api/items/1</b> "
        b"was not found.</p></body></html>")


def test_a_business_error_page_in_html_reaches_the_agent_as_its_text(shop, dispatching):
    """A framework's 404 page went to the model as 4 KB of markup."""
    shop.server.respond("/api/items", status=404, body=PAGE, content_type="text/html; charset=utf-8")
    body = shop.invoke("item_read", {"item_id": "1"}).json()
    assert (body["state"], body["business_status"], body["text"]) == (
        "business_rejected", 404,
        "[an HTML page, shown as its text] Page not found Not Found The path & /api/items/1 was not found.")


def test_an_html_error_page_is_read_whole_before_it_is_cut_and_a_head_left_open_hides_no_body(shop, dispatching):
    """Cut first, a page cut inside its styles lost its words and the cut's notice; and a <head>
    without its (optional) end tag hid the whole body."""
    page = (b"<html><head><title>Err</title><style>" + b"x" * 70_000 + b"</style><body><h1>Bad gateway</h1>"
            b"<p>upstream timed out</p></body></html>")
    shop.server.respond("/api/items", status=502, body=page, content_type="text/html")
    text = shop.invoke("item_read", {"item_id": "1"}).json()["text"]
    assert text == "[an HTML page, shown as its text] Err Bad gateway upstream timed out"


def test_an_html_error_page_cut_inside_its_script_keeps_its_words_and_says_it_was_cut(shop, dispatching, settings):
    settings.TOOL_RESPONSE_MAX_BYTES = 4096
    page = b"<html><body><h1>Bad gateway</h1><script>" + b"var x = 1;" * 1000 + b"</script></body></html>"
    shop.server.respond("/api/items", status=502, body=page, content_type="text/html")
    text = shop.invoke("item_read", {"item_id": "1"}).json()["text"]
    assert text == "[an HTML page, shown as its text] Bad gateway… [the answer was cut: response_too_large]"


def test_a_successful_html_answer_reaches_the_agent_as_it_came(shop, dispatching):
    shop.server.respond("/api/items", status=200, body=PAGE, content_type="text/html")
    assert shop.invoke("item_read", {"item_id": "1"}).json()["text"] == PAGE.decode()


def test_a_business_5xx_on_a_write_needs_reconciliation(shop, dispatching):
    shop.server.respond("/api/stock", status=503, body=b"down")
    body = shop.invoke("stock_write", {"sku": "TEA-1", "quantity": 1}).json()
    assert (body["state"], body["business_status"], body["auto_retry_allowed"]) == (
        "reconciliation_required", 503, False)
    assert "Do not submit a new write" in body["text"]


def test_a_business_5xx_on_a_read_is_business_rejected(shop, dispatching):
    shop.server.respond("/api/items", status=500, body=b"oops")
    body = shop.invoke("item_read", {"item_id": "1"}).json()
    assert (body["state"], body["business_status"]) == ("business_rejected", 500)


@pytest.mark.parametrize("status", [302, 303, 307])
def test_a_redirect_to_an_internal_address_is_not_followed(shop, dispatching, status):
    """A write answered by a redirect may have been applied (a 303 after a POST says it was): the
    call needs reconciliation, as after a 5xx, never "rejected, nothing done"."""
    internal = BusinessServer().start()
    try:
        shop.server.respond("/api/stock", status=status, body=b"moved",
                            headers={"Location": f"{internal.base_url}/latest/meta-data/"})
        invocation_id = new_id()
        body = shop.invoke("stock_write", {"sku": "TEA-1", "quantity": 1}, invocation_id=invocation_id).json()
        assert (body["state"], body["ok"], body["business_status"], body["auto_retry_allowed"]) == (
            "reconciliation_required", False, status, False)
        assert body["text"].startswith(f"The business system answered with a redirect (HTTP {status}), which is "
                                       "not followed; it may or may not have applied the change.")
        assert "Do not submit a new write" in body["text"]
        assert internal.received == []
        assert len(shop.server.requests_to("/api/stock")) == 1
        assert shop.invoke("stock_write", {"sku": "TEA-1", "quantity": 1}, invocation_id=invocation_id).json() == body
        assert len(shop.server.requests_to("/api/stock")) == 1
        assert _journal(invocation_id) == ["dispatching", "response_recorded", "completed"]
    finally:
        internal.stop()


def test_a_redirect_on_a_read_is_business_rejected(shop, dispatching):
    shop.server.respond("/api/items", status=301, body=b"moved", headers={"Location": "http://127.0.0.1:9/"})
    body = shop.invoke("item_read", {"item_id": "1"}).json()
    assert (body["state"], body["ok"], body["business_status"]) == ("business_rejected", False, 301)
    assert body["text"] == "The business system answered with a redirect (HTTP 301), which is not followed."
    assert len(shop.server.requests_to("/api/items/1")) == 1


def test_garbage_instead_of_http_is_reconciliation_required(shop, dispatching):
    shop.server.respond("/api/stock", garbage=True)
    invocation_id = new_id()
    body = shop.invoke("stock_write", {"sku": "TEA-1", "quantity": 1}, invocation_id=invocation_id).json()
    assert (body["state"], body["auto_retry_allowed"]) == ("reconciliation_required", False)
    assert _journal(invocation_id) == ["dispatching", "uncertain"]


def test_a_50_mib_answer_is_read_only_up_to_the_cap(shop, dispatching, settings):
    shop.server.respond("/api/items", huge_bytes=50 * 1024 * 1024)
    invocation_id = new_id()
    body = shop.invoke("item_read", {"item_id": "1"}, invocation_id=invocation_id).json()
    assert (body["state"], body["business_status"]) == ("executed", 200)
    assert len(body["text"]) <= 8192
    assert body["text"].endswith("[the answer was cut: response_too_large]")
    entry = InvocationJournalEntry.objects.get(invocation__invocation_id=invocation_id, state="response_recorded")
    assert entry.detail["bytes"] == settings.TOOL_RESPONSE_MAX_BYTES


def test_a_backend_hanging_past_the_timeout_needs_reconciliation_and_is_never_sent_again(shop, dispatching):
    shop.server.respond("/api/notes", delay=5)
    invocation_id = new_id()
    body = shop.invoke("note_add", {"text": "hello"}, invocation_id=invocation_id).json()
    assert (body["state"], body["auto_retry_allowed"]) == ("reconciliation_required", False)
    assert "Do not submit a new write" in body["text"]
    again = shop.resume(invocation_id).json()
    assert again == body
    assert shop.invoke("note_add", {"text": "hello"}, invocation_id=invocation_id).json() == body
    assert len(shop.server.requests_to("/api/notes")) == 1


def test_an_unreachable_backend_is_not_dispatched(shop, dispatching):
    from tests.tools.business_server import free_port_refusing

    shop.provider.base_url = free_port_refusing()
    shop.provider.save(update_fields=["base_url"])
    body = shop.invoke("item_read", {"item_id": "1"}).json()
    assert (body["state"], body["auto_retry_allowed"]) == ("rejected_before_dispatch", False)
    assert "could not be reached" in body["text"]
    assert _journal(body["invocation_id"]) == ["dispatching", "completed"]


def test_a_call_whose_host_now_resolves_to_a_denied_address_is_not_sent(shop, dispatching, settings):
    """Checked when the provider is saved, and again at each call: the host's address may have
    changed since (DNS), or the deployment's denied networks."""
    settings.TOOL_PROVIDER_DENIED_NETWORKS = [*settings.TOOL_PROVIDER_DENIED_NETWORKS, "127.0.0.0/8"]
    invocation_id = new_id()
    body = shop.invoke("item_read", {"item_id": "1"}, invocation_id=invocation_id).json()
    assert (body["state"], body["auto_retry_allowed"]) == ("rejected_before_dispatch", False)
    assert "address_refused" in body["text"]
    assert shop.server.received == []
    entry = InvocationJournalEntry.objects.filter(invocation__invocation_id=invocation_id).order_by("created_at").last()
    assert entry.detail == {"outcome": "not_sent", "reason": "address_refused"}


def test_the_call_goes_to_the_address_checked_with_the_providers_own_host_name(shop, dispatching, monkeypatch):
    """The connection goes to the address that was checked, not to a second DNS answer (rebinding):
    a name only the check can resolve is reached, and the business system sees its own host name."""
    from apps.core import outbound
    from apps.tools.models import ToolProvider

    checked = outbound.host_resolve

    def resolve(host, port, policy):
        return checked("127.0.0.1" if host == "shop.invalid" else host, port, policy)

    monkeypatch.setattr(outbound, "host_resolve", resolve)
    provider = ToolProvider.objects.get(name="shop")
    netloc = provider.base_url.split("/")[2].replace("127.0.0.1", "shop.invalid")
    ToolProvider.objects.filter(pk=provider.pk).update(base_url=provider.base_url.replace("127.0.0.1", "shop.invalid"))
    shop.server.respond("/api/items", body=b'{"name":"tea"}')
    body = shop.invoke("item_read", {"item_id": "1"}).json()
    assert (body["state"], body["text"]) == ("executed", '{"name":"tea"}')
    [received] = shop.server.received
    assert (received.headers["Host"], received.signature_valid) == (netloc, True)


def test_a_denied_networks_setting_that_is_not_one_stops_the_boot_naming_it(settings):
    from django.apps import apps
    from django.core.exceptions import ImproperlyConfigured

    settings.TOOL_PROVIDER_DENIED_NETWORKS = ["169.254.0.0/16", "metadata"]
    with pytest.raises(ImproperlyConfigured, match="TOOL_PROVIDER_DENIED_NETWORKS: 'metadata' is not a network"):
        apps.get_app_config("tools").ready()
