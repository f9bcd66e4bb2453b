"""The memory notes API: route notes and project notes of one principal, never another's."""


import pytest

from apps.ledger.models import MemoryNote
from apps.routes.services import route_update
from tests.agent_auth.helpers import PRINCIPAL, bearer, session_for
from tests.ledger.helpers import post_json
from tests.queries import get_statements
from tests.routes.factories import RouteFactory

ROUTE_NOTES = "/agent-api/v1/workspaces/{}/memories"
PROJECT_NOTES = "/agent-api/v1/workspaces/{}/project-memories"


def _save(api_client, token, url, content):
    return post_json(api_client, url, {"content": content}, token)


def _patch(api_client, token, url, body):
    return api_client.patch(url, body, format="json", **bearer(token))


@pytest.fixture
def bob(agent_client):
    """Another principal, on the same client and routes."""
    return session_for(agent_client, on_behalf_of="bob@example.com")


@pytest.fixture(params=[ROUTE_NOTES, PROJECT_NOTES], ids=["route", "project"])
def notes_url(request, route):
    return request.param.format(route.key)


def test_saving_a_note_answers_its_id(api_client, issued, notes_url):
    response = _save(api_client, issued.access_token, notes_url, "直播用绑定音色")
    assert response.status_code == 200
    note = MemoryNote.objects.get()
    assert response.json() == {"status": "saved", "memory_id": str(note.pk), "content": "直播用绑定音色"}
    assert (note.principal_tenant, note.principal_id, note.on_behalf_of) == ("store-7", "u-1001", "ada@example.com")


def test_a_route_note_belongs_to_the_route_and_principal(api_client, issued, route):
    _save(api_client, issued.access_token, ROUTE_NOTES.format(route.key), "n")
    note = MemoryNote.objects.get()
    assert (note.scope, note.route_id, note.project_id) == ("route", route.pk, route.project_id)


def test_a_project_note_belongs_to_the_project_and_principal(api_client, issued, route):
    _save(api_client, issued.access_token, PROJECT_NOTES.format(route.key), "n")
    note = MemoryNote.objects.get()
    assert (note.scope, note.route_id, note.project_id) == ("project", None, route.project_id)


def test_listing_gives_id_content_and_updated_at(api_client, issued, notes_url):
    note_id = _save(api_client, issued.access_token, notes_url, "一").json()["memory_id"]
    body = api_client.get(notes_url, **bearer(issued.access_token)).json()
    assert body["schema_version"] == "bailing.agent-memories.v1"
    assert [(item["id"], item["content"]) for item in body["memories"]] == [(note_id, "一")]
    assert set(body["memories"][0]) == {"id", "content", "updated_at"}
    assert body["memories"][0]["updated_at"].endswith("Z")


def test_route_notes_list_most_recently_updated_first(api_client, issued, route):
    url = ROUTE_NOTES.format(route.key)
    first = _save(api_client, issued.access_token, url, "一").json()["memory_id"]
    _save(api_client, issued.access_token, url, "二")
    _patch(api_client, issued.access_token, f"{url}/{first}", {"content": "一（改）"})
    listed = api_client.get(url, **bearer(issued.access_token)).json()["memories"]
    assert [item["content"] for item in listed] == ["一（改）", "二"]


def test_project_notes_list_newest_first(api_client, issued, route):
    url = PROJECT_NOTES.format(route.key)
    first = _save(api_client, issued.access_token, url, "一").json()["memory_id"]
    _save(api_client, issued.access_token, url, "二")
    _patch(api_client, issued.access_token, f"{url}/{first}", {"content": "一（改）"})
    listed = api_client.get(url, **bearer(issued.access_token)).json()["memories"]
    assert [item["content"] for item in listed] == ["二", "一（改）"]


