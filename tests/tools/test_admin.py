"""The operator console for tool providers: add by upload or paste with a compile report, preview
before saving, re-import with a diff, switch tools; the secret is never shown."""

from __future__ import annotations

import base64
import html
import json
import re
import time
import zlib

import pytest
from django.contrib.admin.templatetags.admin_list import result_headers
from django.contrib.messages import get_messages
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils.text import capfirst

from apps.projects.models import Membership
from apps.tools.admin import spec_carry, spec_uncarry
from apps.tools.compiler.loader import MAX_SPEC_BYTES
from apps.tools.crypto import secret_decrypt
from apps.tools.models import Tool, ToolProvider
from tests.projects.factories import MembershipFactory, ProjectFactory

from .factories import FIXTURES, STORE_SPEC, ToolProviderFactory

pytestmark = pytest.mark.django_db

INLINE = {"tools-TOTAL_FORMS": "0", "tools-INITIAL_FORMS": "0"}
NO_OPERATIONS = '{"openapi": "3.1.0", "info": {"title": "Empty", "version": "1"}, "paths": {}}'


def add_form(owner, **fields):
    data = {"project": str(owner.project_id), "name": "store", "base_url": "http://127.0.0.1:9/store",
            "signing_secret": "admin-secret-1-of-16-chars", "enabled": "on", "spec_text": "", **INLINE}
    data.update(fields)
    return data


def test_adding_a_provider_by_upload_compiles_it(browser, owner):
    upload = SimpleUploadedFile("store.yaml", STORE_SPEC, content_type="application/yaml")
    response = browser.post("/admin/tools/toolprovider/add/", add_form(owner, spec_file=upload))
    assert response.status_code == 302, response.content.decode()[:3000]
    provider = ToolProvider.objects.get(project=owner.project, name="store")
    assert bytes(provider.spec) == STORE_SPEC and provider.spec_filename == "store.yaml"
    assert provider.tools.count() == 5 and secret_decrypt(provider.secret_encrypted) == "admin-secret-1-of-16-chars"


def test_adding_a_provider_by_paste_compiles_it(browser, owner):
    text = (FIXTURES / "no_acc.json").read_text()
    response = browser.post("/admin/tools/toolprovider/add/", add_form(owner, spec_text=text), follow=True)
    provider = ToolProvider.objects.get(project=owner.project, name="store")
    assert [(t.name, t.enabled) for t in provider.tools.all()] == [
        ("listItems", False), ("createItem", False), ("patchItem", False)]
    assert "every tool is disabled until you enable it" in response.content.decode()


def test_a_taken_name_is_refused_beside_the_name_and_nothing_is_saved(browser, owner):
    taken = ToolProviderFactory(project=owner.project, name="store")
    text = (FIXTURES / "no_acc.json").read_text()
    response = browser.post("/admin/tools/toolprovider/add/", add_form(owner, spec_text=text))
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {
        "name": ["This project already has a tool provider with that name."]}
    assert list(ToolProvider.objects.values_list("pk", flat=True)) == [taken.pk]
    assert not Tool.objects.exclude(provider=taken).exists()


def test_a_refused_spec_is_shown_next_to_the_field_and_nothing_is_saved(browser, owner):
    response = browser.post("/admin/tools/toolprovider/add/", add_form(owner, spec_text="swagger: '2.0'\n"))
    page = response.content.decode()
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["spec_text"] == ["Swagger 2.0 is not OpenAPI 3.0 or 3.1."]
    assert 'class="errorlist' in page
    assert not ToolProvider.objects.exists()


def test_an_unreadable_yaml_file_is_explained_by_line_and_column_without_parser_internals(browser, owner):
    upload = SimpleUploadedFile("broken.yaml", b"openapi: 3.0.0\ninfo: {title: x\n  version: 1\n",
                                content_type="application/yaml")
    response = browser.post("/admin/tools/toolprovider/add/", add_form(owner, spec_file=upload))
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["spec_file"] == [
        "The spec is neither JSON nor YAML (line 3, column 10: did not find expected ',' or '}' "
        "while parsing a flow mapping that starts at line 2, column 7)."]
    assert "spec_not_parseable" not in response.content.decode()
    assert not ToolProvider.objects.exists()


def test_a_base_url_that_is_not_http_is_refused_in_a_sentence_and_nothing_is_saved(browser, owner):
    response = browser.post("/admin/tools/toolprovider/add/",
                            add_form(owner, base_url="ftp://store.example/api", spec_text=STORE_SPEC.decode()))
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["base_url"] == ["Use an absolute http:// or https:// URL."]
    assert not ToolProvider.objects.exists()


