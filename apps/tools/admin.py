"""Operator screens for tool providers and tools. Writes go through apps.tools.services; the signing
secret is write-only (never shown, never sent back to the browser)."""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, cast

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.options import InlineModelAdmin
from django.core.exceptions import NON_FIELD_ERRORS
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.defaultfilters import pluralize
from django.urls import URLPattern, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import ngettext

from apps.core.errors import ApiError
from apps.core.secret_messages import secret_message
from apps.core.timefmt import local_time
from apps.projects.admin import NamedCellsInlineMixin, ProjectScopedAdminMixin, unique_in_project
from apps.tools.errors import ProviderNameTaken

from . import invocations, selectors, services
from .call_checks import approval_summary, rate_limit_text
from .compiler.loader import MAX_SPEC_BYTES
from .compiler.types import CompileResult
from .crypto import CARRIED_SECRET_MAX_AGE, SecretUnreadable, secret_carry, secret_uncarry
from .errors import InvalidProvider, SpecRefusedError, ToolHeldBySpec
from .models import TOOL_PROVIDER_NAME_CONSTRAINT, RouteToolSource, Tool, ToolProvider

# A spec at its limit as a file, pasted, and carried from a preview (base64 of zlib: at worst a third
# over its size, plus zlib's few bytes), plus the rest of the form.
ADMIN_BODY_MAX_BYTES = 2 * MAX_SPEC_BYTES + (MAX_SPEC_BYTES * 4 // 3 + 64 * 1024) + 64 * 1024
PREVIEW_BUTTON = "_preview"
# A spec file the form read (previewed, or shown again for another field's error) goes back to the
# browser in this hidden field, so Save needs no second upload: a browser never refills a file input.
CARRIED_SPEC_FIELD = "previewed_spec"
# The signing secret typed on a page shown again goes back in this hidden field, sealed (secret_carry).
CARRIED_SECRET_FIELD = "signing_secret_carried"  # noqa: S105 -- a field's name

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


class _ToolCounts(TypedDict):
    tools_n: int
    enabled_n: int


class ToolProviderForm(forms.ModelForm):
    # The admin's URL width (30em), not the browser's default 20 characters: there a provider's base URL
    # (the demo shop's http://127.0.0.1:8000/demo-business) was cut off inside its field.
    base_url = forms.URLField(max_length=2000, assume_scheme="https", label="Base URL",
                              widget=forms.URLInput(attrs={"class": "vURLField"}),
                              help_text="Where the business system serves the spec's paths, e.g. "
                                        "https://shop.example/api.")
    signing_secret = forms.CharField(
        required=False, strip=False, widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text="HMAC key the hub signs calls to this provider with. Stored encrypted; never shown again. "
                  "Leave blank to keep the current one (or, for a new provider, to generate one).")
    spec_file = forms.FileField(required=False, label="Spec file",
                                help_text="An OpenAPI 3.0 or 3.1 document, JSON or YAML, at most 20 MiB.")
    spec_text = forms.CharField(required=False, label="…or paste the spec", strip=False,
                                widget=forms.Textarea(attrs={"rows": 12, "cols": 100, "spellcheck": "false"}))

    class Meta:
        model = ToolProvider
        fields = ["project", "name", "base_url", "enabled"]
        # The rule of provider_name_validator (services._check_name), said before the form is sent: a name
        # such as "Store A" was refused only after submitting.
        help_texts = {"name": "2–64 lower-case letters, digits, hyphens or underscores, starting with a letter or "
                              "digit: no spaces or capitals, e.g. store-a. It cannot be changed later."}

    # Who reads this form, in which sign-in, on which page (ToolProviderAdmin.get_form): a carried
    # secret is sealed for it.
    secret_binding = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.compile_result: CompileResult | None = None
        self.diff: services.ToolDiff | None = None
        self.spec_bytes: bytes | None = None
        self.spec_filename = ""
        if not self.instance._state.adding:
            self.fields["spec_file"].help_text += " Uploading a spec re-imports it: the diff is shown before saving."

    def _secret_carried(self) -> None:
        """The secret typed before this page was shown again (a preview, an error), when none is typed
        now: the browser never refills a password field, and a blank one generated another secret
        (or kept the old one) on Save, which the business system then refused (401). One that can no
        longer be read (past CARRIED_SECRET_MAX_AGE, another sign-in) is asked for again, never
        replaced in silence."""
        carried = self.data.get(CARRIED_SECRET_FIELD)
        if not carried or self.cleaned_data.get("signing_secret") or self.has_error("signing_secret"):
            return
        try:
            self.cleaned_data["signing_secret"] = secret_uncarry(str(carried), binding=self.secret_binding)
        except SecretUnreadable:
            blank = "generates a new one" if self.instance._state.adding else "keeps the current one"
            self.add_error("signing_secret", forms.ValidationError(
                "Type the signing secret again: the one typed before the page was shown again is kept for "
                "%(minutes)d minutes only, in the same sign-in. Left blank, saving %(blank)s.",
                code="carried_secret_expired", params={"minutes": CARRIED_SECRET_MAX_AGE // 60, "blank": blank}))

    @property
    def carried_secret(self) -> str:
        """The hidden field's value when the page is shown again: the signing secret this form read
        (typed or carried), sealed for this operator's sign-in and page (secret_carry)."""
        secret = getattr(self, "cleaned_data", {}).get("signing_secret")
        if not secret or self.has_error("signing_secret") or not self.secret_binding:
            return ""
        return secret_carry(secret, binding=self.secret_binding)

    def _spec(self) -> tuple[bytes | None, str]:
        upload = self.cleaned_data.get("spec_file")
        text = self.cleaned_data.get("spec_text") or ""
        if upload and text.strip():
            self.add_error("spec_text", "Upload a file or paste a spec, not both.")
            return None, ""
        if upload:
            if upload.size > MAX_SPEC_BYTES:
                self.add_error("spec_file", f"The spec is {upload.size} bytes; the limit is {MAX_SPEC_BYTES} bytes.")
                return None, ""
            return upload.read(), upload.name
        if text.strip():
            return text.encode("utf-8"), ""
        carried = self.data.get(CARRIED_SPEC_FIELD)
        if carried and self.data.get(CARRIED_SPEC_FIELD + "_keep"):  # unticked: the page's spec stays as it is
            try:
                return spec_uncarry(carried)
            except ValueError:
                self.add_error("spec_file", "The previewed file could not be read back; choose it again.")
        return None, ""

    @property
    def carried_spec(self) -> str:
        """The hidden field's value when the page is shown again: the spec file this form read."""
        if self.spec_bytes is None or not self.spec_filename:
            return ""  # nothing read, or pasted text (the text box shows it again itself)
        return spec_carry(self.spec_bytes, self.spec_filename)

    def clean(self) -> dict[str, Any]:
        super().clean()  # ModelForm's returns self.cleaned_data (its stubs allow None)
        unique_in_project(self, "name", ProviderNameTaken.message)
        self._secret_carried()
        cleaned = self.cleaned_data
        spec, filename = self._spec()
        if spec is None and self.instance._state.adding and not self.errors.get("spec_text") \
                and not self.errors.get("spec_file"):
            self.add_error("spec_file", "Upload a spec file or paste one below.")
        try:
            if cleaned.get("base_url"):
                services.provider_fields_check(base_url=cleaned["base_url"])
            if cleaned.get("signing_secret"):
                services.provider_fields_check(secret=cleaned["signing_secret"])
        except InvalidProvider as exc:
            field_name = str(exc.extra.get("field"))
            text = exc.message.split(": ", 1)[-1]  # the field prefix is the API's; the form shows it beside the field
            self.add_error({"secret": "signing_secret"}.get(field_name, field_name), text[:1].upper() + text[1:])
        if spec is not None:
            field = "spec_file" if filename else "spec_text"
            try:
                self.compile_result = services.spec_compile(spec=spec)
            except SpecRefusedError as exc:
                self.add_error(field, exc.message)  # the code is the API's; the sentence says it all
            else:
                self.spec_bytes, self.spec_filename = spec, filename
                if not self.instance._state.adding:
                    self.diff = services.tool_diff(provider=self.instance, result=self.compile_result)
        self._preview_forgives_empty_fields()
        if PREVIEW_BUTTON in self.data and not self.errors:
            raise forms.ValidationError(
                "Preview only: nothing is saved yet. Review the compile report below, then press Save"
                + (f" (it saves {self.spec_filename}, kept from the preview: no need to choose it again)."
                   if self.spec_filename else "."),
                code="preview")
        return cleaned

    def full_clean(self) -> None:
        super().full_clean()  # the model's own checks, after clean(): "cannot be blank" comes from there
        if self.is_bound:
            self._preview_forgives_empty_fields()

    def _preview_forgives_empty_fields(self) -> None:
        """A preview checks the spec: a field not filled in yet is not a mistake (Save asks for it);
        a value that is wrong is."""
        if PREVIEW_BUTTON not in self.data:
            return
        for name, errors in list(self.errors.as_data().items()):
            if name not in (NON_FIELD_ERRORS, "spec_file", "spec_text") and all(
                    error.code in ("required", "blank", "null") for error in errors):
                del self.errors[name]


def spec_carry(spec: bytes, filename: str) -> str:
    """A spec file and its name as one hidden field's value: `base64(name) "." base64(zlib(spec))`."""
    return (base64.urlsafe_b64encode(filename.encode("utf-8")).decode("ascii") + "."
            + base64.b64encode(zlib.compress(spec, 6)).decode("ascii"))


def spec_uncarry(value: str) -> tuple[bytes, str]:
    """spec_carry's value back; ValueError for anything else, or a spec past the limit once inflated.
    It is the operator's own input like a pasted spec, and is compiled again the same way."""
    name_part, _, data_part = value.partition(".")
    inflater = zlib.decompressobj()
    try:
        filename = base64.urlsafe_b64decode(name_part.encode("ascii")).decode("utf-8")
        spec = inflater.decompress(base64.b64decode(data_part.encode("ascii"), validate=True), MAX_SPEC_BYTES + 1)
    except (UnicodeError, binascii.Error, zlib.error) as exc:
        raise ValueError("not a carried spec") from exc
    whole = inflater.eof and not inflater.unconsumed_tail and len(spec) <= MAX_SPEC_BYTES
    # A name an upload can have: Django's parser drops what does not print (a NUL, which PostgreSQL
    # cannot store, was a 500 on save).
    if not whole or not filename or len(filename) > 255 or not filename.isprintable():
        raise ValueError("not a carried spec")
    return spec, filename


# A provider's page lists its tools, each with its switch, up to this many.
TOOL_ROWS_MAX = 200


class ToolSwitchForm(forms.ModelForm):
    """A tool's switch: one its spec holds off (Tool.held_reason) is not switched on."""

    class Meta:
        model = Tool
        fields = ["enabled"]

    def clean_enabled(self) -> bool:
        enabled = bool(self.cleaned_data.get("enabled"))
        if enabled and not self.instance.enabled and self.instance.held_reason:
            raise forms.ValidationError(
                "%(tool)s cannot be switched on: %(reason)s. Fix it in the spec and re-import.",
                code="held", params={"tool": self.instance.name, "reason": self.instance.held_reason})
        return enabled


class ToolInline(NamedCellsInlineMixin, admin.TabularInline):
    model = Tool
    form = ToolSwitchForm
    fields = ["name", "method", "path", "risk", "readonly", "approval", "has_acc", "enabled"]
    readonly_fields = ["name", "method", "path", "risk", "readonly", "approval", "has_acc"]
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: ToolProvider | None = None) -> bool:
        return False

    @admin.display(description="Approval")
    def approval(self, obj: Tool) -> str:
        return approval_summary(obj.compiled)

    def has_delete_permission(self, request: HttpRequest, obj: ToolProvider | None = None) -> bool:
        return False

    # Operators hold project roles, not model permissions: the provider's project decides. Without a
    # provider (the inline's queryset check), the rows are already limited to the shown provider.
    def has_view_permission(self, request: HttpRequest, obj: ToolProvider | None = None) -> bool:
        return request.user.is_superuser or (
            obj.project_id in ProjectScopedAdminMixin.visible_project_ids(request) if obj is not None
            else bool(ProjectScopedAdminMixin.visible_project_ids(request)))

    def has_change_permission(self, request: HttpRequest, obj: ToolProvider | None = None) -> bool:
        return request.user.is_superuser or (
            obj.project_id in ProjectScopedAdminMixin.editable_project_ids(request) if obj is not None
            else bool(ProjectScopedAdminMixin.editable_project_ids(request)))


def breaking_at_slashes(text: str) -> SafeString:
    """`text` escaped, free to break after each slash rather than anywhere in a segment (a URL or a
    path in a narrow list column)."""
    return format_html_join(mark_safe("/<wbr>"), "{}", ((part,) for part in text.split("/")))


@admin.register(ToolProvider)
class ToolProviderAdmin(ProjectScopedAdminMixin, admin.ModelAdmin):
    form = ToolProviderForm
    unique_constraints = {TOOL_PROVIDER_NAME_CONSTRAINT: ProviderNameTaken.code}
    # As the Tools list: between the sidebar and the filters, at 1366 px, about 720 px are left, and nine
    # columns ran about 350 px past them. The base URL reads under the name (cut after two lines, whole in
    # its title), the enabled tools beside their total, and the OpenAPI version under the compile time;
    # the provider's page has them all.
    list_display = ["name_url", "project", "enabled", "tool_counts", "warning_total", "compiled"]
    list_filter = ["project", "enabled"]
    search_fields = ["name", "title", "base_url"]
    list_select_related = ["project"]
    inlines = [ToolInline]

    def get_form(self, request: HttpRequest, obj: ToolProvider | None = None, change: bool = False,
                 **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        # A class made for this request: a secret carried across a preview is sealed for this
        # operator, this sign-in and this page.
        # The sign-in by a digest of its session key: the key itself is a credential, and has no place in
        # a page, sealed or not.
        sign_in = hashlib.sha256((request.session.session_key or "").encode()).hexdigest()[:32]
        binding = f"{request.user.pk}:{sign_in}:{obj.pk if obj else 'add'}"
        form.secret_binding = binding  # type: ignore[attr-defined]  # a ToolProviderForm
        return form

    def get_urls(self) -> list[URLPattern]:
        urls = super().get_urls()
        # The add and change pages take a whole spec, far above the JSON body limit.
        for pattern in urls:
            if getattr(pattern, "name", "") in (f"{self.opts.app_label}_{self.opts.model_name}_add",
                                                f"{self.opts.app_label}_{self.opts.model_name}_change"):
                pattern.callback = _with_body_limit(pattern.callback)
        return urls

    def get_queryset(self, request: HttpRequest) -> QuerySet[ToolProvider]:
        # The spec (megabytes for a large API) is read only where it is used.
        queryset: QuerySet[ToolProvider] = super().get_queryset(request).defer("spec").annotate(
            tools_n=Count("tools"), enabled_n=Count("tools", filter=Q(tools__enabled=True)))
        return queryset

    def get_inlines(self, request: HttpRequest, obj: ToolProvider | None) -> list[type[InlineModelAdmin]]:
        # A new provider has no tools until its spec is saved. Past TOOL_ROWS_MAX, a row per tool
        # made the page too large to save (each row posts its fields: DATA_UPLOAD_MAX_NUMBER_FIELDS)
        # and to read; the Tools list, filtered to the provider, switches them then.
        if obj is None or self._counts(obj)[0] > TOOL_ROWS_MAX:
            return []
        return list(self.inlines)

    @staticmethod
    def _counts(obj: ToolProvider) -> tuple[int, int]:
        """(tools, enabled tools): the annotations get_queryset gave the page's object."""
        annotated = cast("WithAnnotations[ToolProvider, _ToolCounts]", obj)
        return annotated.tools_n, annotated.enabled_n

    def get_readonly_fields(self, request: HttpRequest, obj: ToolProvider | None = None) -> list[str]:
        report = ["spec_sha256", "spec_filename", "openapi", "title", "compiled_at", "tools_listed", "report"]
        return ["project", "name", *report] if obj else []

    @admin.display(description="Tools")
    def tools_listed(self, obj: ToolProvider) -> SafeString:
        total, enabled = self._counts(obj)
        if not total:
            return format_html("{}", "No tools: the spec has no operation that compiled into one (see the report).")
        link = format_html('<a href="{}?provider__id__exact={}">See {} in the Tools list</a>',
                           reverse("admin:tools_tool_changelist"), obj.pk, "them" if total > 1 else "it")
        if total > TOOL_ROWS_MAX:
            return format_html("{} tools, {} enabled: too many to switch here. {}, where they are switched on or "
                               "off.", total, enabled, link)
        return format_html("{} tool{}, {} enabled. {}.", total, pluralize(total), enabled, link)

    def get_fieldsets(self, request: HttpRequest, obj: ToolProvider | None = None) -> Any:
        spec = ("Spec", {"fields": ["spec_file", "spec_text"]})
        if obj is None:
            return [(None, {"fields": ["project", "name", "base_url", "signing_secret", "enabled"]}), spec]
        current = ("Current spec", {"fields": ["title", "openapi", "spec_filename", "spec_sha256", "compiled_at",
                                               "tools_listed", "report"]})
        if not self.has_change_permission(request, obj):
            # The form-only fields have no value to show (the admin printed "None"): a reader sees
            # whether a secret is set, and no re-import.
            return [(None, {"fields": ["project", "name", "base_url", "signing_secret_state", "enabled"]}), current]
        return [(None, {"fields": ["project", "name", "base_url", "signing_secret", "enabled"]}), current,
                ("Re-import", {"fields": ["spec_file", "spec_text"], "classes": ["collapse"]})]

    @admin.display(description="Signing secret")
    def signing_secret_state(self, obj: ToolProvider) -> str:
        return "set (hidden)" if obj.secret_encrypted else "not set"

    @admin.display(description="Provider · base URL", ordering="name")
    def name_url(self, obj: ToolProvider) -> SafeString:
        # The row's link, the base URL under it.
        return format_html('{}<span class="bh-endpoint bh-url" title="{}">{}</span>', obj.name, obj.base_url,
                           breaking_at_slashes(obj.base_url))

    @admin.display(description="Tools", ordering="tools_n")
    def tool_counts(self, obj: WithAnnotations[ToolProvider, _ToolCounts]) -> SafeString:
        return format_html('{}<br><span class="bh-muted">{} enabled</span>', obj.tools_n, obj.enabled_n)

    @admin.display(description="Warnings")
    def warning_total(self, obj: ToolProvider) -> int:
        return sum((obj.compile_report.get("warning_counts") or {}).values())

    @admin.display(description="OpenAPI version")
    def openapi(self, obj: ToolProvider) -> str:
        return obj.openapi_version

    @admin.display(description="Compiled", ordering="compiled_at")
    def compiled(self, obj: ToolProvider) -> SafeString:
        return format_html('{}<br><span class="bh-muted">OpenAPI {}</span>', local_time(obj.compiled_at),
                           obj.openapi_version)

    def delete_model(self, request: HttpRequest, obj: ToolProvider) -> None:
        services.provider_delete(provider=obj)

    def get_deleted_objects(self, objs: Sequence[ToolProvider] | QuerySet[ToolProvider], request: HttpRequest
                            ) -> tuple[list[Any], dict[str, int], set[str], list[str]]:
        """What goes with each provider, counted: Django's own list reads every tool with its
        provider joined, spec and all, so a provider of 20,000 tools and a 20 MB spec took
        gigabytes per page. Its tools, their search index and the routes' sources of it go with
        it (tools cannot be deleted one by one: they come from the spec); past calls stay in the
        ledger without it. Nothing refuses the delete but the provider's own permission."""
        providers = list(objs)
        perms_needed = {str(ToolProvider._meta.verbose_name)} if not all(
            self.has_delete_permission(request, provider) for provider in providers) else set()
        counts = {"tool providers": len(providers), "tools": 0, "route tool sources": 0}
        deleted: list[Any] = []
        for provider in providers:
            tools = Tool.objects.filter(provider=provider).count()
            routes = list(RouteToolSource.objects.filter(provider=provider).order_by("route__name")
                          .values_list("route__name", flat=True))
            counts["tools"] += tools
            counts["route tool sources"] += len(routes)
            deleted.append(format_html("Tool provider: {}", provider.name))
            deleted.append([f"{tools:,} tool{pluralize(tools)} and their search index",
                            *(f"The tool source of route {name}" for name in routes)])
        return deleted, {name: n for name, n in counts.items() if n}, perms_needed, []

    def delete_view(self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
                    ) -> HttpResponse:
        # Calls waiting for an approval lose their tool with it: said before the operator confirms.
        provider = self.get_object(request, object_id) if request.method == "GET" else None
        stranded = invocations.approvals_stranded(provider=provider, compiled_by_name=None) if provider else {}
        return super().delete_view(request, object_id, {**(extra_context or {}), "stranded": stranded})

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ToolProvider]) -> None:
        for provider in queryset:
            services.provider_delete(provider=provider)

    @admin.display(description="Compile report")
    def report(self, obj: ToolProvider) -> str:
        return render_report(obj.compile_report)

    def render_change_form(self, request: HttpRequest, context: dict[str, Any], add: bool = False,
                           change: bool = False, form_url: str = "", obj: ToolProvider | None = None) -> HttpResponse:
        form = context["adminform"].form
        context["compile_preview"] = render_report(form.compile_result.report()) if form.compile_result else ""
        context["compile_diff"] = form.diff.as_dict() if form.diff else None
        if form.diff and form.compile_result and obj is not None:
            context["compile_diff"]["stranded"] = invocations.approvals_stranded(
                provider=obj, compiled_by_name={tool.name: tool.as_dict() for tool in form.compile_result.tools})
        context["preview_button"] = PREVIEW_BUTTON
        context["carried_spec"] = (CARRIED_SPEC_FIELD, form.carried_spec, form.spec_filename)
        carried_secret = form.carried_secret if form.is_bound else ""
        context["carried_secret"] = (CARRIED_SECRET_FIELD, carried_secret)
        if carried_secret:
            # The bound field (made already, by the admin's error list) keeps its own copy of the help.
            form["signing_secret"].help_text = form.fields["signing_secret"].help_text = format_html(
                '<strong class="bh-secret-kept">The signing secret you typed is kept for Save, encrypted (it is '
                "never sent back to the browser as you typed it): leave this blank to save it, or type another "
                "in its place. Kept for {} minutes.</strong> {}",
                CARRIED_SECRET_MAX_AGE // 60, form.fields["signing_secret"].help_text)
        # A reader's page has no form to preview: the button led to a 403.
        context["can_import"] = self.has_add_permission(request) if add else self.has_change_permission(request, obj)
        if _only_preview(form):
            # A preview is not a mistake: show it as a notice, not as "Please correct the error below".
            context["errors"] = None
            context["preview_notice"] = form.non_field_errors()[0]
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)

    def save_form(self, request: HttpRequest, form: ToolProviderForm, change: bool) -> ToolProvider:
        instance: ToolProvider = form.instance
        return instance

    def save_model(self, request: HttpRequest, obj: ToolProvider, form: ToolProviderForm, change: bool) -> None:
        data = form.cleaned_data
        try:
            if change:
                provider = services.provider_update(provider=obj, base_url=data["base_url"],
                                                    secret=data.get("signing_secret") or None,
                                                    enabled=data["enabled"])
                if form.spec_bytes is not None:
                    outcome = services.provider_reimport(provider=provider, spec=form.spec_bytes,
                                                         spec_filename=form.spec_filename)
                    diff = outcome.diff
                    messages.info(request, f"Re-imported: {len(diff.added)} added, {len(diff.removed)} removed, "
                                           f"{len(diff.changed)} changed.")
                    if diff.switched_on:
                        messages.info(request, "Switched on by the new spec (its hold ended): {}.".format(
                            ", ".join(diff.switched_on)))
                    if diff.switched_off:
                        messages.warning(request, "Switched off by the new spec: {}.{}".format(
                            ", ".join(diff.switched_off), "".join(
                                f" Route {route} loses {', '.join(names)}." for route, names in
                                diff.routes_losing.items())))
                self._warn_stranded(request, provider)
                return
            if form.spec_bytes is None:  # the form refuses a new provider without a spec
                raise ValueError("A new tool provider needs a spec.")
            secret = data.get("signing_secret") or services.secret_generate()
            outcome = services.provider_create(project=data["project"], name=data["name"],
                                               base_url=data["base_url"], secret=secret, spec=form.spec_bytes,
                                               spec_filename=form.spec_filename, enabled=data["enabled"])
        except ApiError as exc:
            # A name taken meanwhile is answered beside the field (changeform_view); anything else here.
            if not self.unique_race(exc):
                messages.error(request, exc.message)
            raise
        provider = outcome.provider
        for attribute in ("pk", "secret_encrypted", "spec", "spec_sha256", "spec_filename", "openapi_version",
                          "title", "compile_report", "compiled_at", "created_at", "updated_at"):
            setattr(obj, attribute, getattr(provider, attribute))
        obj._state.adding = False
        if not data.get("signing_secret"):
            secret_message(request, lead="A signing secret was generated; configure it on the business side now, it "
                                         "is not shown again", secret=secret, element_id="signing-secret")
        if not outcome.result.acc_present:
            messages.warning(request, "The spec declares no x-agent-capability: every tool is disabled until you "
                                      "enable it; read-only was inferred from GET/HEAD.")

    @staticmethod
    def _warn_stranded(request: HttpRequest, provider: ToolProvider) -> None:
        """A new base URL, a re-import or switching the provider off can leave calls waiting for an
        approval unable to run (only a re-import has a preview): said once saved."""
        enabled = {name: compiled for name, compiled in
                   provider.tools.filter(enabled=True).values_list("name", "compiled")} if provider.enabled else None
        stranded = invocations.approvals_stranded(provider=provider, compiled_by_name=enabled)
        if stranded:
            messages.warning(request, format_html(
                "Calls waiting for an approval cannot run as this provider now is: {}. Their agents' resume is "
                "refused and their approval pages say so; deny the pending ones there.",
                format_html_join(", ", "<code>{}</code> ({})", stranded.items())))

    def save_related(self, request: HttpRequest, form: ToolProviderForm, formsets: Iterable[Any],
                     change: bool) -> None:
        # The provider has no many-to-many fields; only the tool switches below are saved.
        for formset in formsets:
            self.save_formset(request, form, formset, change=change)

    def save_formset(self, request: HttpRequest, form: ToolProviderForm, formset: Any, change: bool) -> None:
        """Only the tool switches are editable inline; each goes through the service."""
        # The admin's change message reads these lists from the formset.
        formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []
        for tool_form in formset.forms:
            if tool_form.has_changed() and "enabled" in tool_form.changed_data:
                try:
                    tool = services.tool_set_enabled(tool=tool_form.instance,
                                                     enabled=tool_form.cleaned_data["enabled"])
                except ToolHeldBySpec:  # a re-import held it since the form was read
                    messages.error(request, f"{tool_form.instance.name} was not switched on: {ToolHeldBySpec.message}")
                    continue
                formset.changed_objects.append((tool, ["enabled"]))


def _only_preview(form: forms.BaseForm) -> bool:
    if not form.is_bound or set(form.errors) != {"__all__"}:
        return False
    return all(error.code == "preview" for error in form.errors.as_data()["__all__"])


def _with_body_limit(view: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(view)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        return view(*args, **kwargs)

    # Read by the body-limit middleware (apps.core.middleware.view_body_limit).
    wrapped.body_max_bytes = ADMIN_BODY_MAX_BYTES  # type: ignore[attr-defined]
    return wrapped


def render_report(report: dict[str, Any]) -> str:
    if not report:
        return "—"
    counts = report.get("warning_counts") or {}
    tools, skipped, warned = len(report.get("tools", [])), report.get("operations_skipped", 0), sum(counts.values())
    summary = format_html(
        "<p>OpenAPI {} · {} tool{} · {} operation{} skipped · {} warning{}{}</p>",
        report.get("openapi_version", "?"), tools, pluralize(tools), skipped, pluralize(skipped), warned,
        pluralize(warned),
        "" if report.get("acc_present") else " · no x-agent-capability: tools start disabled, read-only "
                                             "inferred from GET/HEAD",
    )
    warnings = report.get("warnings") or []
    if not warnings:
        return summary
    rows = format_html_join(
        "", "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
        ((w.get("code", ""), w.get("operation") or "—", w.get("message", ""), w.get("fallback", ""))
         for w in warnings[:500]),
    )
    more = format_html("<p>… and {} more.</p>", len(warnings) - 500) if len(warnings) > 500 else ""
    return format_html(
        '{}<table class="compile-report"><thead><tr><th>Warning</th><th>Operation</th><th>What</th>'
        "<th>Fallback</th></tr></thead><tbody>{}</tbody></table>{}", summary, rows, more)


@admin.register(Tool)
class ToolAdmin(ProjectScopedAdminMixin, admin.ModelAdmin):
    project_lookup = "provider__project"
    # The list sits between the admin's sidebar and its filters: at 1366 px that leaves about 720 px, and
    # ten columns ran 345 px past it. The method and path read as one endpoint, under the provider that
    # serves it (a long path cut after two lines, whole in its title); whether the spec declares ACC
    # stays a filter and is on the tool's page (the provider's compile report says it too).
    list_display = ["name", "provider_endpoint", "risk", "readonly", "approval", "enabled"]
    list_filter = ["enabled", "risk", "readonly", "approval_required", "has_acc", "provider"]
    search_fields = ["name", "description", "scope", "path"]
    list_select_related = ["provider", "provider__project"]
    actions = ["enable_tools", "disable_tools"]
    form = ToolSwitchForm
    # What governs a call reads as sentences above the compiled tool, which stays whole (for support)
    # behind a click: the rate limit, timeout and approval rule were only in a JSON dump ~1,500 px tall.
    _described = ("provider", "name", "method", "path", "description", "scope")
    _governed = ("risk", "readonly", "approval", "rate_limit", "timeout", "arguments_kept", "has_acc", "held_reason",
                 "enabled")
    fieldsets = [
        (None, {"fields": _described}),
        ("How calls are governed", {"fields": _governed}),
        ("Compiled tool (JSON)", {"fields": ("compiled_json",), "classes": ["collapse"]}),
    ]
    readonly_fields = [name for name in [*_described, *_governed, "compiled_json"] if name != "enabled"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Tool]:
        # Each row joins its provider: never its spec or compile report (a 21 MB spec made a page of
        # 100 rows read 2 GB).
        queryset: QuerySet[Tool] = super().get_queryset(request).select_related("provider").defer(
            "provider__spec", "provider__compile_report")
        return queryset

    @admin.display(description="Provider · endpoint", ordering="provider")
    def provider_endpoint(self, obj: Tool) -> SafeString:
        return format_html('{}<span class="bh-endpoint" title="{} {}">{} {}</span>',
                           obj.provider.name, obj.method, obj.path, obj.method, breaking_at_slashes(obj.path))

    @admin.display(description="Approval", ordering="approval_required")
    def approval(self, obj: Tool) -> str:
        """Always, when a rule matches (which), or no: a ✓ read as "every call is reviewed" for a
        tool that asks only above a quantity."""
        return approval_summary(obj.compiled)

    @admin.display(description="Rate limit")
    def rate_limit(self, obj: Tool) -> str:
        return rate_limit_text(obj.compiled.get("rate_limit"), held=bool(obj.held_reason))

    @admin.display(description="Timeout")
    def timeout(self, obj: Tool) -> str:
        milliseconds = obj.compiled.get("timeout_ms")
        if not isinstance(milliseconds, int):
            return "—"
        return f"{milliseconds / 1000:g}\N{NO-BREAK SPACE}s for the business system to answer a call"

    @admin.display(description="Arguments in the ledger")
    def arguments_kept(self, obj: Tool) -> str:
        if obj.compiled.get("audit_sensitive"):
            return ("Marked sensitive (audit.sensitive): a waiting call's arguments show only to members who may "
                    "decide it, on its approval's page")
        return "Shown to the project's members while a call waits; dropped once it has a final result"

    @admin.display(description="Compiled")
    def compiled_json(self, obj: Tool) -> SafeString:
        return format_html('<pre class="bh-pre compiled-tool">{}</pre>',
                           json.dumps(obj.compiled, indent=2, ensure_ascii=False, sort_keys=True))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Tool, form: Any, change: bool) -> None:
        try:
            services.tool_set_enabled(tool=obj, enabled=form.cleaned_data["enabled"])
        except ToolHeldBySpec:  # a re-import held it since the form was read
            messages.error(request, f"{obj.name} was not switched on: {ToolHeldBySpec.message}")
            request.tool_held = True  # type: ignore[attr-defined]  # response_change: no "changed successfully"
            return
        if "enabled" in form.changed_data and not form.cleaned_data["enabled"]:
            _warn_stranded_calls(request, tool_ids=[obj.pk])

    def log_change(self, request: HttpRequest, obj: Tool, message: Any) -> Any:
        if getattr(request, "tool_held", False):  # nothing changed: no "Changed Enabled." in its history
            return None
        return super().log_change(request, obj, message)

    def response_change(self, request: HttpRequest, obj: Tool) -> HttpResponse:
        if getattr(request, "tool_held", False):
            return HttpResponseRedirect(reverse("admin:tools_tool_change", args=[obj.pk]))
        return super().response_change(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Tool | None = None) -> bool:
        return False

    def _switch(self, request: HttpRequest, queryset: QuerySet[Tool], enabled: bool
                ) -> tuple[list[Any], list[str]]:
        """The ids of the tools switched, and the names of those their spec held off."""
        # The action's "change" permission only says the operator edits some project; a tool of a
        # project where they are a viewer is left as it is.
        if not request.user.is_superuser:
            queryset = queryset.filter(provider__project__in=self.editable_project_ids(request))
        switched: list[Any] = []
        held: list[str] = []
        for tool in queryset:
            try:
                services.tool_set_enabled(tool=tool, enabled=enabled)
            except ToolHeldBySpec:  # held by its spec (Tool.held_reason): left off
                held.append(tool.name)
                continue
            switched.append(tool.pk)
        return switched, held

    @admin.action(description="Enable selected tools", permissions=["change"])
    def enable_tools(self, request: HttpRequest, queryset: QuerySet[Tool]) -> None:
        switched, held = self._switch(request, queryset, True)
        count = len(switched)
        self.message_user(request, ngettext("%(count)d tool enabled.", "%(count)d tools enabled.", count)
                          % {"count": count}, messages.SUCCESS)
        if held:
            shown = ", ".join(held[:10]) + (", …" if len(held) > 10 else "")
            self.message_user(request, f"Left off, held by their spec (a rate limit the hub cannot read; fix it in "
                                       f"the spec and re-import): {shown}.", messages.WARNING)

    @admin.action(description="Disable selected tools", permissions=["change"])
    def disable_tools(self, request: HttpRequest, queryset: QuerySet[Tool]) -> None:
        switched, _held = self._switch(request, queryset, False)
        count = len(switched)
        self.message_user(request, ngettext("%(count)d tool disabled.", "%(count)d tools disabled.", count)
                          % {"count": count}, messages.SUCCESS)
        if switched:
            _warn_stranded_calls(request, tool_ids=switched)


def _warn_stranded_calls(request: HttpRequest, *, tool_ids: list[Any]) -> None:
    """Tools switched off strand the calls of theirs still waiting for an approval: their agents'
    resume is refused (tool_not_found) while the tools are off. Said once switched, counted in one
    query (a re-import and a provider's delete say it too: ToolProviderAdmin._warn_stranded)."""
    waiting = selectors.approvals_waiting_for_tools(tool_ids=tool_ids)
    pending, approved = waiting["pending"], waiting["approved"]
    if not pending and not approved:
        return
    parts = [ngettext("%(n)d pending approval", "%(n)d pending approvals", pending) % {"n": pending}] if pending else []
    if approved:
        parts.append(ngettext("%(n)d approved call not yet resumed", "%(n)d approved calls not yet resumed", approved)
                     % {"n": approved})
    # An approved call resumed while its tool is off is settled unsent for good
    # (invocations._approved_unrunnable): switching the tool back on brings back only pending ones.
    messages.warning(request, format_html(
        "Calls still waiting for their approval cannot run while {}: {}. Their agents' resume is refused "
        "(tool_not_found), an approved call's for good, and their approval pages say so; deny the pending ones in "
        "the <a href=\"{}\">approval queue</a>, or switch {} back on before they are decided.",
        ngettext("this tool is off", "these tools are off", len(tool_ids)), " and ".join(parts),
        reverse("admin:tools_approval_changelist") + "?status=pending",
        ngettext("it", "them", len(tool_ids))))


# The approval queue, the execution pause and the invocation ledger register themselves on import.
from . import admin_approvals, admin_invocations  # noqa: E402,F401
