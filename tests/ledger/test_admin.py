"""The operator's read-only ledger, scoped to their projects."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.agent_auth.models import AgentSession
from apps.agent_auth.services import session_revoke
from apps.ledger.models import MESSAGE_TERMS_CHARS, Conversation, MemoryNote, Message, Run
from apps.ledger.selectors import message_search
from apps.projects.models import Membership
from tests.ledger.helpers import complete_run, ledger_counts, open_turn, post_json
from tests.projects.factories import MembershipFactory


def _admin(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def ledger(api_client, issued, route):
    run_id = open_turn(api_client, issued.access_token, route.key).json()["run_id"]
    complete_run(api_client, issued.access_token, run_id, content="答复：Ada 在三号店。")
    post_json(api_client, f"/agent-api/v1/workspaces/{route.key}/memories", {"content": "偏好简体中文"},
              issued.access_token)
    return Run.objects.get()


@pytest.fixture
def viewer(route):
    return MembershipFactory(project=route.project, role=Membership.Role.VIEWER)


@pytest.fixture
def owner(route):
    return MembershipFactory(project=route.project, role=Membership.Role.OWNER)


def test_conversations_list_by_route_and_principal(ledger, viewer):
    response = _admin(viewer.user).get("/admin/ledger/conversation/")
    assert response.status_code == 200
    assert list(response.context["cl"].queryset) == [ledger.conversation]
    assert "ada@example.com" in response.content.decode()


def test_a_conversation_shows_its_messages_and_runs(ledger, viewer):
    page = _admin(viewer.user).get(f"/admin/ledger/conversation/{ledger.conversation_id}/change/").content.decode()
    assert "答复：Ada 在三号店。" in page
    assert "帮我查一下员工 Ada (1)" in page
    assert str(ledger.pk) in page


def test_a_run_shows_state_revisions_timings_and_the_frozen_context(ledger, viewer):
    page = _admin(viewer.user).get(f"/admin/ledger/run/{ledger.pk}/change/").content.decode()
    for text in (ledger.profile_revision, ledger.capability_revision, ledger.request_hash, "Completed",
                 "memory_refs"):
        assert text in page


def test_memory_notes_list_per_route(ledger, viewer):
    response = _admin(viewer.user).get("/admin/ledger/memorynote/")
    assert [note.content for note in response.context["cl"].queryset] == ["偏好简体中文"]


@pytest.mark.parametrize("model", ["conversation", "run", "memorynote"])
def test_an_operator_of_another_project_sees_nothing(ledger, model):
    stranger = MembershipFactory(role=Membership.Role.OWNER)
    response = _admin(stranger.user).get(f"/admin/ledger/{model}/")
    assert response.status_code == 200
    assert list(response.context["cl"].queryset) == []


def test_an_operator_of_another_project_cannot_open_a_run(ledger):
    stranger = MembershipFactory(role=Membership.Role.OWNER)
    response = _admin(stranger.user).get(f"/admin/ledger/run/{ledger.pk}/change/")
    assert response.status_code == 302  # the admin redirects to its index for an object it hides


@pytest.mark.parametrize("path", [
    "/admin/ledger/conversation/add/", "/admin/ledger/run/add/", "/admin/ledger/memorynote/add/",
])
def test_even_an_owner_cannot_add_ledger_rows(ledger, owner, path):
    assert _admin(owner.user).get(path).status_code == 403


def test_even_an_owner_cannot_change_or_delete_a_run(ledger, owner):
    admin = _admin(owner.user)
    before = ledger_counts()
    assert admin.post(f"/admin/ledger/run/{ledger.pk}/change/", {"state": "failed"}).status_code == 403
    assert admin.post(f"/admin/ledger/run/{ledger.pk}/delete/", {"post": "yes"}).status_code == 403
    note = MemoryNote.objects.get()
    assert admin.post(f"/admin/ledger/memorynote/{note.pk}/delete/", {"post": "yes"}).status_code == 403
    assert ledger_counts() == before
    assert Run.objects.get().state == "completed"


def test_the_run_list_does_not_grow_queries_with_rows(api_client, issued, route, viewer):
    open_turn(api_client, issued.access_token, route.key, 1)
    admin = _admin(viewer.user)
    with CaptureQueriesContext(connection) as one:
        admin.get("/admin/ledger/run/")
    for n in range(2, 7):
        open_turn(api_client, issued.access_token, route.key, n, client_conversation_id=f"c-{n}")
    with CaptureQueriesContext(connection) as many:
        admin.get("/admin/ledger/run/")
    assert len(many) == len(one)
    assert Conversation.objects.count() == 6


def test_the_route_filter_never_names_another_projects_routes(ledger, viewer):
    from tests.routes.factories import RouteFactory

    RouteFactory(key="secret-route", name="Another project's secret route")
    page = _admin(viewer.user).get("/admin/ledger/conversation/").content.decode()
    assert "门店助手" in page
    assert "secret route" not in page


# Filters by route and by date; messages; the frozen context as readable text.

@pytest.fixture
def two_routes(api_client, route, viewer):
    """Turns on two routes of one project; the second route's run and messages are a year old."""
    from datetime import timedelta

    from django.utils import timezone

    from apps.ledger.models import Message
    from tests.agent_auth.factories import AgentClientFactory
    from tests.agent_auth.helpers import session_for
    from tests.routes.factories import RouteFactory

    other = RouteFactory(project=route.project, key="hr-helpdesk", name="HR Helpdesk")
    for r in (route, other):
        issued = session_for(AgentClientFactory(project=route.project, allowed_routes=[r.key]))
        open_turn(api_client, issued.access_token, r.key, user_input=f"问题 {r.key}")
    old = timezone.now() - timedelta(days=365)
    Run.objects.filter(route=other).update(created_at=old)
    Conversation.objects.filter(route=other).update(created_at=old)
    Message.objects.filter(conversation__route=other).update(created_at=old)
    return route, other


