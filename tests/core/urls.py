"""Views that raise each kind of error, mounted under the JSON prefixes for the error-model tests."""

import logging

from django.core.exceptions import PermissionDenied
from django.http import Http404, JsonResponse
from django.urls import include, path
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.errors import ApiError
from apps.core.exceptions import ConsolePermissionDenied


class EchoSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=5)


class EchoApi(APIView):
    authentication_classes = []
    permission_classes = []

    def post(self, request):
        serializer = EchoSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return Response({"bytes": len(request.body), "name": serializer.validated_data["name"]})


class SmallEchoApi(EchoApi):
    body_max_bytes = 1024


class ForbiddenApi(APIView):
    authentication_classes = []
    permission_classes = []

    def get(self, request):
        raise PermissionDenied


class MissingApi(APIView):
    authentication_classes = []
    permission_classes = []

    def get(self, request):
        raise Http404


class BrokenApi(APIView):
    authentication_classes = []
    permission_classes = []

    def get(self, request):
        raise RuntimeError("secret internal detail: postgres://user:pw@10.0.0.5/db")


class ConflictApi(APIView):
    authentication_classes = []
    permission_classes = []

    def get(self, request):
        raise ApiError("Already processed.", code="already_processed", status=409, authorization_id="a1")


class LogRequestApi(APIView):
    """Logs everything a careless view might (headers, query, body, path), then fails with the body
    in the exception: the log output must still carry no credential."""

    authentication_classes = []
    permission_classes = []

    def post(self, request, secret):
        log = logging.getLogger("bailinghub.test")
        log.warning("headers %s", dict(request.headers))
        log.warning("query %s body %s path %s", request.GET.urlencode(), request.body.decode(), request.path)
        log.warning("data %r", request.data)
        raise RuntimeError(f"failed for {request.data} at {request.get_full_path()}")


def plain_broken(request):
    raise RuntimeError("plain view failure")


def plain_missing(request):
    raise Http404


def plain_ok(request):
    return JsonResponse({"ok": True})


api = [
    path("echo", EchoApi.as_view()),
    path("small-echo", SmallEchoApi.as_view()),
    path("forbidden", ForbiddenApi.as_view()),
    path("missing", MissingApi.as_view()),
    path("broken", BrokenApi.as_view()),
    path("conflict", ConflictApi.as_view()),
    path("plain-broken", plain_broken),
    path("plain-missing", plain_missing),
    path("plain-ok", plain_ok),
    path("slashed/", plain_ok),  # APPEND_SLASH would redirect `slashed` here
    path("log-request/<str:secret>", LogRequestApi.as_view()),
]


def console_forbidden(request):
    raise PermissionDenied("internal detail: row 42 of knowledge_chunk")


def console_forbidden_with_reason(request):
    raise ConsolePermissionDenied("Only a site administrator can do this.")


handler403 = "apps.core.views.permission_denied"  # as bailinghub.urls

urlpatterns = [
    path("admin/test/forbidden", console_forbidden),
    path("admin/test/forbidden-with-reason", console_forbidden_with_reason),
    path("plain/slashed/", plain_ok),
    path("agent-api/test/", include(api)),
    path("agent-auth/test/", include(api)),
    path("", include("bailinghub.urls")),
]