def test_the_add_form_says_the_name_rule_before_a_name_is_refused(browser, owner):
    # "Store A" was refused only after submitting; the field's help says the rule the refusal quotes.
    help_text = browser.get("/admin/tools/toolprovider/add/").context["adminform"].form.fields["name"].help_text
    assert help_text.startswith("2–64 lower-case letters, digits, hyphens or underscores, starting with a letter or "
                                "digit")
    response = browser.post("/admin/tools/toolprovider/add/",
                            add_form(owner, name="Store A", spec_text=STORE_SPEC.decode()))
    assert response.context["adminform"].form.errors["name"] == [
        "Use 2–64 lower-case letters, digits, hyphens or underscores, starting with a letter or digit."]
    assert not ToolProvider.objects.exists()


def test_a_spec_without_operations_is_refused_on_its_field_and_nothing_is_saved(browser, owner):
    response = browser.post("/admin/tools/toolprovider/add/", add_form(owner, spec_text=NO_OPERATIONS))
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {
        "spec_text": ["The spec has no operations: nothing to import."]}
    assert not ToolProvider.objects.exists()


def test_a_reimport_without_operations_is_refused_on_its_field_and_changes_nothing(browser, owner):
    provider = ToolProviderFactory(project=owner.project)
    before = (bytes(provider.spec), list(provider.tools.values_list("name", "compiled", "enabled")))
    upload = SimpleUploadedFile("empty.json", NO_OPERATIONS.encode(), content_type="application/json")
    data = {"base_url": provider.base_url, "enabled": "on", "spec_file": upload, **tool_rows(provider)}
    response = browser.post(f"/admin/tools/toolprovider/{provider.pk}/change/", data)
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {
        "spec_file": ["The spec has no operations: nothing to import."]}
    provider.refresh_from_db()
    assert (bytes(provider.spec), list(provider.tools.values_list("name", "compiled", "enabled"))) == before


def test_a_missing_spec_is_an_error_on_the_field(browser, owner):
    response = browser.post("/admin/tools/toolprovider/add/", add_form(owner))
    assert "Upload a spec file or paste one below." in response.content.decode()
    assert not ToolProvider.objects.exists()


def test_preview_shows_the_compile_report_and_saves_nothing(browser, owner):
    text = (FIXTURES / "acc_invalid.yaml").read_text()
    response = browser.post("/admin/tools/toolprovider/add/", add_form(owner, spec_text=text, _preview="1"))
    page = response.content.decode()
    assert response.status_code == 200
    assert '<li class="info" id="preview-notice">Preview only: nothing is saved yet.' in page
    assert "Please correct the error" not in page
    assert "Compile report (preview)" in page
    assert "<code>acc_risk_level_invalid</code></td><td>everything_wrong</td>" in page
    assert "risk high" in page
    assert not ToolProvider.objects.exists()


def test_a_preview_before_the_name_and_address_are_filled_in_is_a_preview_not_a_mistake(browser, owner):
    response = browser.post("/admin/tools/toolprovider/add/", add_form(
        owner, project="", name="", base_url="", spec_text=STORE_SPEC.decode(), _preview="1"))
    page = response.content.decode()
    assert '<li class="info" id="preview-notice">Preview only: nothing is saved yet.' in page
    assert "Please correct the error" not in page and "This field is required." not in page
    assert "Compile report (preview)" in page
    # A value that is wrong, not missing, is still said at once.
    page = browser.post("/admin/tools/toolprovider/add/", add_form(
        owner, name="", base_url="ftp://shop.example", spec_text=STORE_SPEC.decode(), _preview="1")).content.decode()
    assert "Please correct the error" in page and 'id="preview-notice"' not in page
    assert not ToolProvider.objects.exists()


def _carried(page: str) -> str:
    [value] = re.findall(r'<input type="hidden" name="previewed_spec" value="([^"]*)">', page)
    return html.unescape(value)


def test_a_generated_signing_secret_never_travels_in_a_cookie(browser, owner):
    """Shown in a message, which went in Django's `messages` cookie (signed, not encrypted)."""
    from django.contrib.sessions.models import Session

    response = browser.post("/admin/tools/toolprovider/add/", add_form(owner, signing_secret="",
                                                                        spec_text=STORE_SPEC.decode()))
    assert response.status_code == 302 and "messages" not in response.cookies
    page = browser.get(response["Location"]).content.decode()
    secret = secret_decrypt(ToolProvider.objects.get(name="store").secret_encrypted)
    # Shown once with a Copy button, as a new token is (apps.core.secret_messages).
    assert f'<code id="signing-secret">{secret}</code> <button type="button" class="button"' in page
    assert secret not in browser.get(response["Location"]).content.decode()
    held = " ".join(f"{name}={morsel.value}" for name, morsel in browser.cookies.items())
    held += " ".join(str(row.get_decoded()) for row in Session.objects.all())
    assert secret not in held