@pytest.mark.parametrize("model, route_param", [
    ("run", "route__id__exact"), ("conversation", "route__id__exact"),
    ("message", "conversation__route__id__exact"),
])
def test_ledger_lists_filter_by_route(two_routes, viewer, model, route_param):
    _, other = two_routes
    response = _admin(viewer.user).get(f"/admin/ledger/{model}/", {route_param: str(other.pk)})
    assert response.status_code == 200
    rows = list(response.context["cl"].queryset)
    assert len(rows) == 1
    assert (rows[0].conversation.route if model == "message" else rows[0].route) == other


@pytest.mark.parametrize("model", ["run", "conversation", "message"])
def test_ledger_lists_filter_by_date_range(two_routes, viewer, model):
    from datetime import datetime, time, timedelta

    from django.utils import timezone

    route, _ = two_routes
    today = timezone.make_aware(datetime.combine(timezone.localdate(), time()))
    # The parameters of the date filter's "Past 7 days" choice.
    response = _admin(viewer.user).get(f"/admin/ledger/{model}/", {
        "created_at__gte": str(today - timedelta(days=7)), "created_at__lt": str(today + timedelta(days=1))})
    rows = list(response.context["cl"].queryset)
    assert len(rows) == 1
    assert (rows[0].conversation.route if model == "message" else rows[0].route) == route


@pytest.mark.parametrize("path", ["/admin/ledger/run/", "/admin/ledger/message/", "/admin/tools/invocation/",
                                  "/admin/ledger/ragquery/"])
def test_the_ledgers_growing_lists_never_read_the_whole_list_for_dates(ledger, viewer, path):
    """The date drill-down's DISTINCT months and MIN/MAX read every row of the list on each load."""
    with CaptureQueriesContext(connection) as queries:
        assert _admin(viewer.user).get(path).status_code == 200
    assert not [q["sql"] for q in queries if "DATE_TRUNC" in q["sql"].upper() or "MIN(" in q["sql"].upper()]