@pytest.mark.parametrize(("template", "limit", "expected"), [
    (ROUTE_NOTES, None, 20), (ROUTE_NOTES, "5", 5), (ROUTE_NOTES, "0", 1), (ROUTE_NOTES, "1000", 25),
    (PROJECT_NOTES, None, 12), (PROJECT_NOTES, "-3", 1), (PROJECT_NOTES, "50", 25),
])
def test_list_limits_default_and_clamp(api_client, issued, route, template, limit, expected):
    url = template.format(route.key)
    for n in range(25):
        _save(api_client, issued.access_token, url, f"note {n}")
    query = {} if limit is None else {"limit": limit}
    listed = api_client.get(url, query, **bearer(issued.access_token)).json()["memories"]
    assert len(listed) == expected


def test_project_notes_clamp_at_50(api_client, issued, route):
    url = PROJECT_NOTES.format(route.key)
    for n in range(51):
        _save(api_client, issued.access_token, url, f"note {n}")
    assert len(api_client.get(url, {"limit": 100}, **bearer(issued.access_token)).json()["memories"]) == 50


def test_route_notes_clamp_at_100(api_client, issued, route):
    url = ROUTE_NOTES.format(route.key)
    for n in range(101):
        _save(api_client, issued.access_token, url, f"note {n}")
    assert len(api_client.get(url, {"limit": 1000}, **bearer(issued.access_token)).json()["memories"]) == 100


def test_a_limit_that_is_not_an_integer_is_refused(api_client, issued, notes_url):
    response = api_client.get(notes_url, {"limit": "ten"}, **bearer(issued.access_token))
    assert response.status_code == 400
    assert response.json()["fields"] == {"limit": ["A valid integer is required."]}


def test_a_repeated_limit_is_refused_as_on_the_tool_reads(api_client, issued, notes_url):
    response = api_client.get(f"{notes_url}?limit=1&limit=50", **bearer(issued.access_token))
    body = response.json()
    assert (response.status_code, body["error"], body["field"]) == (400, "invalid_request", "limit")


@pytest.mark.parametrize("content", ["", "   ", "\n\t"])
def test_empty_content_is_refused(api_client, issued, notes_url, content):
    response = _save(api_client, issued.access_token, notes_url, content)
    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["content"]
    assert MemoryNote.objects.count() == 0


@pytest.mark.parametrize("body", [{}, {"content": 5}, {"content": None}, {"content": "a\x00"},
                                  {"content": "ok", "pinned": True}])
def test_invalid_bodies_are_refused(api_client, issued, notes_url, body):
    response = post_json(api_client, notes_url, body, issued.access_token)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert MemoryNote.objects.count() == 0


@pytest.mark.parametrize("content_type", ["*/*", "application/*", "*/json"])
def test_a_media_range_as_content_type_is_415_and_saves_nothing(api_client, issued, notes_url, content_type):
    response = api_client.generic("POST", notes_url, '{"content": "记住：周一盘点。"}', content_type=content_type,
                                  **bearer(issued.access_token))
    assert (response.status_code, response.json()["error"]) == (415, "unsupported_media_type")
    assert response["Cache-Control"] == "no-store"
    assert MemoryNote.objects.count() == 0


def test_project_notes_are_at_most_2000_characters(api_client, issued, route):
    url = PROJECT_NOTES.format(route.key)
    assert _save(api_client, issued.access_token, url, "记" * 2001).status_code == 400
    assert MemoryNote.objects.count() == 0
    assert _save(api_client, issued.access_token, url, "记" * 2000).status_code == 200


def test_route_notes_are_at_most_8000_characters(api_client, issued, route):
    url = ROUTE_NOTES.format(route.key)
    assert _save(api_client, issued.access_token, url, "记" * 8001).status_code == 400
    assert _save(api_client, issued.access_token, url, "记" * 8000).status_code == 200


def test_content_is_stored_verbatim(api_client, issued, notes_url):
    _save(api_client, issued.access_token, notes_url, "  两端空白\n保留  ")
    assert MemoryNote.objects.get().content == "  两端空白\n保留  "


def test_updating_a_note(api_client, issued, notes_url):
    note_id = _save(api_client, issued.access_token, notes_url, "旧").json()["memory_id"]
    response = _patch(api_client, issued.access_token, f"{notes_url}/{note_id}", {"content": "新"})
    assert response.status_code == 200
    assert response.json() == {"status": "updated", "memory_id": note_id, "content": "新"}
    assert MemoryNote.objects.get().content == "新"