def test_a_previewed_file_is_saved_without_choosing_it_again(browser, owner):
    """A browser never refills a file input: after a preview the operator had to choose the file
    again, or Save said "Upload a spec file"."""
    upload = SimpleUploadedFile("store.yaml", STORE_SPEC, content_type="application/yaml")
    page = browser.post("/admin/tools/toolprovider/add/",
                        add_form(owner, spec_file=upload, _preview="1")).content.decode()
    assert "then press Save (it saves store.yaml, kept from the preview: no need to choose it again)." in page
    assert '<input type="checkbox" name="previewed_spec_keep" checked>' in page
    assert not ToolProvider.objects.exists()
    response = browser.post("/admin/tools/toolprovider/add/",
                            add_form(owner, previewed_spec=_carried(page), previewed_spec_keep="on"))
    assert response.status_code == 302, response.content.decode()[:3000]
    provider = ToolProvider.objects.get(project=owner.project, name="store")
    assert (bytes(provider.spec), provider.spec_filename, provider.tools.count()) == (STORE_SPEC, "store.yaml", 5)


def test_a_file_shown_again_for_another_fields_error_is_kept_too(browser, owner):
    upload = SimpleUploadedFile("store.yaml", STORE_SPEC, content_type="application/yaml")
    page = browser.post("/admin/tools/toolprovider/add/",
                        add_form(owner, name="Store A", spec_file=upload)).content.decode()
    assert spec_uncarry(_carried(page)) == (STORE_SPEC, "store.yaml")


def test_a_pasted_spec_is_not_carried_twice(browser, owner):
    page = browser.post("/admin/tools/toolprovider/add/",
                        add_form(owner, spec_text=STORE_SPEC.decode(), _preview="1")).content.decode()
    assert 'name="previewed_spec"' not in page


def test_an_unticked_previewed_file_is_not_saved(browser, owner):
    carried = spec_carry(STORE_SPEC, "store.yaml")
    response = browser.post("/admin/tools/toolprovider/add/", add_form(owner, previewed_spec=carried))
    assert response.context["adminform"].form.errors == {"spec_file": ["Upload a spec file or paste one below."]}
    assert not ToolProvider.objects.exists()


def test_a_new_file_takes_the_previewed_ones_place(browser, owner):
    upload = SimpleUploadedFile("no_acc.json", (FIXTURES / "no_acc.json").read_bytes(), content_type="application/json")
    response = browser.post("/admin/tools/toolprovider/add/", add_form(
        owner, spec_file=upload, previewed_spec=spec_carry(STORE_SPEC, "store.yaml"), previewed_spec_keep="on"))
    assert response.status_code == 302
    assert ToolProvider.objects.get(name="store").spec_filename == "no_acc.json"


@pytest.mark.parametrize("carried", [
    "not base64 at all", "c3RvcmUueWFtbA==.AAAA", ".", "c3RvcmUueWFtbA==." + base64.b64encode(b"plain").decode(),
    # Past the limit once inflated: 20 MiB + 1 of spaces in a few KB.
    "c3RvcmUueWFtbA==." + base64.b64encode(zlib.compress(b" " * (MAX_SPEC_BYTES + 1), 9)).decode(),
    # A name of 256 characters.
    base64.urlsafe_b64encode(b"a" * 256).decode() + "." + base64.b64encode(zlib.compress(STORE_SPEC)).decode(),
    # A name no upload can have: a NUL (PostgreSQL refuses it: the save was a 500), a line break.
    base64.urlsafe_b64encode(b"store\x00.yaml").decode() + "." + base64.b64encode(zlib.compress(STORE_SPEC)).decode(),
    base64.urlsafe_b64encode(b"store\n.yaml").decode() + "." + base64.b64encode(zlib.compress(STORE_SPEC)).decode(),
])
def test_a_carried_spec_that_cannot_be_read_back_is_refused_and_saves_nothing(browser, owner, carried):
    response = browser.post("/admin/tools/toolprovider/add/",
                            add_form(owner, previewed_spec=carried, previewed_spec_keep="on"))
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["spec_file"] == [
        "The previewed file could not be read back; choose it again."]
    assert not ToolProvider.objects.exists()


def test_a_previewed_re_import_is_saved_from_the_carried_file(browser, owner):
    provider = ToolProviderFactory(project=owner.project)
    refs = (FIXTURES / "refs.yaml").read_bytes()
    upload = SimpleUploadedFile("refs.yaml", refs, content_type="application/yaml")
    data = {"base_url": provider.base_url, "enabled": "on", **tool_rows(provider)}
    page = browser.post(f"/admin/tools/toolprovider/{provider.pk}/change/",
                        {**data, "spec_file": upload, "_preview": "1"}).content.decode()
    assert "2 added, 5 removed, 0 changed, 0 unchanged" in page and provider.tools.count() == 5
    response = browser.post(f"/admin/tools/toolprovider/{provider.pk}/change/",
                            {**data, "previewed_spec": _carried(page), "previewed_spec_keep": "on"})
    assert response.status_code == 302
    provider.refresh_from_db()
    assert (bytes(provider.spec), provider.spec_filename, provider.tools.count()) == (refs, "refs.yaml", 2)