def test_the_message_list_shows_route_conversation_and_content(ledger, viewer):
    response = _admin(viewer.user).get("/admin/ledger/message/")
    assert response.status_code == 200
    assert [(m.sequence, m.role) for m in response.context["cl"].queryset.order_by("sequence")] == [
        (1, "user"), (2, "assistant")]
    page = response.content.decode()
    assert "答复：Ada 在三号店。" in page
    assert "门店助手" in page


def test_an_operator_of_another_project_sees_no_messages(ledger):
    stranger = MembershipFactory(role=Membership.Role.OWNER)
    response = _admin(stranger.user).get("/admin/ledger/message/")
    assert list(response.context["cl"].queryset) == []


def test_even_an_owner_cannot_change_or_delete_a_message(ledger, owner):
    from apps.ledger.models import Message

    message = Message.objects.order_by("sequence").first()
    before = ledger_counts()
    admin = _admin(owner.user)
    assert admin.post(f"/admin/ledger/message/{message.pk}/change/", {"content": "x"}).status_code == 403
    assert admin.post(f"/admin/ledger/message/{message.pk}/delete/", {"post": "yes"}).status_code == 403
    assert ledger_counts() == before
    assert Message.objects.get(pk=message.pk).content == message.content


def test_the_message_list_does_not_grow_queries_with_rows(api_client, issued, route, viewer):
    open_turn(api_client, issued.access_token, route.key, 1)
    admin = _admin(viewer.user)
    admin.get("/admin/ledger/message/")
    with CaptureQueriesContext(connection) as one:
        admin.get("/admin/ledger/message/")
    expected = len(one.captured_queries)
    for n in range(2, 7):
        open_turn(api_client, issued.access_token, route.key, n, client_conversation_id=f"c-{n}")
    with CaptureQueriesContext(connection) as many:
        admin.get("/admin/ledger/message/")
    assert len(many.captured_queries) == expected


def test_the_run_page_shows_the_frozen_context_with_real_line_breaks(api_client, issued, route, viewer):
    from apps.routes.services import route_update

    route_update(route=route, system_prompt="第一行：你是门店助手。\n第二行：回答要简洁。")
    run_id = open_turn(api_client, issued.access_token, route.key, user_input="多行\n问题").json()["run_id"]
    page = _admin(viewer.user).get(f"/admin/ledger/run/{run_id}/change/").content.decode()
    context_block = page.split('<div class="bh-context">', 1)[1].split("</details>", 1)[0]
    readable_part = context_block.split('<details class="bh-raw">', 1)[0]
    assert "第一行：你是门店助手。\n第二行：回答要简洁。" in readable_part
    assert "\\n" not in readable_part
    assert "<dt>instructions</dt>" in readable_part


def test_the_run_page_keeps_the_raw_json_one_click_away(ledger, viewer):
    page = _admin(viewer.user).get(f"/admin/ledger/run/{ledger.pk}/change/").content.decode()
    raw = page.split('<details class="bh-raw">', 1)[1].split("</details>", 1)[0]
    assert "The context as JSON" in raw
    assert "&quot;memory_refs&quot;: [" in raw


def test_an_open_run_of_an_ended_session_says_it_will_never_be_completed(api_client, issued, route, viewer):
    open_turn(api_client, issued.access_token, route.key, 1)
    admin = _admin(viewer.user)
    run = Run.objects.get()
    assert run.state == Run.State.CONTEXT_READY
    assert "never completed" not in admin.get("/admin/ledger/run/").content.decode()

    session_revoke(session=issued.session, revoked_by=AgentSession.RevokedBy.AGENT, reason="signed out")
    listed = admin.get("/admin/ledger/run/").content.decode()
    assert "Context ready<br><span class=\"bh-muted\">never completed: the session was revoked</span>" in listed
    page = admin.get(f"/admin/ledger/run/{run.pk}/change/").content.decode()
    assert "never completed: the session was revoked" in page
    page = admin.get(f"/admin/ledger/conversation/{run.conversation_id}/change/").content.decode()
    assert "never completed: the session was revoked" in page
    run.refresh_from_db()
    assert run.state == Run.State.CONTEXT_READY

    AgentSession.objects.filter(pk=issued.session.pk).update(revoked_at=None,
                                                             refresh_expires_at=timezone.now() - timedelta(seconds=1))
    assert "never completed: the session has ended" in admin.get("/admin/ledger/run/").content.decode()


