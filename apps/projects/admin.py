from __future__ import annotations

from django.contrib import admin

from apps.projects.models import Membership, Project
from apps.projects.selectors import project_list_editable, project_list_visible


class ProjectScopedAdminMixin:
    """Operators see rows of the projects they belong to and change those where they are
    owner or editor; superusers see everything. Model permissions are not needed on top."""

    project_lookup = "project"

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

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        return queryset.filter(**{f"{self.project_lookup}__in": self.visible_project_ids(request)})

    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_staff and (
            request.user.is_superuser or bool(self.visible_project_ids(request))
        )

    def has_view_permission(self, request, obj=None):
        if obj is None:
            return self.has_module_permission(request)
        return self._project_of(obj).pk in self.visible_project_ids(request)

    def has_add_permission(self, request):
        return request.user.is_staff and bool(self.editable_project_ids(request))

    def has_change_permission(self, request, obj=None):
        if obj is None:
            return request.user.is_staff and bool(self.editable_project_ids(request))
        return self._project_of(obj).pk in self.editable_project_ids(request)

    def has_delete_permission(self, request, obj=None):
        return self.has_change_permission(request, obj)

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "project":
            kwargs["queryset"] = project_list_editable(user=request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Project)
class ProjectAdmin(ProjectScopedAdminMixin, admin.ModelAdmin):
    project_lookup = "pk"
    list_display = ["name", "slug", "created_at"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]

    def _project_of(self, obj):
        return obj

    def get_queryset(self, request):
        return project_list_visible(user=request.user)

    def has_add_permission(self, request):
        return request.user.is_superuser

    def has_change_permission(self, request, obj=None):
        if obj is None:
            return super().has_change_permission(request)
        return request.user.is_superuser or obj.memberships.filter(
            user=request.user, role=Membership.Role.OWNER
        ).exists()