def _carried_secret(page: str) -> str:
    [value] = re.findall(r'<input type="hidden" name="signing_secret_carried" value="([^"]*)">', page)
    return html.unescape(value)


def test_a_previewed_typed_secret_is_saved_without_typing_it_again(browser, owner):
    """A browser never refills a password field: after a preview the secret box was empty, and Save
    generated another secret, which the business system then refused (401 invalid_signature)."""
    page = browser.post("/admin/tools/toolprovider/add/",
                        add_form(owner, spec_text=STORE_SPEC.decode(), _preview="1")).content.decode()
    assert "The signing secret you typed is kept for Save, encrypted" in page
    assert "admin-secret-1-of-16-chars" not in page
    assert not ToolProvider.objects.exists()
    response = browser.post("/admin/tools/toolprovider/add/", add_form(
        owner, signing_secret="", spec_text=STORE_SPEC.decode(), signing_secret_carried=_carried_secret(page)),
        follow=True)
    provider = ToolProvider.objects.get(project=owner.project, name="store")
    assert secret_decrypt(provider.secret_encrypted) == "admin-secret-1-of-16-chars"
    assert "A signing secret was generated" not in response.content.decode()


def test_a_secret_typed_after_the_preview_takes_the_kept_ones_place(browser, owner):
    page = browser.post("/admin/tools/toolprovider/add/",
                        add_form(owner, spec_text=STORE_SPEC.decode(), _preview="1")).content.decode()
    browser.post("/admin/tools/toolprovider/add/", add_form(
        owner, signing_secret="other-secret-2-of-16-chars", spec_text=STORE_SPEC.decode(),
        signing_secret_carried=_carried_secret(page)))
    provider = ToolProvider.objects.get(project=owner.project, name="store")
    assert secret_decrypt(provider.secret_encrypted) == "other-secret-2-of-16-chars"


def test_an_error_on_the_change_page_keeps_the_typed_secret_for_save(browser, owner):
    provider = ToolProviderFactory(project=owner.project)
    data = {"base_url": "https://u:p@store.example", "signing_secret": "new-secret-2-of-16-chars", "enabled": "on",
            **tool_rows(provider)}
    page = browser.post(f"/admin/tools/toolprovider/{provider.pk}/change/", data).content.decode()
    assert "Please correct the error" in page and "new-secret-2-of-16-chars" not in page
    response = browser.post(f"/admin/tools/toolprovider/{provider.pk}/change/", {
        **data, "base_url": "https://store.example", "signing_secret": "",
        "signing_secret_carried": _carried_secret(page)})
    assert response.status_code == 302
    provider.refresh_from_db()
    assert secret_decrypt(provider.secret_encrypted) == "new-secret-2-of-16-chars"


def _expired(token_for: str, binding: str) -> str:
    from apps.tools import crypto

    payload = json.dumps({"purpose": crypto._CARRIED_PURPOSE, "binding": binding, "secret": token_for}).encode()
    sealed = crypto._fernet().encrypt_at_time(payload, int(time.time()) - crypto.CARRIED_SECRET_MAX_AGE - 1)
    return sealed.decode()


def test_a_kept_secret_is_read_only_in_the_same_sign_in_on_the_same_page_and_in_time(browser, owner):
    """Sealed for the operator, the sign-in and the page, for CARRIED_SECRET_MAX_AGE: another's, an
    expired one, an altered one or a stored secret's ciphertext is asked for again, never replaced
    by a generated secret, and nothing is saved."""
    from apps.tools.crypto import secret_encrypt

    preview = add_form(owner, spec_text=STORE_SPEC.decode(), _preview="1")
    other_sign_in = Client()
    other_sign_in.force_login(owner.user)
    elsewhere = _carried_secret(other_sign_in.post("/admin/tools/toolprovider/add/", preview).content.decode())
    provider = ToolProviderFactory(project=owner.project, name="other")
    change_page = browser.post(f"/admin/tools/toolprovider/{provider.pk}/change/", {
        "base_url": "https://u:p@store.example", "signing_secret": "admin-secret-1-of-16-chars", "enabled": "on",
        **tool_rows(provider)}).content.decode()
    binding = f"{owner.user.pk}:{browser.session.session_key}:add"
    mine = _carried_secret(browser.post("/admin/tools/toolprovider/add/", preview).content.decode())
    for carried in (elsewhere, _carried_secret(change_page), _expired("admin-secret-1-of-16-chars", binding),
                    mine[:-4] + "AAAA", secret_encrypt("admin-secret-1-of-16-chars")):
        response = browser.post("/admin/tools/toolprovider/add/", add_form(
            owner, signing_secret="", spec_text=STORE_SPEC.decode(), signing_secret_carried=carried))
        assert response.status_code == 200
        [error] = response.context["adminform"].form.errors["signing_secret"]
        assert error.startswith("Type the signing secret again: the one typed before the page was shown again is "
                                "kept for 30 minutes only, in the same sign-in.")
    assert list(ToolProvider.objects.values_list("name", flat=True)) == ["other"]