def test_a_completed_run_of_a_revoked_session_reads_completed(ledger, issued, viewer):
    session_revoke(session=issued.session, revoked_by=AgentSession.RevokedBy.AGENT, reason="signed out")
    listed = _admin(viewer.user).get("/admin/ledger/run/").content.decode()
    assert "Completed" in listed
    assert "never completed" not in listed


def test_a_long_conversation_shows_its_newest_messages_and_runs_and_links_the_rest(api_client, issued, route, viewer,
                                                                                monkeypatch):
    from apps.ledger import admin as ledger_admin

    monkeypatch.setattr(ledger_admin, "MESSAGE_ROWS_MAX", 3)
    monkeypatch.setattr(ledger_admin, "RUN_ROWS_MAX", 2)
    for n in range(1, 4):
        run_id = open_turn(api_client, issued.access_token, route.key, n).json()["run_id"]
        complete_run(api_client, issued.access_token, run_id, n, content=f"答复 {n}")
    conversation = Conversation.objects.get()
    assert conversation.message_count == 6
    admin = _admin(viewer.user)
    response = admin.get(f"/admin/ledger/conversation/{conversation.pk}/change/")
    inlines = {formset.opts.model: formset for formset in response.context["inline_admin_formsets"]}
    assert [form.instance.sequence for form in inlines[Message].formset.forms] == [4, 5, 6]
    newest_runs = list(Run.objects.order_by("-created_at").values_list("pk", flat=True)[:2])
    assert sorted(form.instance.pk for form in inlines[Run].formset.forms) == sorted(newest_runs)
    page = response.content.decode()
    assert "Below: the newest 3 of 6 messages and the newest 2 of 3 runs." in page

    listed = admin.get("/admin/ledger/message/", {"conversation__id__exact": str(conversation.pk)})
    assert listed.status_code == 200
    assert listed.context["cl"].result_count == 6
    runs = admin.get("/admin/ledger/run/", {"conversation__id__exact": str(conversation.pk)})
    assert runs.status_code == 200
    assert runs.context["cl"].result_count == 3


def test_a_short_conversation_shows_every_message(ledger, viewer):
    response = _admin(viewer.user).get(f"/admin/ledger/conversation/{ledger.conversation_id}/change/")
    inlines = {formset.opts.model: formset for formset in response.context["inline_admin_formsets"]}
    assert [form.instance.sequence for form in inlines[Message].formset.forms] == [1, 2]
    assert "Below: its 2 messages and its 1 run." in response.content.decode()


@pytest.fixture
def searchable(api_client, issued, route):
    """Two turns of one conversation and one of another: words, a Chinese phrase, ids to find them by."""
    runs = []
    for n, (asked, answered, conversation) in enumerate([
        ("My refund has not arrived", "已为您查询：包裹在杭州转运中心。", "local-conversation-1"),
        ("发票抬头写错了，可以重开吗？", "可以重开增值税专用发票。", "local-conversation-1"),
        ("Where is my parcel?", "退貨已受理。", "conversation-10"),
    ], start=1):
        run_id = open_turn(api_client, issued.access_token, route.key, n, user_input=asked,
                           client_conversation_id=conversation).json()["run_id"]
        complete_run(api_client, issued.access_token, run_id, n, content=answered)
        runs.append(Run.objects.get(pk=run_id))
    return runs


def _found(user, text: str) -> list[str]:
    response = _admin(user).get("/admin/ledger/message/", {"q": text})
    assert response.status_code == 200
    return sorted(message.content for message in response.context["cl"].queryset)


def test_the_message_search_finds_words_and_chinese_phrases_by_their_terms(searchable, viewer):
    assert _found(viewer.user, "refunds") == ["My refund has not arrived"]  # a word by its stem
    assert _found(viewer.user, "转运中心") == ["已为您查询：包裹在杭州转运中心。"]
    assert _found(viewer.user, "增值税 重开") == ["可以重开增值税专用发票。"]  # every word
    assert _found(viewer.user, "退货") == ["退貨已受理。"]  # Traditional folded onto Simplified
    assert _found(viewer.user, "运转") == []  # the characters, not in that order