def test_updating_with_empty_content_is_refused(api_client, issued, notes_url):
    note_id = _save(api_client, issued.access_token, notes_url, "旧").json()["memory_id"]
    response = _patch(api_client, issued.access_token, f"{notes_url}/{note_id}", {"content": " "})
    assert response.status_code == 400
    assert MemoryNote.objects.get().content == "旧"


def test_deleting_a_note(api_client, issued, notes_url):
    note_id = _save(api_client, issued.access_token, notes_url, "旧").json()["memory_id"]
    response = api_client.delete(f"{notes_url}/{note_id}", **bearer(issued.access_token))
    assert response.status_code == 200
    assert response.json() == {"status": "deleted", "memory_id": note_id}
    assert MemoryNote.objects.count() == 0


@pytest.mark.parametrize("note_id", ["6d1c5a4e-0b7f-4c0e-9a51-3f2d8e1b7c90", "not-a-uuid"])
def test_an_unknown_note_is_not_found(api_client, issued, notes_url, note_id):
    for response in (_patch(api_client, issued.access_token, f"{notes_url}/{note_id}", {"content": "x"}),
                     api_client.delete(f"{notes_url}/{note_id}", **bearer(issued.access_token))):
        assert response.status_code == 404
        assert response.json()["error"] == "memory_not_found"


def test_another_principal_neither_lists_nor_changes_my_notes(api_client, issued, bob, notes_url):
    note_id = _save(api_client, issued.access_token, notes_url, "Ada 的笔记").json()["memory_id"]
    assert api_client.get(notes_url, **bearer(bob.access_token)).json()["memories"] == []
    patched = _patch(api_client, bob.access_token, f"{notes_url}/{note_id}", {"content": "改掉"})
    deleted = api_client.delete(f"{notes_url}/{note_id}", **bearer(bob.access_token))
    assert (patched.status_code, deleted.status_code) == (404, 404)
    assert (patched.json()["error"], deleted.json()["error"]) == ("memory_not_found", "memory_not_found")
    assert MemoryNote.objects.get().content == "Ada 的笔记"


@pytest.mark.parametrize("principal", [{**PRINCIPAL, "tenant": "store-8"}, {**PRINCIPAL, "id": "u-2002"},
                                       {key: value for key, value in PRINCIPAL.items() if key != "tenant"}],
                         ids=["another tenant", "another principal id", "no tenant"])
def test_a_principal_of_another_tenant_or_id_acting_for_the_same_person_does_not_reach_my_notes(
        api_client, issued, agent_client, notes_url, principal):
    """Tenants may reuse user ids, and one person may be served by several principals: notes
    belong to the whole identity, never to `on_behalf_of` alone."""
    note_id = _save(api_client, issued.access_token, notes_url, "Ada 的笔记").json()["memory_id"]
    other = session_for(agent_client, principal=principal)  # the same on_behalf_of as Ada's session
    listed = api_client.get(notes_url, **bearer(other.access_token)).json()["memories"]
    patched = _patch(api_client, other.access_token, f"{notes_url}/{note_id}", {"content": "改掉"})
    deleted = api_client.delete(f"{notes_url}/{note_id}", **bearer(other.access_token))
    assert (listed, patched.status_code, deleted.status_code) == ([], 404, 404)
    assert MemoryNote.objects.get().content == "Ada 的笔记"
    saved = _save(api_client, other.access_token, notes_url, "另一位的笔记")
    assert saved.status_code == 200
    assert [item["content"] for item in api_client.get(notes_url, **bearer(issued.access_token)).json()["memories"]] \
        == ["Ada 的笔记"]


def test_the_same_principal_in_a_new_session_keeps_their_notes(api_client, issued, agent_client, notes_url):
    _save(api_client, issued.access_token, notes_url, "记住我")
    later = session_for(agent_client)
    assert [item["content"] for item in api_client.get(notes_url, **bearer(later.access_token)).json()["memories"]] \
        == ["记住我"]


