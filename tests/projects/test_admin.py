"""Project screens: owners manage their project's members by username; operator API tokens are
each operator's own."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection
from django.forms import inlineformset_factory
from django.test.utils import CaptureQueriesContext

from apps.projects.admin import MembershipForm, MembershipFormSet
from apps.projects.models import Membership, OperatorToken, Project
from apps.projects.tokens import operator_token_create, operator_token_hash
from tests.projects.factories import MembershipFactory, ProjectFactory, UserFactory
from tests.projects.helpers import admin_client
from tests.queries import get_statements

pytestmark = pytest.mark.django_db


def _project_form(project, members, *, initial):
    data = {"name": project.name, "slug": project.slug, "description": project.description,
            "memberships-TOTAL_FORMS": str(len(members)), "memberships-INITIAL_FORMS": str(initial),
            "memberships-MIN_NUM_FORMS": "0", "memberships-MAX_NUM_FORMS": "1000"}
    for n, row in enumerate(members):
        for field, value in row.items():
            data[f"memberships-{n}-{field}"] = value
        data[f"memberships-{n}-project"] = str(project.pk)
    return data


def _rows(membership):
    return [{"id": str(membership.pk), "user": membership.user.username, "role": membership.role}]


@pytest.fixture
def owner():
    return MembershipFactory(role=Membership.Role.OWNER, user=UserFactory(username="olivia"))


def test_an_owner_adds_a_member_by_username(owner):
    UserFactory(username="ada")
    project = owner.project
    response = admin_client(owner.user).post(
        f"/admin/projects/project/{project.pk}/change/",
        _project_form(project, [*_rows(owner), {"user": "ada", "role": "editor"}], initial=1),
    )
    assert response.status_code == 302
    assert sorted(project.memberships.values_list("user__username", "role")) == [
        ("ada", "editor"), ("olivia", "owner")]


def test_an_unknown_username_is_an_error_next_to_the_field(owner):
    project = owner.project
    response = admin_client(owner.user).post(
        f"/admin/projects/project/{project.pk}/change/",
        _project_form(project, [*_rows(owner), {"user": "nobody", "role": "editor"}], initial=1),
    )
    assert response.status_code == 200
    [inline] = response.context["inline_admin_formsets"]
    assert inline.formset.errors[1]["user"] == ["No active user has this username."]
    assert list(project.memberships.values_list("user__username", flat=True)) == ["olivia"]


def test_the_member_rows_show_usernames(owner):
    page = admin_client(owner.user).get(f"/admin/projects/project/{owner.project.pk}/change/").content.decode()
    assert 'value="olivia"' in page


def test_the_project_page_reads_its_members_in_queries_that_do_not_grow_with_them(owner):
    """Each member row's name ("<user> · <project> (<role>)", its controls' labels) read its project
    once more: 11 members were 21 more queries than one."""
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            response = admin_client(owner.user).get(f"/admin/projects/project/{owner.project.pk}/change/")
        assert response.status_code == 200
        return len(captured)

    queries()  # once-a-process reads (content types, the site's settings) out of the count
    one = queries()
    for _ in range(10):
        MembershipFactory(project=owner.project, role=Membership.Role.VIEWER)
    assert queries() == one


def test_an_editor_sees_the_members_but_cannot_change_them(owner):
    editor = MembershipFactory(project=owner.project, role=Membership.Role.EDITOR, user=UserFactory(username="ed"))
    project = owner.project
    client = admin_client(editor.user)
    page = client.get(f"/admin/projects/project/{project.pk}/change/")
    assert page.status_code == 200
    assert page.context["has_change_permission"] is False
    response = client.post(f"/admin/projects/project/{project.pk}/change/",
                           _project_form(project, [*_rows(owner), {"user": "ed", "role": "owner"}], initial=1))
    assert response.status_code == 403
    assert project.memberships.get(user=editor.user).role == "editor"


def test_an_owner_cannot_delete_the_project(owner):
    response = admin_client(owner.user).post(f"/admin/projects/project/{owner.project.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403
    assert owner.project.__class__.objects.filter(pk=owner.project.pk).exists()


def test_an_editor_cannot_create_projects_and_is_told_who_can(owner):
    editor = MembershipFactory(project=owner.project, role=Membership.Role.EDITOR, user=UserFactory(username="ed"))
    client = admin_client(editor.user)
    page = client.get("/admin/projects/project/add/")
    assert page.status_code == 403
    assert "Only a site administrator or the owner of a project can create a project" in page.content.decode()
    assert "editor role" not in page.content.decode()  # not a matter of their role in a project
    posted = client.post("/admin/projects/project/add/", {"name": "Mine", "slug": "mine"})
    assert posted.status_code == 403
    assert list(owner.project.__class__.objects.values_list("pk", flat=True)) == [owner.project.pk]


def _new_project(name: str, slug: str) -> dict[str, str]:
    return {"name": name, "slug": slug, "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0",
            "memberships-MIN_NUM_FORMS": "0", "memberships-MAX_NUM_FORMS": "1000"}


def test_an_owner_creates_a_project_and_owns_it(owner):
    """h4 (A2): the demo operator, an owner, could not create a project at all."""
    response = admin_client(owner.user).post("/admin/projects/project/add/", _new_project("Outlet Stores",
                                                                                           "outlet-stores"))
    assert response.status_code == 302
    created = Project.objects.get(slug="outlet-stores")
    assert list(created.memberships.values_list("user__username", "role")) == [("olivia", "owner")]


def test_a_site_administrator_who_creates_a_project_is_its_first_owner(db):
    """A project made by a site administrator started with no member at all: nobody but site
    administrators could open it, and members could be added only after its first save."""
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    response = admin_client(root).post("/admin/projects/project/add/", _new_project("HR Helpdesk", "hr"), follow=True)
    created = Project.objects.get(slug="hr")
    assert list(created.memberships.values_list("user__username", "role")) == [("root", "owner")]
    assert "You are the owner of HR Helpdesk: add its other members on its page." in response.content.decode()


def test_a_refused_project_leaves_no_membership_behind(owner):
    response = admin_client(owner.user).post("/admin/projects/project/add/", _new_project("Taken", owner.project.slug))
    assert response.status_code == 200
    assert list(Membership.objects.values_list("project_id", flat=True)) == [owner.project.pk]


def test_a_forbidden_change_without_a_reason_speaks_of_the_role(owner):
    page = admin_client(owner.user).post(f"/admin/projects/project/{owner.project.pk}/delete/", {"post": "yes"})
    assert page.status_code == 403
    assert "An owner of the project can give you the editor role." in page.content.decode()


def test_an_operator_lists_only_their_own_tokens(owner):
    mine, _ = operator_token_create(user=owner.user, name="mine", scopes=["knowledge:debug"])
    colleague = MembershipFactory(project=owner.project).user
    operator_token_create(user=colleague, name="theirs", scopes=["knowledge:debug"])
    response = admin_client(owner.user).get("/admin/projects/operatortoken/")
    assert list(response.context["cl"].queryset) == [mine]
    assert "theirs" not in response.content.decode()


def test_another_operators_token_page_is_hidden(owner):
    colleague = MembershipFactory(project=owner.project).user
    theirs, _ = operator_token_create(user=colleague, name="theirs", scopes=["knowledge:debug"])
    response = admin_client(owner.user).get(f"/admin/projects/operatortoken/{theirs.pk}/change/")
    assert response.status_code == 302
    assert response["Location"] == "/admin/"


def test_an_operators_own_token_page_opens_read_only_without_the_secret(owner):
    mine, token = operator_token_create(user=owner.user, name="ci-bot", scopes=["knowledge:debug"])
    response = admin_client(owner.user).get(f"/admin/projects/operatortoken/{mine.pk}/change/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "ci-bot" in page
    assert mine.prefix in page
    assert token not in page
    assert 'name="expires_at' not in page  # read-only: a token does not change, it is revoked


def test_the_revoke_action_never_reaches_another_operators_token(owner):
    colleague = MembershipFactory(project=owner.project).user
    theirs, _ = operator_token_create(user=colleague, name="theirs", scopes=["knowledge:debug"])
    response = admin_client(owner.user).post("/admin/projects/operatortoken/", {
        "action": "revoke_tokens", "_selected_action": [str(theirs.pk)]})
    assert response.status_code in (200, 302)
    theirs.refresh_from_db()
    assert theirs.revoked_at is None


def test_an_operator_revokes_their_own_token(owner):
    mine, _ = operator_token_create(user=owner.user, name="mine", scopes=["knowledge:debug"])
    response = admin_client(owner.user).post("/admin/projects/operatortoken/", {
        "action": "revoke_tokens", "_selected_action": [str(mine.pk)]})
    assert response.status_code == 302
    assert OperatorToken.objects.get(pk=mine.pk).revoked_at is not None


def test_a_project_page_of_a_non_member_is_hidden(owner):
    other = ProjectFactory()
    response = admin_client(owner.user).get(f"/admin/projects/project/{other.pk}/change/")
    assert response.status_code == 302


@pytest.mark.parametrize("change", ["demote", "remove"])
def test_the_last_owner_can_neither_demote_nor_remove_themselves(owner, change):
    project = owner.project
    editor = MembershipFactory(project=project, role=Membership.Role.EDITOR, user=UserFactory(username="ada"))
    own_row = {**_rows(owner)[0], **({"role": "viewer"} if change == "demote" else {"DELETE": "on"})}
    response = admin_client(owner.user).post(f"/admin/projects/project/{project.pk}/change/",
                                             _project_form(project, [own_row, *_rows(editor)], initial=2))
    assert response.status_code == 200
    [inline] = response.context["inline_admin_formsets"]
    assert inline.formset.non_form_errors() == [
        "A project must keep at least one owner: make another member the owner before you change or remove the "
        "last one. Nothing was saved."]
    assert sorted(project.memberships.values_list("user__username", "role")) == [("ada", "editor"), ("olivia", "owner")]


@pytest.mark.parametrize(("ada_role", "overrides"), [
    ("editor", {}),  # refused: the last owner demoted
    ("owner", {"name": ""}),  # the members are valid, the project's name is not
])
def test_a_refused_save_titles_the_member_rows_with_their_stored_roles(owner, ada_role, overrides):
    """The row title once read "olivia · … (viewer)": the refused new role, as if it were saved."""
    project = owner.project
    editor = MembershipFactory(project=project, role=Membership.Role.EDITOR, user=UserFactory(username="ada"))
    rows = [{**_rows(editor)[0], "role": ada_role}, {**_rows(owner)[0], "role": "viewer"}]  # as the page lists them
    response = admin_client(owner.user).post(f"/admin/projects/project/{project.pk}/change/",
                                             {**_project_form(project, rows, initial=2), **overrides})
    assert response.status_code == 200
    [inline] = response.context["inline_admin_formsets"]
    assert [str(row.original) for row in inline if row.original] == [f"ada · {project.name} (editor)",
                                                                     f"olivia · {project.name} (owner)"]
    assert inline.formset.forms[1]["role"].value() == "viewer"  # the choice stays as the operator made it
    assert sorted(project.memberships.values_list("user__username", "role")) == [("ada", "editor"), ("olivia", "owner")]


def test_the_history_names_a_changed_member_row_as_saved(owner):
    project = owner.project
    ada = MembershipFactory(project=project, role=Membership.Role.EDITOR, user=UserFactory(username="ada"))
    rows = [_rows(owner)[0], {**_rows(ada)[0], "role": "viewer"}]
    response = admin_client(owner.user).post(f"/admin/projects/project/{project.pk}/change/",
                                             _project_form(project, rows, initial=2))
    assert response.status_code == 302
    assert LogEntry.objects.get(object_id=str(project.pk)).get_change_message() == (
        f"Changed Role for membership “ada · {project.name} (viewer)”.")


def test_an_owner_may_step_down_once_another_member_is_owner(owner):
    project = owner.project
    ada = MembershipFactory(project=project, role=Membership.Role.EDITOR, user=UserFactory(username="ada"))
    rows = [{**_rows(owner)[0], "role": "viewer"}, {**_rows(ada)[0], "role": "owner"}]
    response = admin_client(owner.user).post(f"/admin/projects/project/{project.pk}/change/",
                                             _project_form(project, rows, initial=2))
    assert response.status_code == 302
    assert sorted(project.memberships.values_list("user__username", "role")) == [("ada", "owner"), ("olivia", "viewer")]


def test_a_new_operator_token_is_shown_once_and_never_travels_in_a_cookie(owner):
    """Messages went in the signed (not encrypted) `messages` cookie first: the redirect after the
    add carried the token to the browser's cookie jar and back. They wait in the session now, and
    leave it once shown."""
    from django.contrib.sessions.models import Session

    browser = admin_client(owner.user)
    response = browser.post("/admin/projects/operatortoken/add/", {"name": "ci", "scopes": ["knowledge:ingest"]})
    assert (response.status_code, "messages" in response.cookies) == (302, False)
    page = browser.get(response["Location"])
    shown = re.findall(r"bhop_[A-Za-z0-9_-]{43}", page.content.decode())
    assert len(shown) == 1
    assert OperatorToken.objects.get(name="ci").token_hash == operator_token_hash(shown[0])
    assert "no-store" in page["Cache-Control"]
    held = " ".join(f"{name}={morsel.value}" for name, morsel in browser.cookies.items())
    held += " ".join(str(row.get_decoded()) for row in Session.objects.all())
    assert shown[0] not in held
    assert shown[0] not in browser.get(response["Location"]).content.decode()


def test_an_operator_token_cannot_be_created_already_expired(owner):
    response = admin_client(owner.user).post("/admin/projects/operatortoken/add/", {
        "name": "old", "scopes": ["knowledge:ingest"], "expires_at_0": "2001-01-01", "expires_at_1": "10:00:00"})
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["expires_at"] == [
        "Must be in the future: a token that has already expired cannot be used."]
    assert "copy it now" not in response.content.decode()
    assert OperatorToken.objects.count() == 0


@pytest.mark.parametrize("path", ["/admin/auth/user/", "/admin/knowledge/embeddingmodel/add/"])
def test_a_site_wide_page_tells_an_owner_it_is_for_site_administrators(owner, path):
    page = admin_client(owner.user).get(path)
    assert page.status_code == 403
    text = page.content.decode()
    assert "This page is for site administrators" in text
    assert "editor role" not in text


@pytest.mark.parametrize("role, button", [("viewer", False), ("editor", True), ("owner", True)])
def test_the_pause_button_is_shown_only_to_members_who_may_press_it(owner, role, button):
    member = owner if role == "owner" else MembershipFactory(project=owner.project, role=role,
                                                             user=UserFactory(username=role))
    page = admin_client(member.user).get(f"/admin/projects/project/{owner.project.pk}/change/").content.decode()
    assert ("running" in page, "Pause…" in page) == (True, button)


def test_the_owner_count_is_taken_on_the_members_as_they_are_now_not_as_the_form_saw_them(owner):
    """Two owners demoting each other at once: each form was loaded with the other still an owner.
    The other's change is saved between this form's loading and its check."""
    project = owner.project
    ada = MembershipFactory(project=project, role=Membership.Role.OWNER, user=UserFactory(username="ada"))
    formset_class = inlineformset_factory(Project, Membership, form=MembershipForm, formset=MembershipFormSet,
                                          fields=["user", "role"], extra=0, can_delete=True)
    rows = [*_rows(owner), {**_rows(ada)[0], "role": "editor"}]  # olivia stays owner, ada → editor
    formset = formset_class(_project_form(project, rows, initial=2), instance=project, prefix="memberships")
    assert len(formset.forms) == 2  # loaded now, as the admin loads them before it checks
    Membership.objects.filter(pk=owner.pk).update(role=Membership.Role.VIEWER)  # ada's demotion of olivia
    assert not formset.is_valid()
    assert formset.non_form_errors()[0].startswith("A project must keep at least one owner")


def test_deleting_a_token_says_to_revoke_it_and_deletes_nothing(owner):
    token, _ = operator_token_create(user=owner.user, name="ci", scopes=["knowledge:ingest"])
    page = admin_client(owner.user).post(f"/admin/projects/operatortoken/{token.pk}/delete/", {"post": "yes"})
    assert page.status_code == 403
    text = page.content.decode()
    assert "A builder API token is not deleted: revoke it" in text and "site administrators" not in text
    assert OperatorToken.objects.filter(pk=token.pk, revoked_at__isnull=True).exists()


@pytest.mark.parametrize("name", ["ci \u202e", "\u2067ci", "c\u200fi"])
def test_an_operator_token_name_with_a_bidi_control_is_refused(owner, name):
    """The token is shown once, after its name: a name with U+202E laid the rest of the message out
    backwards, the token too ("MKT7fP…_pohb" for "bhop_…PKM"), for the operator to copy."""
    response = admin_client(owner.user).post("/admin/projects/operatortoken/add/", {
        "name": name, "scopes": ["knowledge:ingest"]})
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["name"] == [
        "Invisible direction controls (such as U+202E) are not allowed in a name: they reorder the text "
        "shown after it."]
    assert "copy it now" not in response.content.decode()
    assert OperatorToken.objects.count() == 0


def test_signing_out_says_so_and_what_stays(owner):
    client = admin_client(owner.user)
    response = client.post("/admin/logout/")
    page = response.content.decode()
    assert response.status_code == 200
    assert "You are signed out of the BailingHub console." in page and "quality time" not in page
    assert '<a href="/admin/">Sign in again</a>' in page
    assert client.get("/admin/").status_code == 302  # signed out indeed


def test_the_project_list_makes_as_many_queries_with_four_projects_as_with_one(owner):
    client = admin_client(owner.user)
    with_one = get_statements(client, "/admin/projects/project/")
    for role in (Membership.Role.OWNER, Membership.Role.EDITOR, Membership.Role.VIEWER):
        MembershipFactory(user=owner.user, role=role)
    assert get_statements(client, "/admin/projects/project/") == with_one


def test_the_token_list_makes_as_many_queries_with_four_tokens_as_with_one(owner):
    client = admin_client(owner.user)
    operator_token_create(user=owner.user, name="ci-0", scopes=["knowledge:ingest"])
    with_one = get_statements(client, "/admin/projects/operatortoken/")
    for n in range(1, 4):
        operator_token_create(user=owner.user, name=f"ci-{n}", scopes=["knowledge:ingest", "tools:write"])
    assert get_statements(client, "/admin/projects/operatortoken/") == with_one