def test_the_message_search_finds_ids_exactly(searchable, viewer):
    first, _second, third = searchable
    assert _found(viewer.user, str(first.pk)) == ["My refund has not arrived", "已为您查询：包裹在杭州转运中心。"]
    assert _found(viewer.user, "conversation-10") == ["Where is my parcel?", "退貨已受理。"]
    assert _found(viewer.user, "conversation-1") == []  # a conversation id is matched whole
    assert _found(viewer.user, "assistant-message-3") == ["退貨已受理。"]
    assert len(_found(viewer.user, third.conversation.on_behalf_of)) == 6


def test_the_message_search_shows_no_other_projects_messages(searchable):
    stranger = MembershipFactory(role=Membership.Role.OWNER)
    assert _found(stranger.user, "refund") == []


def test_the_message_search_reads_no_content_by_substring_and_counts_no_whole_list(searchable, viewer):
    """A substring match of the content reads every message of the operator's projects (1 to 2 s
    at 200,000); so does the whole list's count beside the search's."""
    with CaptureQueriesContext(connection) as queries:
        response = _admin(viewer.user).get("/admin/ledger/message/", {"q": "转运中心"})
    assert response.context["cl"].result_count == 1
    assert response.context["cl"].full_result_count is None
    assert not [q["sql"] for q in queries if "LIKE" in q["sql"] and "ledger_message" in q["sql"]]


def _runs_found(user, text: str) -> list[str]:
    response = _admin(user).get("/admin/ledger/run/", {"q": text})
    assert response.status_code == 200
    return sorted(run.client_turn_id for run in response.context["cl"].queryset)


def test_the_run_search_finds_runs_by_their_ids_exactly(searchable, viewer):
    first, second, third = searchable
    assert _runs_found(viewer.user, str(second.pk)) == ["turn-2"]
    assert _runs_found(viewer.user, "turn-3") == ["turn-3"]
    assert _runs_found(viewer.user, "message-1") == ["turn-1"]
    assert _runs_found(viewer.user, "local-conversation-1") == ["turn-1", "turn-2"]
    assert _runs_found(viewer.user, "conversation-1") == []  # an id is matched whole
    assert _runs_found(viewer.user, f"local-conversation-1 {first.user_message_id}") == ["turn-1"]  # every word
    assert _runs_found(viewer.user, third.conversation.on_behalf_of) == ["turn-1", "turn-2", "turn-3"]


def test_the_run_search_reads_no_id_by_substring(searchable, viewer):
    """A substring match of the ids reads every run of the operator's projects, for the page and
    again for its count (330 to 430 ms at 100,000 runs)."""
    with CaptureQueriesContext(connection) as queries:
        response = _admin(viewer.user).get("/admin/ledger/run/", {"q": "turn-2"})
    assert response.context["cl"].result_count == 1
    assert not [q["sql"] for q in queries if "LIKE" in q["sql"] and "ledger_run" in q["sql"]]


@pytest.fixture
def phrases(api_client, issued, route) -> dict[str, str]:
    """Messages that hold "refund" and "policy" (退款 and 政策) as a phrase and otherwise, and a
    conversation whose id has spaces in it."""
    texts = {
        "phrase": "Our refund policy changed.", "joined": "REFUND-policy: 30 days.",
        "broken": "Refund\n  policy applies.", "reversed": "The policy on a refund.",
        "far": "refund " + "word " * 500 + "policy", "prefix": "A prefund policy, then a refund.",
        # The phrase only beyond the characters a message is searched in.
        "beyond": "Policy, then refund. " + "x" * MESSAGE_TERMS_CHARS + " refund policy",
        "cjk": "我们的退款政策已更新。", "cjk_scattered": "政策：款政不同于退款。",
        "traditional": "退貨政策已公佈。", "parcel": "Where is my parcel?", "depot": "It left the depot.",
    }
    pairs = [("phrase", "joined"), ("broken", "reversed"), ("far", "prefix"), ("beyond", "cjk"),
             ("cjk_scattered", "traditional"), ("parcel", "depot")]
    for n, (asked, answered) in enumerate(pairs, start=1):
        conversation = "shop 7 refund policy" if asked == "parcel" else "local-conversation-1"
        run_id = open_turn(api_client, issued.access_token, route.key, n, user_input=texts[asked],
                           client_conversation_id=conversation).json()["run_id"]
        complete_run(api_client, issued.access_token, run_id, n, content=texts[answered])
    assert Message.objects.count() == 12
    return texts


