"""The query-string rule the agent and builder APIs share."""

from __future__ import annotations

from django.http import QueryDict

from apps.core.errors import InvalidRequest

_NAME_SHOWN = 64


def query_repeated_check(params: QueryDict) -> None:
    """400 `invalid_request` naming the first query parameter given more than once (`field`, and
    `fields` as the builder API names its query errors): `?limit=1&limit=2` has no one meaning,
    and reading the last value (QueryDict.get) silently picked one."""
    repeated = sorted(name for name in params if len(params.getlist(name)) > 1)
    if repeated:
        names = [name[:_NAME_SHOWN] for name in repeated]
        raise InvalidRequest(f"Query parameter given more than once: {', '.join(names)}.", field=names[0],
                             fields={name: ["Given more than once."] for name in names})