def test_a_form_without_a_typed_secret_carries_none(browser, owner):
    page = browser.post("/admin/tools/toolprovider/add/",
                        add_form(owner, signing_secret="", spec_text=STORE_SPEC.decode(), _preview="1")).content
    assert b"signing_secret_carried" not in page and b"is kept for Save" not in page


def test_a_base_url_with_credentials_is_refused_on_its_field(browser, owner):
    data = add_form(owner, base_url="https://u:p@store.example", spec_text=STORE_SPEC.decode())
    page = browser.post("/admin/tools/toolprovider/add/", data).content.decode()
    assert "Credentials do not belong in the URL; use the signing secret." in page and not ToolProvider.objects.exists()


def test_the_secret_is_never_sent_back_to_the_browser(browser, owner):
    provider = ToolProviderFactory(project=owner.project, secret="never-in-html-of-16-chars")
    page = browser.get(f"/admin/tools/toolprovider/{provider.pk}/change/").content.decode()
    assert "never-in-html-of-16-chars" not in page and provider.secret_encrypted not in page
    assert 'name="signing_secret"' in page


def test_the_change_page_shows_the_compile_report(browser, owner):
    provider = ToolProviderFactory(project=owner.project, spec=(FIXTURES / "refs.yaml").read_bytes())
    page = browser.get(f"/admin/tools/toolprovider/{provider.pk}/change/").content.decode()
    assert "<code>input_schema_recursion_cut</code></td><td>tree_create</td>" in page


def test_reimport_preview_shows_the_diff(browser, owner):
    provider = ToolProviderFactory(project=owner.project)
    data = {"base_url": provider.base_url, "enabled": "on", "spec_text": (FIXTURES / "refs.yaml").read_text(),
            "_preview": "1", **tool_rows(provider)}
    response = browser.post(f"/admin/tools/toolprovider/{provider.pk}/change/", data)
    page = response.content.decode()
    assert "2 added, 5 removed, 0 changed, 0 unchanged" in page
    assert provider.tools.count() == 5


def tool_rows(provider, switch: dict[str, bool] | None = None) -> dict[str, str]:
    tools = list(provider.tools.all())
    data = {"tools-TOTAL_FORMS": str(len(tools)), "tools-INITIAL_FORMS": str(len(tools))}
    for index, tool in enumerate(tools):
        data[f"tools-{index}-id"] = str(tool.pk)
        data[f"tools-{index}-provider"] = str(provider.pk)
        if (switch or {}).get(tool.name, tool.enabled):
            data[f"tools-{index}-enabled"] = "on"
    return data