def _texts(texts: dict[str, str], *names: str) -> list[str]:
    return sorted(texts[name] for name in names)


def test_a_quoted_phrase_finds_its_words_in_that_order_next_to_each_other(phrases, viewer):
    assert _found(viewer.user, '"refund policy"') == _texts(phrases, "phrase", "joined", "broken")
    assert _found(viewer.user, "'Refund, POLICY'") == _texts(phrases, "phrase", "joined", "broken")
    assert _found(viewer.user, '"policy refund"') == []


def test_a_word_joined_by_punctuation_is_a_phrase(phrases, viewer):
    assert _found(viewer.user, "refund-policy") == _texts(phrases, "phrase", "joined", "broken")


def test_unquoted_words_match_in_any_order_by_their_stems(phrases, viewer):
    assert _found(viewer.user, "policies refund") == _texts(phrases, "phrase", "joined", "broken", "reversed", "far",
                                                              "prefix", "beyond")


def test_a_chinese_phrase_finds_its_characters_only_in_that_order(phrases, viewer):
    assert _found(viewer.user, "退款政策") == _texts(phrases, "cjk")
    assert _found(viewer.user, '"退款政策"') == _texts(phrases, "cjk")
    assert _found(viewer.user, "退货政策") == _texts(phrases, "traditional")  # Traditional folded onto Simplified


def test_a_phrase_is_searched_in_the_characters_the_terms_are_made_of(phrases, viewer):
    """A phrase only beyond a message's first MESSAGE_TERMS_CHARS characters is not found, as a
    word only there is not; one within them is."""
    assert _found(viewer.user, '"then refund"') == _texts(phrases, "beyond")
    assert phrases["beyond"] not in _found(viewer.user, '"refund policy"')


def test_a_quoted_id_with_spaces_still_finds_its_conversation(phrases, viewer):
    assert _found(viewer.user, '"shop 7 refund policy"') == _texts(phrases, "parcel", "depot")


def test_a_phrase_is_checked_on_the_rows_the_terms_index_found(phrases):
    queryset = message_search(queryset=Message.objects.all(), text='"refund policy"')
    with connection.cursor() as cursor:
        # A dozen rows: reading them all, or the whole foreign key's index in order, is cheaper still.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_indexscan = off")
        sql, params = queryset.query.sql_with_params()
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Bitmap Index Scan on ledger_message_search_terms" in plan, plan
    assert "Seq Scan on ledger_message" not in plan, plan
    # The phrase's order: a filter of the rows the bitmap found, not a condition that reads others.
    filtered = r'Bitmap Heap Scan on ledger_message .*\n.*Recheck Cond: .*\n.*Filter: .*"left"\(content, \d+\) ~ '
    assert re.search(filtered, plan), plan


def test_the_message_pages_do_not_read_the_search_terms(searchable, viewer):
    """A CJK message's terms (its characters and pairs) are larger than its text."""
    admin = _admin(viewer.user)
    message = Message.objects.order_by("sequence").first()
    with CaptureQueriesContext(connection) as queries:
        for path in ("/admin/ledger/message/", f"/admin/ledger/message/{message.pk}/change/",
                     f"/admin/ledger/conversation/{message.conversation_id}/change/"):
            assert admin.get(path).status_code == 200
    assert not [q["sql"] for q in queries if '"ledger_message"."search_terms"' in q["sql"]]


