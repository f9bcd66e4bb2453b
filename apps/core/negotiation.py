"""Content negotiation for the agent APIs."""

from __future__ import annotations

from collections.abc import Iterable

from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer


class AgentContentNegotiation(DefaultContentNegotiation):
    """DRF's negotiation, where a `?format=` no renderer has is left to the endpoint. DRF reads the
    parameter as a renderer override and answered 404 `not_found` for `?format=xml` on every agent
    path, before the endpoint applied its own rule for query parameters (most ignore unknown ones;
    the tool contract's GETs refuse any with 400). The Accept header then chooses, as without it."""

    def filter_renderers(self, renderers: Iterable[BaseRenderer], format: str) -> list[BaseRenderer]:
        renderers = list(renderers)
        return [renderer for renderer in renderers if renderer.format == format] or renderers
