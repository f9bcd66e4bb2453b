import json

import pytest

pytestmark = [pytest.mark.urls("tests.core.urls")]


def _error(response):
    body = json.loads(response.content)
    assert set(body) >= {"error", "message"}
    return body


def test_validation_error_is_400_with_the_field_named(client):
    response = client.post("/agent-api/test/echo", {"name": "far too long"}, content_type="application/json")
    body = _error(response)
    assert response.status_code == 400
    assert body["error"] == "invalid_request"
    assert "name" in body["fields"]
    assert body["message"].startswith("name:")


def test_malformed_json_is_400_invalid_json(client):
    response = client.post("/agent-api/test/echo", "{not json", content_type="application/json")
    assert response.status_code == 400
    assert _error(response)["error"] == "invalid_json"


def test_permission_denied_is_403(client):
    response = client.get("/agent-api/test/forbidden")
    assert response.status_code == 403
    assert _error(response)["error"] == "forbidden"


def test_a_console_403_shows_a_reason_only_when_it_is_written_for_operators(client):
    plain = client.get("/admin/test/forbidden")
    assert plain.status_code == 403
    assert "internal detail" not in plain.content.decode()
    assert "An owner of the project can give you the editor role." in plain.content.decode()
    reasoned = client.get("/admin/test/forbidden-with-reason")
    assert reasoned.status_code == 403
    assert "Only a site administrator can do this." in reasoned.content.decode()
    assert "editor role" not in reasoned.content.decode()


def test_the_bare_address_leads_to_the_console_and_other_unknown_pages_stay_404(client):
    home = client.get("/")
    assert (home.status_code, home["Location"]) == (302, "/admin/")
    assert client.get("/nothing-here").status_code == 404


def test_http404_is_404_json(client):
    response = client.get("/agent-api/test/missing")
    assert response.status_code == 404
    assert _error(response)["error"] == "not_found"


def test_unknown_path_under_api_prefix_is_404_json(client):
    response = client.get("/agent-api/nothing-here")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert _error(response)["error"] == "not_found"


def test_wrong_method_is_405_with_allow(client):
    response = client.get("/agent-api/test/echo")
    assert response.status_code == 405
    assert _error(response)["error"] == "method_not_allowed"
    assert "POST" in response["Allow"]


def test_wrong_method_on_plain_django_view_is_405_json(client):
    response = client.post("/healthz")
    assert response.status_code == 405
    assert _error(response)["error"] == "method_not_allowed"


def test_api_error_carries_its_code_status_and_extra_fields(client):
    response = client.get("/agent-api/test/conflict")
    assert response.status_code == 409
    assert _error(response) == {
        "error": "already_processed", "message": "Already processed.", "authorization_id": "a1"
    }


def test_unhandled_error_is_500_without_internal_detail(client):
    client.raise_request_exception = False
    response = client.get("/agent-api/test/broken")
    assert response.status_code == 500
    body = _error(response)
    assert body == {"error": "internal_error", "message": "Internal server error."}
    assert b"10.0.0.5" not in response.content


def test_unhandled_error_in_plain_view_is_500_json(client):
    client.raise_request_exception = False
    response = client.get("/agent-api/test/plain-broken")
    assert response.status_code == 500
    assert _error(response)["error"] == "internal_error"


def test_plain_view_http404_is_json(client):
    response = client.get("/agent-api/test/plain-missing")
    assert response.status_code == 404
    assert _error(response)["error"] == "not_found"


def test_admin_404_stays_html(admin_client):
    response = admin_client.get("/admin/no-such-page/")
    assert response.status_code == 404
    assert not response["Content-Type"].startswith("application/json")


@pytest.mark.parametrize("path", ["/agent-api/test/plain-ok", "/agent-api/nothing", "/agent-auth/v1/nothing"])
def test_agent_prefixes_are_no_store(client, path):
    response = client.get(path)
    assert response["Cache-Control"] == "no-store"


def test_trailing_slash_never_redirects_on_agent_paths(client):
    response = client.get("/agent-api/test/plain-ok/")
    assert response.status_code == 404
    assert "Location" not in response


def test_request_id_is_echoed_when_well_formed(client):
    response = client.get("/healthz", HTTP_X_REQUEST_ID="abc12345-run")
    assert response["X-Request-ID"] == "abc12345-run"


def test_request_id_is_replaced_when_malformed(client):
    response = client.get("/healthz", HTTP_X_REQUEST_ID="bad id with spaces\n")
    assert response["X-Request-ID"] != "bad id with spaces\n"
    assert len(response["X-Request-ID"]) == 32
