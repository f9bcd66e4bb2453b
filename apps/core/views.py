from django.core.exceptions import DisallowedHost, SuspiciousOperation
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from apps.core.exceptions import ConsolePermissionDenied, error_response, suspicious_message
from apps.core.health import readiness
from apps.core.middleware import error_page
from apps.core.paths import is_json_path


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    checks = readiness()
    failed = [name for name, state in checks.items() if state != "ok"]
    if failed:
        return error_response(503, "Not ready: " + ", ".join(failed) + ".", "not_ready", checks=checks)
    return JsonResponse({"status": "ready", "checks": checks})


def _console_path(path: str) -> bool:
    return path.startswith("/admin/")


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if is_json_path(request.path):
        return error_response(404)
    if _console_path(request.path):
        return error_page(request, 404, "This page does not exist, or it belongs to a project you are not a "
                                        "member of.")
    return defaults.page_not_found(request, exception)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """A request Django refused before any view read it (more files or fields than a form may
    carry): in the console, a page that names the limit and leads back — Django's own is a bare
    "Bad Request (400)", as an operator who chose too many files to upload got."""
    if is_json_path(request.path):
        return error_response(400)
    if _console_path(request.path) and not isinstance(exception, DisallowedHost):  # the page reads the host
        reason = suspicious_message(exception) if isinstance(exception, SuspiciousOperation) else None
        return error_page(request, 400, f"{reason or 'The request could not be read.'} Nothing was saved.")
    return defaults.bad_request(request, exception)


def _site_wide_admin_page(request: HttpRequest) -> bool:
    """An admin page of a model no project owns (users, groups, embedding models): its admin has
    no `project_lookup`, the mark of the project-scoped admins."""
    match = getattr(request, "resolver_match", None)
    model_admin = getattr(getattr(match, "func", None), "model_admin", None)
    return model_admin is not None and not hasattr(model_admin, "project_lookup")


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if is_json_path(request.path):
        return error_response(403)
    if _console_path(request.path):
        if isinstance(exception, ConsolePermissionDenied):  # a view that knows why, in words meant for operators
            return error_page(request, 403, str(exception))
        if _site_wide_admin_page(request):
            return error_page(request, 403, "This page is for site administrators: what it manages is shared by "
                                            "every project. Ask a site administrator.")
        return error_page(request, 403, "Your role in this project does not allow this. An owner of the project "
                                        "can give you the editor role.")
    return defaults.permission_denied(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if is_json_path(request.path):
        return error_response(500)
    return defaults.server_error(request)