def test_route_notes_do_not_follow_the_principal_to_another_route(api_client, issued, route, hr_route):
    _save(api_client, issued.access_token, ROUTE_NOTES.format(route.key), "门店笔记")
    assert api_client.get(ROUTE_NOTES.format(hr_route.key), **bearer(issued.access_token)).json()["memories"] == []


def test_project_notes_are_shared_by_the_routes_of_the_project(api_client, issued, route, hr_route):
    _save(api_client, issued.access_token, PROJECT_NOTES.format(route.key), "项目笔记")
    listed = api_client.get(PROJECT_NOTES.format(hr_route.key), **bearer(issued.access_token)).json()["memories"]
    assert [item["content"] for item in listed] == ["项目笔记"]


def test_a_route_note_cannot_be_reached_through_another_route(api_client, issued, route, hr_route):
    note_id = _save(api_client, issued.access_token, ROUTE_NOTES.format(route.key), "n").json()["memory_id"]
    response = api_client.delete(f"{ROUTE_NOTES.format(hr_route.key)}/{note_id}", **bearer(issued.access_token))
    assert response.status_code == 404
    assert MemoryNote.objects.count() == 1


def test_a_project_note_is_not_a_route_note(api_client, issued, route):
    note_id = _save(api_client, issued.access_token, PROJECT_NOTES.format(route.key), "n").json()["memory_id"]
    response = api_client.delete(f"{ROUTE_NOTES.format(route.key)}/{note_id}", **bearer(issued.access_token))
    assert response.status_code == 404
    assert MemoryNote.objects.count() == 1


def test_notes_of_the_same_principal_in_another_project_stay_there(api_client, issued, route):
    other = RouteFactory(key="store-assistant")
    MemoryNote.objects.create(scope="project", project=other.project, principal_tenant=PRINCIPAL["tenant"],
                              principal_id=PRINCIPAL["id"], on_behalf_of="ada@example.com", content="x")
    assert api_client.get(PROJECT_NOTES.format(route.key), **bearer(issued.access_token)).json()["memories"] == []


def test_notes_need_the_runtime_switch(api_client, issued, route, notes_url):
    route_update(route=route, agent_client_enabled=False)
    response = _save(api_client, issued.access_token, notes_url, "n")
    assert response.status_code == 403
    assert response.json()["error"] == "agent_client_disabled"
    assert MemoryNote.objects.count() == 0


def test_notes_need_the_agent_bearer(api_client, notes_url):
    assert api_client.get(notes_url).status_code == 401


def test_a_listing_of_large_notes_stays_under_one_mebibyte_and_says_what_it_left_out(api_client, issued, route):
    url = ROUTE_NOTES.format(route.key)
    for index in range(100):  # 100 notes of 8000 four-byte characters: 3.2 MB of content
        assert _save(api_client, issued.access_token, url, f"{index:03d}" + "😀" * 7997).status_code == 200

    response = api_client.get(url, {"limit": 100}, **bearer(issued.access_token))

    body = response.json()
    assert response.status_code == 200
    assert len(response.content) <= 1024 * 1024
    assert (body["truncated"], len(body["memories"]) + body["omitted"]) == (True, 100)
    assert body["memories"][0]["content"].startswith("099")  # the newest first, whole
    assert len(body["memories"][0]["content"]) == 8000


def test_a_listing_that_fits_carries_no_truncation_fields(api_client, issued, route):
    url = ROUTE_NOTES.format(route.key)
    _save(api_client, issued.access_token, url, "短笔记")
    body = api_client.get(url, **bearer(issued.access_token)).json()
    assert "truncated" not in body and "omitted" not in body


def test_a_listing_reads_as_many_statements_for_four_notes_as_for_one(api_client, issued, notes_url):
    _save(api_client, issued.access_token, notes_url, "note 0")
    with_one = get_statements(api_client, notes_url, **bearer(issued.access_token))
    for n in range(1, 4):
        _save(api_client, issued.access_token, notes_url, f"note {n}")
    assert get_statements(api_client, notes_url, **bearer(issued.access_token)) == with_one
