from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import utils as admin_utils
from django.contrib.auth import get_user_model
from django.core.validators import MinValueValidator
from django.db import IntegrityError
from django.db.models import CASCADE, PROTECT, RESTRICT, Field, ForeignObjectRel, Model, Q, QuerySet, Value
from django.db.models.functions import Lower
from django.http import HttpRequest, HttpResponse
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.text import capfirst

from apps.core.errors import ApiError
from apps.core.exceptions import ConsolePermissionDenied
from apps.core.integrity import unique_violated
from apps.core.names import name_taken
from apps.core.secret_messages import secret_message
from apps.projects.models import PROJECT_NAME_CONSTRAINT, PROJECT_NAME_TAKEN, Membership, OperatorToken, Project
from apps.projects.selectors import project_list_editable, project_list_visible
from apps.projects.services import membership_set
from apps.projects.tokens import operator_token_create, operator_token_revoke

if TYPE_CHECKING:
    # Mixed into ModelAdmin subclasses: typed as one so its super() calls are checked.
    _ModelAdminBase = admin.ModelAdmin
else:
    _ModelAdminBase = object


class ReadOnlyAdminMixin:
    """A record operators read and never write here: no add, change or delete, for a page or an inline."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class _NamedCells:
    def add_fields(self, form: forms.BaseForm, index: int | None) -> None:
        super().add_fields(form, index)  # type: ignore[misc]
        instance = getattr(form, "instance", None)
        # A new row's instance has its key already (a UUID's default) but not its related rows yet.
        row = "new row" if instance is None or instance._state.adding else str(instance)
        for name, field in form.fields.items():
            widget = getattr(field.widget, "widget", field.widget)  # inside the admin's related-object links
            if widget is not None and not widget.is_hidden:
                widget.attrs["aria-label"] = f"{field.label or capfirst(name)}: {row}"


class NamedCellsInlineMixin:
    """A tabular inline whose controls say what they are. Its rows' cells have no <label>: the column's
    header names a control only to the eye, and a screen reader read a member's role as "combo box" and
    a tool's switch as "checkbox, checked", with nothing to tell which column or row. Each control is
    named "<column>: <row>", the row as its title cell shows it."""

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        formset = super().get_formset(request, obj, **kwargs)  # type: ignore[misc]
        return type(formset.__name__, (_NamedCells, formset), {})


# How far a delete's cascade is followed (project → client → session → conversation → run → invocation
# → journal entry is six steps).
DELETION_DEPTH = 8


def deletion_counted(model_admin: admin.ModelAdmin, objs: Any, request: HttpRequest
                     ) -> tuple[list[Any], dict[str, int], set[str], list[str]]:
    """What deleting `objs` takes with it, counted: the admin's get_deleted_objects, in a query or
    two per model the delete cascades to, whatever the number of rows. Django's own list loads
    and prints every row it would delete: a knowledge base of 5,000 documents (100,000 chunks)
    took 150 s and 1 GB, an agent client of 250 sessions 85 s, a project over five minutes.

    The relations are Django's (the ones its collector follows): a CASCADE is followed, a PROTECT
    one that refers to a row being deleted refuses the delete, as the collector does. A model whose
    admin may not delete one of its rows (one of them is asked: cascaded rows are of the deleted
    row's project) is named in the permissions needed, as in Django's list. Where the graph has what
    this count does not follow as the collector does (a RESTRICT, which the collector lets pass when
    the restricting row goes too; a cascade deeper than DELETION_DEPTH), Django's own list is made."""
    objs = list(objs)
    if not objs:
        return [], {}, set(), []
    model = model_admin.model
    opts = model._meta
    admin_site = model_admin.admin_site
    # Each model the delete reaches, with the lookups from it to the deleted rows' primary keys.
    cascades: dict[type[Model], list[str]] = {}
    protecting: dict[type[Model], list[str]] = {}
    exact = True

    def follow(current: type[Model], lookup: str, chain: frozenset[type[Model]]) -> None:
        nonlocal exact
        for rel in current._meta.get_fields(include_hidden=True):
            if not (isinstance(rel, ForeignObjectRel) and (rel.one_to_many or rel.one_to_one)):
                continue
            related: type[Model] = rel.related_model  # type: ignore[assignment]  # a model class here
            path = f"{rel.field.name}__{lookup}"
            if rel.on_delete is RESTRICT:
                exact = False
            elif rel.on_delete is PROTECT:
                protecting.setdefault(related, []).append(path)
            elif rel.on_delete is CASCADE and related not in chain:
                if len(chain) >= DELETION_DEPTH:
                    exact = False
                    continue
                cascades.setdefault(related, []).append(path)
                follow(related, path, chain | {related})

    follow(model, "pk", frozenset({model}))
    if not exact:
        return admin_utils.get_deleted_objects(objs, request, admin_site)
    pks = [obj.pk for obj in objs]

    def reached(related: type[Model], paths: list[str]) -> QuerySet[Any]:
        condition = Q()
        for path in paths:
            condition |= Q(**{f"{path}__in": pks})
        return related._base_manager.filter(condition)

    perms_needed = set() if all(model_admin.has_delete_permission(request, obj) for obj in objs) \
        else {str(opts.verbose_name)}
    counts = {str(opts.verbose_name_plural): len(objs)}
    taken = []
    for related, paths in cascades.items():
        rows = reached(related, paths)
        n = rows.count()
        if not n:
            continue
        counts[str(related._meta.verbose_name_plural)] = n
        taken.append(f"{n:,} {related._meta.verbose_name if n == 1 else related._meta.verbose_name_plural}")
        if admin_site.is_registered(related) and not admin_site.get_model_admin(related).has_delete_permission(
                request, rows.first()):
            perms_needed.add(str(related._meta.verbose_name))
    protected = []
    for related, paths in protecting.items():
        n = reached(related, paths).count()
        if n:
            protected.append(f"{n:,} {related._meta.verbose_name if n == 1 else related._meta.verbose_name_plural}")

    def line(obj: Any) -> str:
        try:
            url = reverse(f"{admin_site.name}:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
        except NoReverseMatch:
            return format_html("{}: {}", capfirst(opts.verbose_name), obj)
        return format_html('{}: <a href="{}">{}</a>', capfirst(opts.verbose_name), url, obj)

    deleted: list[Any] = [line(obj) for obj in objs]
    if taken:
        deleted += [taken] if len(objs) == 1 else ["With them, in all:", taken]
    return deleted, counts, perms_needed, protected


# A page of an autocomplete past any real one (a number past PostgreSQL's OFFSET range was a 500)
# reads the first.
AUTOCOMPLETE_PAGES_MAX = 100_000


def unique_in_project(form: forms.ModelForm, field: str, message: str, *, lookalike: bool = False) -> None:
    """From a form's `clean`, whose model is unique by (project, field): a value another object
    of the project has, or with `lookalike` one that reads the same (apps.core.names: a name a
    person types, not a key whose format its own validator checks after this), is an error beside
    the field. Django checks that constraint only while the project is a field of the form; on a
    saved object's page the project is read-only, and a taken name failed in the save (a 500); on
    the add page it said so above the form. `message` is the one the API gives (the service's
    error or the constraint's). Two operators saving the same name at once can both pass this
    check; the constraint then refuses one save, which the admin answers as this check would
    (ProjectScopedAdminMixin.unique_constraints)."""
    value = form.cleaned_data.get(field)
    instance = form.instance
    if not instance._state.adding and field not in form.changed_data:
        return  # a name kept as it was: one saved before names were compared as they read stays saveable
    if "project" in form.fields:
        project_id = getattr(form.cleaned_data.get("project"), "pk", None)
    else:
        project_id = instance.project_id
    others = type(instance).objects.filter(project_id=project_id).exclude(pk=instance.pk)
    if value and project_id and (name_taken(others, value, field=field) if lookalike
                                 else others.filter(**{field: value}).exists()):
        form.add_error(field, message)


def listed_unless_over(queryset: QuerySet[Any], maximum: int) -> list[Any] | None:
    """`queryset`'s rows to list as a field's choices, or None past `maximum` of them: the field
    then finds them by searching (an autocomplete), and no more than maximum + 1 were read."""
    listed = list(queryset[:maximum + 1])
    return listed if len(listed) <= maximum else None


def autocomplete_words(request: HttpRequest) -> list[str]:
    """The words of the search term Django's autocomplete sends (`term`). PostgreSQL takes no NUL
    in text: a term holding one was a 500; such a character separates words and matches nothing."""
    return request.GET.get("term", "").replace("\x00", " ").split()


def autocomplete_page(request: HttpRequest, queryset: QuerySet[Any], *, per_page: int) -> tuple[list[Any], bool]:
    """The page of an ordered `queryset` Django's autocomplete asks for (`page`, from 1), and whether
    more follow."""
    page = request.GET.get("page", "1")
    first = (int(page) - 1) * per_page if page.isdecimal() and 0 < int(page) < AUTOCOMPLETE_PAGES_MAX else 0
    rows = list(queryset[first:first + per_page + 1])
    return rows[:per_page], len(rows) > per_page


class ProjectScopedAdminMixin(_ModelAdminBase):
    """Operators see rows of the projects they belong to and change those where they are
    owner or editor; superusers see everything. Model permissions are not needed on top."""

    project_lookup = "project"
    # The unique constraints that the form checks (unique_in_project) but two saves at once can
    # both pass, each with the code of the error its service raises when it sees the other's row
    # first ("" when there is no service check): the later save's write then broke the constraint,
    # or the service refused it, and either was a 500.
    unique_constraints: dict[str, str] = {}

    def changeform_view(self, request: HttpRequest, object_id: str | None = None, form_url: str = "",
                        extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """A save refused by one of `unique_constraints` is answered as the form answers a taken
        name: the admin's transaction has rolled back (nothing of this save is kept), and the page
        is made again, once, in a new one, where the other save's row is there to be found. Any
        other integrity error is a bug and stays one."""
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except (IntegrityError, ApiError) as exc:
            if request.method != "POST" or not self.unique_race(exc):
                raise
        for _, uploads in request.FILES.lists():
            for upload in uploads:
                upload.seek(0)  # the form reads them again
        return super().changeform_view(request, object_id, form_url, extra_context)

    def unique_race(self, exc: BaseException) -> bool:
        """Whether `exc` is another save's row taking a value of one of `unique_constraints`."""
        if isinstance(exc, ApiError) and exc.code in filter(None, self.unique_constraints.values()):
            return True
        return unique_violated(exc) in self.unique_constraints

    def formfield_for_dbfield(self, db_field: Field[Any, Any], request: HttpRequest,
                              **kwargs: Any) -> forms.Field | None:
        """A whole-number field's form field starts at the model's own lowest value: a positive
        field's form said "greater than or equal to 0" of -5 where 0 is refused too."""
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        lowest = max((validator.limit_value for validator in db_field.validators
                      if isinstance(validator, MinValueValidator) and isinstance(validator.limit_value, int)),
                     default=None)
        if isinstance(field, forms.IntegerField) and lowest is not None and lowest > (field.min_value or 0):
            field.min_value = lowest
            field.validators = [validator for validator in field.validators
                                if not isinstance(validator, MinValueValidator)] + [MinValueValidator(lowest)]
            field.widget.attrs["min"] = lowest
        return field

    def _project_of(self, obj):
        for part in self.project_lookup.split("__"):
            obj = getattr(obj, part)
        return obj

    @staticmethod
    def visible_project_ids(request) -> set:
        # Admin pages ask for permissions many times a request; resolve membership once.
        if not hasattr(request, "_bh_visible_projects"):
            request._bh_visible_projects = set(
                project_list_visible(user=request.user).values_list("pk", flat=True)
            )
        return request._bh_visible_projects

    @staticmethod
    def editable_project_ids(request) -> set:
        if not hasattr(request, "_bh_editable_projects"):
            request._bh_editable_projects = set(
                project_list_editable(user=request.user).values_list("pk", flat=True)
            )
        return request._bh_editable_projects

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        return queryset.filter(**{f"{self.project_lookup}__in": self.visible_project_ids(request)})

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.is_staff and (
            request.user.is_superuser or bool(self.visible_project_ids(request))
        )

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is None:
            return self.has_module_permission(request)
        return self._project_of(obj).pk in self.visible_project_ids(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.is_staff and bool(self.editable_project_ids(request))

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is None:
            return request.user.is_staff and bool(self.editable_project_ids(request))
        return self._project_of(obj).pk in self.editable_project_ids(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_change_permission(request, obj)

    def get_deleted_objects(self, objs: Any, request: HttpRequest
                            ) -> tuple[list[Any], dict[str, int], set[str], list[str]]:
        return deletion_counted(self, objs, request)

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        """An operator who edits one project has no project to pick on an add form."""
        initial = super().get_changeform_initial_data(request)
        editable = self.editable_project_ids(request)
        if self.project_lookup == "project" and len(editable) == 1 and not request.user.is_superuser:
            initial.setdefault("project", next(iter(editable)))
        return initial

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "project":
            kwargs["queryset"] = project_list_editable(user=request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def get_list_filter(self, request):
        """A filter on a relation offers only the related rows of rows this operator may see:
        a plain `"project"` or `"client"` filter would list every project's names."""
        scoped = []
        for item in super().get_list_filter(request):
            if isinstance(item, str) and "__" not in item:
                field = self.model._meta.get_field(item)
                if field.is_relation:
                    item = (item, admin.RelatedOnlyFieldListFilter)
            scoped.append(item)
        return scoped


class MembershipForm(forms.ModelForm):
    # A username, not a list of every account: an owner names the colleague to add.
    user = forms.ModelChoiceField(
        queryset=get_user_model().objects.filter(is_active=True), to_field_name="username",
        widget=forms.TextInput(attrs={"placeholder": "username"}),
        error_messages={"invalid_choice": "No active user has this username."},
    )

    class Meta:
        model = Membership
        fields = ["user", "role"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.user_id is not None:
            self.initial["user"] = self.instance.user.username
        if not self.instance._state.adding:
            # The admin titles an inline row with the formset's own row object; validation writes the
            # posted values onto the form's instance. On a copy, a refused save (the last owner
            # demoted) leaves the title with the stored role, not the refused one.
            self.instance = copy.copy(self.instance)


class MembershipFormSet(forms.BaseInlineFormSet):
    """A project keeps at least one owner: the last one cannot be demoted or removed here (only
    an owner manages members, so a project without one could be repaired by a site admin alone).

    Counted on the members as they are now, the project row locked until the admin's transaction
    ends: two owners demoting each other at once each see the other's change, and the second fails."""

    def clean(self) -> None:
        super().clean()
        if any(form.errors for form in self.forms) or self.instance._state.adding:
            return
        Project.objects.select_for_update().filter(pk=self.instance.pk).first()
        roles: dict[Any, str] = dict(Membership.objects.filter(project=self.instance).values_list("pk", "role"))
        had_members = bool(roles)
        for index, form in enumerate(self.forms):
            data = form.cleaned_data
            if not data:
                continue
            key = f"new-{index}" if form.instance._state.adding else form.instance.pk
            if data.get("DELETE"):
                roles.pop(key, None)
            elif form.has_changed() or key not in roles:
                roles[key] = data.get("role")
        if had_members and Membership.Role.OWNER not in roles.values():
            raise forms.ValidationError("A project must keep at least one owner: make another member the owner "
                                        "before you change or remove the last one. Nothing was saved.")


class MembershipInline(NamedCellsInlineMixin, admin.TabularInline):
    """Owners manage who works on their project; editors and viewers see the members."""

    model = Membership
    form = MembershipForm
    formset = MembershipFormSet
    extra = 0

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("user", "project")

    def has_view_permission(self, request, obj=None):
        return obj is None or request.user.is_superuser or obj.pk in ProjectScopedAdminMixin.visible_project_ids(
            request)

    def has_add_permission(self, request, obj=None):
        return obj is not None and project_is_owned(request=request, project=obj)

    def has_change_permission(self, request, obj=None):
        return obj is not None and project_is_owned(request=request, project=obj)

    def has_delete_permission(self, request, obj=None):
        return obj is not None and project_is_owned(request=request, project=obj)


def project_is_owned(*, request, project: Project) -> bool:
    if request.user.is_superuser:
        return True
    if not hasattr(request, "_bh_owned_projects"):
        request._bh_owned_projects = set(
            Membership.objects.filter(user=request.user, role=Membership.Role.OWNER).values_list("project_id",
                                                                                              flat=True)
        )
    return project.pk in request._bh_owned_projects


class ProjectForm(forms.ModelForm):
    def clean_name(self) -> str:
        """A name another project has, in any case, is an error beside the field — as the constraint
        (PROJECT_NAME_CONSTRAINT) compares them; the constraint's own check would say it above the form."""
        name = self.cleaned_data["name"]
        if Project.objects.alias(key=Lower("name")).filter(key=Lower(Value(name))).exclude(
                pk=self.instance.pk).exists():
            raise forms.ValidationError(PROJECT_NAME_TAKEN, code="unique")
        return name


@admin.register(Project)
class ProjectAdmin(ProjectScopedAdminMixin, admin.ModelAdmin):
    form = ProjectForm
    project_lookup = "pk"
    unique_constraints = {PROJECT_NAME_CONSTRAINT: ""}
    list_display = ["name", "slug", "created_at"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]
    # The pause is switched on its own confirmation page (through its service), not by a checkbox
    # saved along with the name.
    exclude = ["tool_execution_paused"]
    readonly_fields = ["tool_execution"]

    def _project_of(self, obj):
        return obj

    def get_object(self, request, object_id, from_field=None):
        project = super().get_object(request, object_id, from_field)
        if project is not None:  # the pause button is for those who may press it (owners and editors)
            project._bh_may_pause = project.pk in self.editable_project_ids(request)
        return project

    @admin.display(description="Tool execution")
    def tool_execution(self, obj):
        if obj is None or obj._state.adding:
            return "running (pause it from the approval queue once the project exists)"
        paused = obj.tool_execution_paused
        badge = format_html('<span class="bh-badge {}">{}</span>', "bh-bad" if paused else "bh-ok",
                            "paused" if paused else "running")
        if not getattr(obj, "_bh_may_pause", False):
            return badge
        return format_html('{} <a class="button" href="{}">{}</a>', badge,
                           reverse("admin:tools_approval_execution", args=[obj.pk]) + "?from=project",
                           "Resume…" if paused else "Pause…")

    def get_queryset(self, request):
        return project_list_visible(user=request.user)

    def has_add_permission(self, request):
        # A project's owner already decides who works on it; they may start another one, which they own.
        # Asked for each app list a page builds (the dashboard builds two): read once per request.
        if request.user.is_superuser:
            return True
        if not hasattr(request, "_bh_owns_a_project"):
            request._bh_owns_a_project = request.user.is_staff and Membership.objects.filter(
                user=request.user, role=Membership.Role.OWNER).exists()
        return request._bh_owns_a_project

    def add_view(self, request, form_url="", extra_context=None):
        if not self.has_add_permission(request):
            raise ConsolePermissionDenied("Only a site administrator or the owner of a project can create a project. "
                                          "Ask one to create it and make you its owner.")
        return super().add_view(request, form_url, extra_context)

    def get_inlines(self, request, obj):
        # A new project has no members to list: its creator becomes its owner when it is saved.
        return [] if obj is None else super().get_inlines(request, obj)

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        if not change:
            # Never ownerless: its members are added on its page, once it exists, by an owner. Inside the
            # add view's transaction, so the project and its owner are saved together or not at all.
            membership_set(project=obj, user=request.user, role=Membership.Role.OWNER)
            self.message_user(request, f"You are the owner of {obj.name}: add its other members on its page.",
                              messages.INFO)

    def has_change_permission(self, request, obj=None):
        if obj is None:
            return super().has_change_permission(request)
        return project_is_owned(request=request, project=obj)

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser  # deleting a project deletes all its routes, knowledge and ledger


class OperatorTokenForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(choices=OperatorToken.Scope.choices, widget=forms.CheckboxSelectMultiple)

    class Meta:
        model = OperatorToken
        fields = ["name", "scopes", "expires_at"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The admin's date and time boxes stand after the words "Date:" and "Time:", which label neither
        # of them: a screen reader read two unnamed edit fields. An existing token's page has no
        # such field: every field of it is read-only (a token is revoked, never changed).
        if "expires_at" not in self.fields:
            return
        widget = self.fields["expires_at"].widget
        for box, part in zip(getattr(widget, "widgets", ()), ("date", "time"), strict=False):
            box.attrs["aria-label"] = f"Expires at: {part}"

    def clean_expires_at(self):
        expires_at = self.cleaned_data.get("expires_at")
        if expires_at is not None and expires_at <= timezone.now():
            raise forms.ValidationError("Must be in the future: a token that has already expired cannot be used.")
        return expires_at


@admin.register(OperatorToken)
class OperatorTokenAdmin(admin.ModelAdmin):
    """Operators manage their own builder API tokens; the token is shown once, at creation."""

    form = OperatorTokenForm
    list_display = ["name", "user", "prefix", "scope_list", "expires_at", "revoked_at", "last_used_at"]
    actions = ["revoke_tokens"]

    def get_queryset(self, request):
        queryset = super().get_queryset(request).select_related("user")
        return queryset if request.user.is_superuser else queryset.filter(user=request.user)

    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_staff

    def has_view_permission(self, request, obj=None):
        return self.has_module_permission(request) and (obj is None or obj.user_id == request.user.pk
                                                         or request.user.is_superuser)

    def has_add_permission(self, request):
        return self.has_module_permission(request)

    def has_change_permission(self, request, obj=None):
        return obj is None and self.has_module_permission(request)  # tokens do not change; revoke them

    def has_delete_permission(self, request, obj=None):
        return False

    def get_readonly_fields(self, request, obj=None):
        return ["name", "scopes", "expires_at", "prefix", "revoked_at", "last_used_at"] if obj else []

    @admin.display(description="Scopes")
    def scope_list(self, obj: OperatorToken) -> str:
        return " ".join(obj.scopes)

    def save_model(self, request, obj, form, change):
        row, token = operator_token_create(user=request.user, name=form.cleaned_data["name"],
                                           scopes=form.cleaned_data["scopes"],
                                           expires_at=form.cleaned_data.get("expires_at"))
        obj.pk, obj.user, obj.prefix = row.pk, row.user, row.prefix
        obj.created_at, obj.updated_at = row.created_at, row.updated_at
        obj._state.adding = False
        request._operator_token_created = token  # type: ignore[attr-defined]  # for response_add, once

    def response_add(self, request, obj, post_url_continue=None):
        """The new token in a message on the page the add redirects to, as a new agent-client token.
        It was the answer to the form's POST itself: reloading it (the browser's "Confirm Form
        Resubmission") posted the form again and minted a second live token, the first one never to
        be seen again. Messages wait in the session (MESSAGE_STORAGE), never in a cookie, and leave
        it once shown."""
        token = getattr(request, "_operator_token_created", None)
        if token is not None:
            secret_message(request, lead=f"New builder API token “{obj.name}” — copy it now, it will not be shown "
                                         "again", secret=token, element_id="operator-token")
        return super().response_add(request, obj, post_url_continue)

    def delete_view(self, request, object_id, extra_context=None):
        raise ConsolePermissionDenied("A builder API token is not deleted: revoke it (the “Revoke the selected "
                                      "tokens” action on the list), so its past use stays on record.")

    @admin.action(description="Revoke the selected tokens")
    def revoke_tokens(self, request, queryset):
        for token in queryset:
            operator_token_revoke(token=token)
        self.message_user(request, "Revoked.", messages.SUCCESS)

