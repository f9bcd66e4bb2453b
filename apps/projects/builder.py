"""The builder API's shared access rule, for every app that serves part of it: operators sign in by
session (every scope their project role allows) or with a personal API token limited to its scopes.

A view names the scope a write needs (``required_scope``); a view without one is a read and needs any
scope of its family (``scope_family``, e.g. ``"knowledge"``)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Model, Q, QuerySet
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.views import APIView

from apps.core.errors import ApiError, InvalidRequest
from apps.core.exceptions import validation_extra, validation_message
from apps.core.parsers import InvalidJSON
from apps.core.query import query_repeated_check
from apps.projects.authentication import OperatorTokenAuthentication
from apps.projects.errors import InsufficientScope, InvalidFields
from apps.projects.models import OperatorToken


class HasTokenScope(BasePermission):
    def has_permission(self, request, view) -> bool:
        token = request.auth
        if not isinstance(token, OperatorToken):
            return True
        required = getattr(view, "required_scope", None)
        if required is None:
            family = getattr(view, "scope_family", "knowledge")
            families = (family,) if isinstance(family, str) else tuple(family)
            if not any(scope.startswith(f"{name}:") for name in families for scope in token.scopes):
                raise InsufficientScope(f"The token has no {' or '.join(families)} scope.")
            return True
        if required not in token.scopes:
            raise InsufficientScope(f"The token lacks the {required} scope.", required_scope=required)
        return True


class BuilderApi(APIView):
    """Base of every builder API view: operator token or session, then the scope rule above.

    A body that is JSON but holds a value no field can take (``1e999``, a key with a lone
    surrogate) is answered like any invalid field — 422 with the view's ``invalid_error`` naming it —
    not as unparseable text (400 ``invalid_json``). A query parameter given more than once is 400
    on every operation, as on the agent API (query_repeated_check)."""

    authentication_classes = [OperatorTokenAuthentication, SessionAuthentication]
    permission_classes = [IsAuthenticated, HasTokenScope]
    required_scope: str | None = None
    scope_family: str | tuple[str, ...] = "knowledge"  # a read needs a scope of one of these families
    invalid_error: type[ApiError] = InvalidFields

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # authentication and scope first: 401 and 403 before 400
        query_repeated_check(request.query_params)

    def handle_exception(self, exc):
        if isinstance(exc, InvalidJSON) and exc.value_refused and exc.path:
            problem = exc.problem.rstrip(".").capitalize() + "."
            exc = self.invalid_error(f"{exc.path}: {problem}", fields={exc.path: [problem]})
        return super().handle_exception(exc)


def by_method(**views: Any) -> Any:
    """One URL, one view class per HTTP method. Attributes the middleware reads (body limits)
    come from the class handling the body (`cls`)."""
    handlers = {method.upper(): view for method, view in views.items()}
    # Each view's APIView writes Allow with its own methods only; the URL allows every view's
    # (a 405 to PUT on a GET|POST URL said "GET, HEAD, OPTIONS", and a client reading it found no POST).
    offered = {method for view in handlers.values() for method in view.cls(**view.initkwargs).allowed_methods}
    if "GET" in offered:
        offered.add("HEAD")  # View.setup() answers HEAD with get()
    allow = ", ".join(name.upper() for name in View.http_method_names if name.upper() in offered)

    @csrf_exempt
    def dispatch(request: Any, *args: Any, **kwargs: Any) -> Any:
        handler = handlers.get(request.method)
        if handler is None:
            handler = next(iter(handlers.values()))  # its APIView answers 405
        response = handler(request, *args, **kwargs)
        if response.has_header("Allow"):
            response["Allow"] = allow
        return response

    body_view = handlers.get("POST") or handlers.get("PATCH") or next(iter(handlers.values()))
    dispatch.cls = body_view.cls  # type: ignore[attr-defined]
    dispatch.views = handlers  # type: ignore[attr-defined]  # the OpenAPI schema describes each method by its view
    return dispatch


_DIGITS = re.compile(r"[0-9]{1,10}")


def query_error(name: str, message: str) -> InvalidRequest:
    """400 `invalid_request` naming one query parameter."""
    return InvalidRequest(f"{name}: {message}", fields={name: [message]})


def query_integer(request: Any, name: str, default: int, low: int, high: int) -> int:
    """The query parameter `name` as an integer from `low` to `high` (plain ASCII digits), or
    `default` when it is absent; anything else is 400 naming it."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not _DIGITS.fullmatch(raw) or not low <= int(raw) <= high:
        raise query_error(name, f"An integer from {low} to {high} is required.")
    return int(raw)