def test_reimport_through_the_change_page_applies_the_spec(browser, owner):
    provider = ToolProviderFactory(project=owner.project)
    data = {"base_url": provider.base_url, "enabled": "on", "spec_text": (FIXTURES / "refs.yaml").read_text(),
            **tool_rows(provider)}
    response = browser.post(f"/admin/tools/toolprovider/{provider.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert list(provider.tools.values_list("name", flat=True)) == ["tree_create", "search"]


def test_switching_a_tool_off_inline(browser, owner):
    provider = ToolProviderFactory(project=owner.project)
    data = {"base_url": provider.base_url, "enabled": "on", **tool_rows(provider, {"order_refund": False})}
    response = browser.post(f"/admin/tools/toolprovider/{provider.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert list(provider.tools.filter(enabled=False).values_list("name", flat=True)) == ["order_refund"]


def test_tool_actions_enable_and_disable(browser, owner):
    provider = ToolProviderFactory(project=owner.project)
    ids = [str(pk) for pk in provider.tools.values_list("pk", flat=True)[:2]]
    response = browser.post("/admin/tools/tool/", {"action": "disable_tools", "_selected_action": ids})
    assert response.status_code == 302
    assert Tool.objects.filter(pk__in=ids, enabled=False).count() == 2


def test_a_viewer_is_offered_no_tool_switch_and_a_posted_one_changes_nothing(viewer_browser, owner):
    tool = ToolProviderFactory(project=owner.project).tools.get(name="stock_adjust")
    page = viewer_browser.get("/admin/tools/tool/").content.decode()
    assert "disable_tools" not in page and "enable_tools" not in page
    viewer_browser.post("/admin/tools/tool/", {"action": "disable_tools", "_selected_action": [str(tool.pk)]})
    tool.refresh_from_db()
    assert tool.enabled is True


def test_a_tool_switch_leaves_the_tools_of_a_project_the_operator_only_views(browser, owner):
    viewed = MembershipFactory(user=owner.user, role=Membership.Role.VIEWER).project
    mine = ToolProviderFactory(project=owner.project).tools.get(name="stock_adjust")
    theirs = ToolProviderFactory(project=viewed).tools.get(name="stock_adjust")
    response = browser.post("/admin/tools/tool/", {"action": "disable_tools",
                                                   "_selected_action": [str(mine.pk), str(theirs.pk)]})
    assert [str(message) for message in get_messages(response.wsgi_request)] == ["1 tool disabled."]
    assert list(Tool.objects.filter(pk__in=[mine.pk, theirs.pk]).order_by("enabled")
                .values_list("pk", "enabled")) == [(mine.pk, False), (theirs.pk, True)]


@pytest.mark.parametrize(("action", "count", "text"), [
    ("disable_tools", 1, "1 tool disabled."),
    ("disable_tools", 2, "2 tools disabled."),
    ("enable_tools", 1, "1 tool enabled."),
    ("enable_tools", 3, "3 tools enabled."),
])
def test_tool_actions_count_in_words_that_agree_with_the_number(browser, owner, action, count, text):
    provider = ToolProviderFactory(project=owner.project)
    ids = [str(pk) for pk in provider.tools.values_list("pk", flat=True)[:count]]
    response = browser.post("/admin/tools/tool/", {"action": action, "_selected_action": ids})
    assert [str(message) for message in get_messages(response.wsgi_request)] == [text]


def test_operators_do_not_see_other_projects_providers(browser, owner):
    other = ToolProviderFactory(project=ProjectFactory())
    mine = ToolProviderFactory(project=owner.project)
    page = browser.get("/admin/tools/toolprovider/").content.decode()
    assert mine.name in page and other.name not in page
    assert browser.get(f"/admin/tools/toolprovider/{other.pk}/change/").status_code == 302


def test_the_provider_list_heads_each_column_with_its_own_name(browser, owner):
    ToolProviderFactory(project=owner.project)
    response = browser.get("/admin/tools/toolprovider/")
    # As the list template shows them (capfirst), after the checkbox's column.
    headers = [capfirst(header["text"]) for header in result_headers(response.context["cl"])][1:]
    assert headers == ["Provider · base URL", "Project", "Enabled", "Tools", "Warnings", "Compiled"]


def test_the_provider_list_keeps_the_enabled_tools_and_the_openapi_version_in_their_columns(browser, owner):
    provider = ToolProviderFactory(project=owner.project)
    provider.tools.filter(name="stock_adjust").update(enabled=False)
    page = browser.get("/admin/tools/toolprovider/").content.decode()
    total = provider.tools.count()
    assert f'{total}<br><span class="bh-muted">{total - 1} enabled</span>' in page
    assert f'<span class="bh-muted">OpenAPI {provider.openapi_version}</span>' in page


def test_provider_list_query_count_does_not_grow_with_rows(browser, owner, django_assert_max_num_queries):
    for _ in range(3):
        ToolProviderFactory(project=owner.project)
    with django_assert_max_num_queries(12):
        assert browser.get("/admin/tools/toolprovider/").status_code == 200


def test_deleting_a_provider_removes_its_tools(browser, owner):
    provider = ToolProviderFactory(project=owner.project)
    response = browser.post(f"/admin/tools/toolprovider/{provider.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not ToolProvider.objects.filter(pk=provider.pk).exists() and not Tool.objects.exists()


def test_a_viewer_cannot_add_providers(owner):
    viewer = MembershipFactory(project=owner.project, role=Membership.Role.VIEWER)
    client = Client()
    client.force_login(viewer.user)
    response = client.post("/admin/tools/toolprovider/add/", add_form(owner, spec_text=STORE_SPEC.decode()))
    assert response.status_code == 403 and not ToolProvider.objects.exists()


@pytest.fixture
def viewer_browser(owner) -> Client:
    client = Client()
    client.force_login(MembershipFactory(project=owner.project, role=Membership.Role.VIEWER).user)
    return client


def test_an_owner_may_preview_and_re_import_on_the_change_page(browser, owner):
    provider = ToolProviderFactory(project=owner.project)
    response = browser.get(f"/admin/tools/toolprovider/{provider.pk}/change/")
    page = response.content.decode()
    assert [name for name, _ in response.context["adminform"].fieldsets] == [None, "Current spec", "Re-import"]
    assert '<input type="submit" name="_preview" value="Preview compile report">' in page
    assert '<input type="password" name="signing_secret"' in page


def test_a_viewer_sees_whether_a_secret_is_set_and_neither_preview_nor_re_import(viewer_browser, owner):
    provider = ToolProviderFactory(project=owner.project)
    response = viewer_browser.get(f"/admin/tools/toolprovider/{provider.pk}/change/")
    page = " ".join(response.content.decode().split())
    assert response.status_code == 200
    assert [name for name, _ in response.context["adminform"].fieldsets] == [None, "Current spec"]
    assert "Preview compile report" not in page and 'name="_preview"' not in page
    assert "Re-import" not in page and "Spec file:" not in page and "Spec text:" not in page
    assert '<label>Signing secret:</label> <div class="readonly">set (hidden)</div>' in page
    assert '<div class="readonly">None</div>' not in page


def test_a_viewer_sees_a_provider_without_a_secret_as_not_set(viewer_browser, owner):
    provider = ToolProviderFactory(project=owner.project)
    ToolProvider.objects.filter(pk=provider.pk).update(secret_encrypted="")
    page = " ".join(viewer_browser.get(f"/admin/tools/toolprovider/{provider.pk}/change/").content.decode().split())
    assert '<label>Signing secret:</label> <div class="readonly">not set</div>' in page


def test_the_tool_page_shows_its_compiled_definition_and_only_the_switch_is_editable(browser, owner):
    tool = ToolProviderFactory(project=owner.project).tools.get(name="stock_adjust")
    page = browser.get(f"/admin/tools/tool/{tool.pk}/change/").content.decode()
    assert '<pre class="bh-pre compiled-tool">' in page and "&quot;op&quot;: &quot;&gt;&quot;" in page
    assert 'name="enabled"' in page and 'name="scope"' not in page


def _readonly(page: str, field: str) -> str:
    return re.search(rf'field-{field}.*?<div class="readonly">(.*?)</div>', page, re.S).group(1)


def test_the_tool_page_says_how_its_calls_are_governed_above_the_compiled_json(browser, owner):
    """The rate limit, timeout and approval rule were only in a raw JSON dump ~1,500 px tall (browser
    audit, low): they read as sentences, the JSON stays whole behind a click."""
    provider = ToolProviderFactory(project=owner.project)
    stock, refund = (provider.tools.get(name=name) for name in ("stock_adjust", "order_refund"))
    page = browser.get(f"/admin/tools/tool/{stock.pk}/change/").content.decode()
    assert _readonly(page, "rate_limit") == "10 calls a minute, counted across every agent of the hub"
    seconds = f"{stock.compiled['timeout_ms'] / 1000:g}"
    assert _readonly(page, "timeout") == f"{seconds}\xa0s for the business system to answer a call"
    assert _readonly(page, "approval") == "when quantity &gt; 100"
    assert _readonly(page, "arguments_kept").startswith("Shown to the project")
    assert page.index("How calls are governed") < page.index('class="bh-pre compiled-tool"')
    assert re.search(r'<details[^>]*>\s*<summary>.*?Compiled tool \(JSON\)', page, re.S)
    Tool.objects.filter(pk=refund.pk).update(compiled={**refund.compiled, "audit_sensitive": True, "rate_limit": None})
    page = browser.get(f"/admin/tools/tool/{refund.pk}/change/").content.decode()
    assert _readonly(page, "rate_limit") == "None"
    assert _readonly(page, "arguments_kept").startswith("Marked sensitive (audit.sensitive)")


@pytest.mark.parametrize(("limit", "held", "text"), [
    ({"count": 1, "window": "1d"}, False, "1 call a day, counted across every agent of the hub"),
    ({"count": 5, "window": "1h"}, False, "5 calls an hour, counted across every agent of the hub"),
    ({"count": 30, "window": "1s"}, False, "30 calls a second, counted across every agent of the hub"),
    (None, False, "None"),
    ({"count": 30, "window": "minute"}, True,
     "None that the hub can read: the spec's limit is invalid, so the tool is held off (see below)"),
])
def test_a_rate_limit_reads_as_a_sentence(limit, held, text):
    from apps.tools.call_checks import rate_limit_text

    assert rate_limit_text(limit, held=held) == text


def test_reimport_preview_warns_of_routes_losing_allowed_tools(browser, owner):
    from apps.tools.route_tools import SourceSpec, route_tools_set
    from tests.routes.factories import RouteFactory

    provider = ToolProviderFactory(project=owner.project)
    route_tools_set(route=RouteFactory(project=owner.project, key="shop-desk", tools_direct_enabled=True),
                    sources=[SourceSpec(provider=provider, allowed_tools=["order_status"])])
    data = {"base_url": provider.base_url, "enabled": "on", "spec_text": (FIXTURES / "refs.yaml").read_text(),
            "_preview": "1", **tool_rows(provider)}
    page = browser.post(f"/admin/tools/toolprovider/{provider.pk}/change/", data).content.decode()
    assert "Routes whose capability revision changes: shop-desk" in page
    assert "Route shop-desk allows tools this spec removes or switches off: order_status" in page


def test_the_compile_report_counts_in_words_that_agree_with_the_numbers():
    from apps.tools.admin import render_report

    one = render_report({"openapi_version": "3.0.3", "tools": [{"name": "a"}], "operations_skipped": 1,
                         "warning_counts": {"x": 1}, "acc_present": True,
                         "warnings": [{"code": "x", "operation": "op", "message": "m", "fallback": "f"}]})
    assert "<p>OpenAPI 3.0.3 · 1 tool · 1 operation skipped · 1 warning</p>" in one
    many = render_report({"openapi_version": "3.1.0", "tools": [{}, {}], "operations_skipped": 0,
                          "warning_counts": {"x": 2, "y": 1}, "acc_present": True})
    assert many == "<p>OpenAPI 3.1.0 · 2 tools · 0 operations skipped · 3 warnings</p>"


def test_the_add_form_starts_on_the_operators_only_project(browser, owner):
    response = browser.get("/admin/tools/toolprovider/add/")
    assert response.context["adminform"].form.initial["project"] == owner.project_id


def _many_operations(count: int) -> bytes:
    paths = {f"/items/{n}": {"get": {"operationId": f"item_get_{n}", "summary": f"Read item {n}.",
                                     "responses": {"200": {"description": "The item."}}}} for n in range(count)}
    return json.dumps({"openapi": "3.0.3", "info": {"title": "Many", "version": "1"}, "paths": paths}).encode()


def test_a_provider_of_more_tools_than_its_page_lists_can_still_be_saved(browser, owner):
    """Every tool was an editable row: past ~333 tools the page posted over Django's 1,000 fields
    (400 TooManyFieldsSent), so the base URL, secret and switch could not be changed."""
    from apps.tools.admin import TOOL_ROWS_MAX

    provider = ToolProviderFactory(project=owner.project, spec=_many_operations(TOOL_ROWS_MAX + 1))
    page = browser.get(f"/admin/tools/toolprovider/{provider.pk}/change/").content.decode()
    assert 'name="tools-TOTAL_FORMS"' not in page
    enabled = provider.tools.filter(enabled=True).count()
    assert f"{TOOL_ROWS_MAX + 1} tools, {enabled} enabled: too many to switch here." in page
    assert f'href="/admin/tools/tool/?provider__id__exact={provider.pk}"' in page
    response = browser.post(f"/admin/tools/toolprovider/{provider.pk}/change/",
                            {"base_url": "http://127.0.0.1:9/moved", "enabled": "on"})
    assert response.status_code == 302, response.content.decode()[:2000]
    provider.refresh_from_db()
    assert provider.base_url == "http://127.0.0.1:9/moved"
    assert provider.tools.count() == TOOL_ROWS_MAX + 1


def test_a_small_providers_page_lists_its_tools_with_their_switches(browser, owner):
    provider = ToolProviderFactory(project=owner.project)
    page = browser.get(f"/admin/tools/toolprovider/{provider.pk}/change/").content.decode()
    total = provider.tools.count()
    assert f'name="tools-TOTAL_FORMS" value="{total}"' in page
    assert f"{total} tools, {total} enabled. <a href=" in page and "See them in the Tools list</a>." in page


def test_the_delete_page_counts_what_goes_with_a_provider(browser, owner):
    """Django's list read every tool with its provider joined, spec included: a provider of 20,000
    tools and a 21 MB spec ran two web workers out of memory."""
    provider = ToolProviderFactory(project=owner.project, spec=_many_operations(30))
    page = browser.get(f"/admin/tools/toolprovider/{provider.pk}/delete/").content.decode()
    assert "30 tools and their search index" in page
    assert "item_get_0" not in page
    response = browser.post(f"/admin/tools/toolprovider/{provider.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not ToolProvider.objects.filter(pk=provider.pk).exists()
    assert not Tool.objects.filter(provider_id=provider.pk).exists()


def _cell(page: str, row_marker: str, field: str) -> str:
    """The text of `field`'s cell in the table row that holds `row_marker`."""
    row = next(part for part in page.split("<tr") if row_marker in part)
    match = re.search(rf'class="[^"]*field-{field}[^"]*"[^>]*>(.*?)</t[dh]>', row, re.S)
    assert match, row[:2000]
    return html.unescape(re.sub(r"<[^>]+>", "", match.group(1))).strip()


def test_the_console_says_when_a_tool_needs_approval_always_by_a_rule_or_never(browser, owner):
    """A tool that asks only above a quantity read "Approval ✓", as if every call were reviewed."""
    provider = ToolProviderFactory(project=owner.project)
    page = browser.get(f"/admin/tools/toolprovider/{provider.pk}/change/").content.decode()
    assert {name: _cell(page, f">{name}<", "approval") for name in ("stock_adjust", "order_refund",
                                                                     "product_lookup")} == {
        "stock_adjust": "when quantity > 100", "order_refund": "always (high risk)", "product_lookup": "no"}
    listing = browser.get("/admin/tools/tool/?q=stock_adjust").content.decode()
    assert _cell(listing, ">stock_adjust<", "approval") == "when quantity > 100"
    tool = Tool.objects.get(provider=provider, name="stock_adjust")
    detail = browser.get(f"/admin/tools/tool/{tool.pk}/change/").content.decode()
    assert re.search(r"field-approval.*?<div class=\"readonly\">when quantity &gt; 100</div>", detail, re.S)