LEDGER_LISTS_WITH_A_ROUTE_FILTER = ["/admin/ledger/conversation/", "/admin/ledger/run/", "/admin/ledger/message/",
                                    "/admin/ledger/memorynote/", "/admin/tools/invocation/", "/admin/tools/approval/",
                                    "/admin/ledger/ragquery/"]


@pytest.mark.parametrize("path", LEDGER_LISTS_WITH_A_ROUTE_FILTER)
def test_the_route_filter_offers_the_operators_routes_from_the_route_table(ledger, viewer, path):
    """Reading the distinct routes of the list's rows read the whole ledger on each load (30 to 50 ms
    at 100,000 runs); a route with nothing in the list yet is offered as well."""
    from tests.routes.factories import RouteFactory

    RouteFactory(project=ledger.route.project, key="quiet-route", name="A quiet route")
    RouteFactory(key="secret-route", name="Another project's secret route")
    with CaptureQueriesContext(connection) as queries:
        response = _admin(viewer.user).get(path)
    assert response.status_code == 200
    routes = next(spec for spec in response.context["cl"].filter_specs if spec.title == "route")
    assert [name for _, name in routes.lookup_choices] == ["A quiet route (quiet-route)", "门店助手 (store-assistant)"]
    assert not [q["sql"] for q in queries if re.search(r'DISTINCT [^,]*"route_id"', q["sql"])]


def test_many_routes_are_offered_in_a_drop_down_that_keeps_the_other_filters(ledger, viewer, monkeypatch):
    from apps.routes import admin as routes_admin
    from tests.routes.factories import RouteFactory

    RouteFactory(project=ledger.route.project, key="quiet-route", name="A quiet route")
    monkeypatch.setattr(routes_admin, "ROUTE_FILTER_LINKS", 2)
    admin = _admin(viewer.user)
    page = admin.get("/admin/ledger/run/", {"state__exact": "completed", "o": "1"}).content.decode()
    form = page.split('<form method="get" class="bh-filter-select">', 1)[1].split("</form>", 1)[0]
    assert '<input type="hidden" name="state__exact" value="completed">' in form
    assert '<input type="hidden" name="o" value="1">' in form
    assert f'<option value="{ledger.route_id}">门店助手 (store-assistant)</option>' in form
    assert '<option value="" selected>All</option>' in form
    # "All" sends the parameter empty: the whole list, not an error.
    response = admin.get("/admin/ledger/run/", {"state__exact": "completed", "route__id__exact": ""})
    assert response.status_code == 200
    assert list(response.context["cl"].queryset) == [ledger]


@pytest.mark.parametrize("path", LEDGER_LISTS_WITH_A_ROUTE_FILTER)
def test_every_list_with_a_route_filter_shows_its_counts(ledger, viewer, path):
    """The memory notes' route may be empty (a project's notes): its count is asked for as well."""
    from tests.routes.factories import RouteFactory

    RouteFactory(project=ledger.route.project, key="quiet-route", name="A quiet route")
    response = _admin(viewer.user).get(path, {"_facets": "True"})
    assert response.status_code == 200
    routes = next(spec for spec in response.context["cl"].filter_specs if spec.title == "route")
    assert [choice["display"] for choice in routes.choices(response.context["cl"])][1:3] == [
        "A quiet route (quiet-route) (0)", f"门店助手 (store-assistant) ({response.context['cl'].result_count})"]


def test_a_project_note_without_a_route_is_counted_and_found_by_the_links_and_by_the_drop_down(
        ledger, viewer, monkeypatch):
    from apps.routes import admin as routes_admin

    project_note = MemoryNote.objects.create(scope=MemoryNote.Scope.PROJECT, project=ledger.route.project,
                                             on_behalf_of="ada@example.com", content="项目备忘")
    admin = _admin(viewer.user)
    page = admin.get("/admin/ledger/memorynote/", {"_facets": "True"}).content.decode()
    assert "门店助手 (store-assistant) (1)" in page and "- (1)" in page
    assert list(admin.get("/admin/ledger/memorynote/", {"route__isnull": "True"}).context["cl"].queryset) == [
        project_note]
    monkeypatch.setattr(routes_admin, "ROUTE_FILTER_LINKS", 1)
    page = admin.get("/admin/ledger/memorynote/").content.decode()
    assert f'<option value="{routes_admin.NO_ROUTE}">-</option>' in page
    response = admin.get("/admin/ledger/memorynote/", {"route__id__exact": routes_admin.NO_ROUTE})
    assert list(response.context["cl"].queryset) == [project_note]
    assert f'<option value="{routes_admin.NO_ROUTE}" selected>-</option>' in response.content.decode()