def query_boolean(request: Any, name: str) -> bool | None:
    """The query parameter `name` as `true` or `false`, or None when it is absent or empty;
    anything else is 400 naming it."""
    raw = request.query_params.get(name) or None
    if raw is not None and raw not in ("true", "false"):
        raise query_error(name, "true or false is required.")
    return None if raw is None else raw == "true"


_CURSOR = re.compile(r"([0-9]{1,18})\.([0-9A-Za-z-]{1,64})")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _cursor_of(row: Model) -> str:
    """A position in a newest-first listing: the row's creation time (microseconds) and its id."""
    return f"{(row.created_at - _EPOCH) // _MICROSECOND}.{row.pk}"  # type: ignore[attr-defined]


def _after_cursor(queryset: QuerySet, raw: str) -> QuerySet:
    """The rows of `queryset` (ordered `-created_at`, then `id` or `-id`: newest_first_page checks)
    that come after the position `raw`; a malformed cursor is 400 naming it."""
    match = _CURSOR.fullmatch(raw)
    try:
        if match is None:
            raise ValueError
        created_at = _EPOCH + int(match[1]) * _MICROSECOND
        pk = queryset.model._meta.pk.to_python(match[2])
    except (ValueError, OverflowError, ValidationError):
        raise query_error("cursor", "The next_cursor of an earlier page of this listing is required.") from None
    later_id = "id__lt" if queryset.query.order_by[1] == "-id" else "id__gt"
    return queryset.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, **{later_id: pk}))


def newest_first_page(request: Any, queryset: QuerySet, *, limit_max: int, offset_max: int,
                      limit_default: int = 100) -> tuple[list[Any], dict[str, Any]]:
    """One page of a newest-first listing and its `meta`: `{total, offset, limit, next_cursor}`.

    A page is asked for by `offset`, or by `cursor` — the `next_cursor` of the page before. Rows
    added meanwhile shift offset pages (a walk sees a row twice) but never a cursor walk: a cursor
    is a position (creation time, id), not a row, so it also holds after its row is deleted.
    `next_cursor` is null on the last page; `offset` is null on a cursor's page."""
    if tuple(queryset.query.order_by) not in (("-created_at", "id"), ("-created_at", "-id")):
        raise ValueError(f"{queryset.model.__name__} is not listed newest first")  # a programming error
    limit = query_integer(request, "limit", limit_default, 1, limit_max)
    raw_cursor = request.query_params.get("cursor")
    if raw_cursor is not None and "offset" in request.query_params:
        raise query_error("cursor", "Page by offset or by cursor, not both.")
    if raw_cursor is None:  # every parameter is checked before the first query
        offset: int | None = query_integer(request, "offset", 0, 0, offset_max)
        page = queryset[offset: offset + limit + 1]  # type: ignore[operator]
    else:
        offset = None
        page = _after_cursor(queryset, raw_cursor)[: limit + 1]
    total = queryset.count()
    rows = list(page)
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, {"total": total, "offset": offset, "limit": limit,
                  "next_cursor": _cursor_of(rows[-1]) if more else None}


def builder_validated(serializer_class: Any, data: Any, *, error: type[ApiError], partial: bool = False
                      ) -> dict[str, Any]:
    """A builder body checked by its serializer; refused as `error` (422) naming the first fields."""
    serializer = serializer_class(data=data, partial=partial)
    if not serializer.is_valid():
        extra = validation_extra(serializer.errors)
        raise error(validation_message(extra["fields"]), **extra)
    return dict(serializer.validated_data)