def test_routes_of_several_projects_are_told_apart_by_their_projects(ledger, route):
    from tests.routes.factories import RouteFactory

    other = RouteFactory(key=route.key, name=route.name)
    member = MembershipFactory(project=route.project, role=Membership.Role.VIEWER).user
    MembershipFactory(project=other.project, user=member, role=Membership.Role.VIEWER)
    response = _admin(member).get("/admin/ledger/run/")
    routes = next(spec for spec in response.context["cl"].filter_specs if spec.title == "route")
    assert sorted(name for _, name in routes.lookup_choices) == sorted(
        [f"门店助手 (store-assistant) · {route.project.name}", f"门店助手 (store-assistant) · {other.project.name}"])


def test_the_route_filter_counts_each_routes_rows(ledger, viewer):
    from tests.routes.factories import RouteFactory

    RouteFactory(project=ledger.route.project, key="quiet-route", name="A quiet route")
    page = _admin(viewer.user).get("/admin/ledger/message/", {"_facets": "True"}).content.decode()
    assert "A quiet route (quiet-route) (0)" in page
    assert "门店助手 (store-assistant) (2)" in page


@pytest.fixture
def compatibility_forms(api_client, issued, route) -> dict[str, str]:
    """Messages whose words normalise (terms.normalise) to the phrases searched, one character for
    one, through forms the phrase's pattern once left out."""
    texts = {"halfwidth": "ﾃｽﾄ結果をご確認ください。", "kangxi": "请阅读使⽤说明。",  # U+2F64, from a PDF
             "greek": "ΟΔΟΣ ΛΕΩΦΟΡΟΣ 12", "other": "Nothing here."}
    for n, (asked, answered) in enumerate([("halfwidth", "kangxi"), ("greek", "other")], start=1):
        run_id = open_turn(api_client, issued.access_token, route.key, n, user_input=texts[asked],
                           client_conversation_id="local-conversation-1").json()["run_id"]
        complete_run(api_client, issued.access_token, run_id, n, content=texts[answered])
    return texts


@pytest.mark.parametrize("phrase,name", [("テスト結果", "halfwidth"), ("使用说明", "kangxi"),
                                         ('"οδος λεωφορος"', "greek")])
def test_a_phrase_finds_every_form_its_terms_match(compatibility_forms, viewer, phrase, name):
    assert _found(viewer.user, phrase) == [compatibility_forms[name]]


@pytest.fixture
def marked_words(api_client, issued, route) -> dict[str, str]:
    """Words with combining marks, which keyword_terms cuts into several runs (ที่นี่: ท and น)."""
    texts = {"thai": "ร้านอยู่ที่นี่ครับ ที่นี่", "hindi": "मैं हिंदी बोलता हूँ", "arabic": "اسمي مُحَمَّد", "other": "Nothing."}
    for n, (asked, answered) in enumerate([("thai", "hindi"), ("arabic", "other")], start=1):
        run_id = open_turn(api_client, issued.access_token, route.key, n, user_input=texts[asked],
                           client_conversation_id="local-conversation-1").json()["run_id"]
        complete_run(api_client, issued.access_token, run_id, n, content=texts[answered])
    return texts


@pytest.mark.parametrize("word,name", [("ที่นี่", "thai"), ("हिंदी", "hindi"), ("مُحَمَّد", "arabic")])
def test_a_word_with_combining_marks_is_found(marked_words, viewer, word, name):
    assert _found(viewer.user, word) == [marked_words[name]]
