"""Content negotiation for the APIs: which parser reads a body, which renderer answers."""

from __future__ import annotations

from collections.abc import Iterable

from rest_framework.exceptions import NotAcceptable
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request


def is_media_range(content_type: str) -> bool:
    """Whether a Content-Type names a media range (`*/*`, `application/*`, `*/json`) rather than
    one media type: its type or subtype holds a wildcard (parameters are not looked at)."""
    return "*" in content_type.split(";", 1)[0]


class StrictContentNegotiation(DefaultContentNegotiation):
    """DRF's negotiation, where a body labelled with a media range is read by no parser.

    DRF matches the request's Content-Type against each parser as it matches an Accept header,
    wildcards included, so `Content-Type: */*` was read as JSON. A Content-Type describes the body
    it comes with (RFC 9110 §8.3): a range says nothing about it, and the body is refused as any
    other media type the endpoint does not read (415, or the endpoint's own code for it). The DRF
    default (REST_FRAMEWORK["DEFAULT_CONTENT_NEGOTIATION_CLASS"])."""

    def select_parser(self, request: Request, parsers: Iterable[BaseParser]) -> BaseParser | None:
        if is_media_range(request.content_type or ""):
            return None
        return super().select_parser(request, parsers)


class AgentContentNegotiation(StrictContentNegotiation):
    """For the agent APIs: a `?format=` no renderer has is left to the endpoint. DRF reads the
    parameter as a renderer override and answered 404 `not_found` for `?format=xml` on every agent
    path, before the endpoint applied its own rule for query parameters (most ignore unknown ones;
    the tool contract's GETs refuse any with 400). The Accept header then chooses, as without it."""

    def filter_renderers(self, renderers: Iterable[BaseRenderer], format: str) -> list[BaseRenderer]:
        renderers = list(renderers)
        return [renderer for renderer in renderers if renderer.format == format] or renderers

    def select_renderer(self, request: Request, renderers: Iterable[BaseRenderer],
                        format_suffix: str | None = None) -> tuple[BaseRenderer, str]:
        """JSON whatever the Accept header asks: it is the only representation, and DRF answered
        `Accept: text/html` with 406 `not_acceptable`, a code neither contract has."""
        renderers = list(renderers)
        try:
            renderer, media_type = super().select_renderer(request, renderers, format_suffix)
            return renderer, media_type
        except NotAcceptable:
            return renderers[0], str(renderers[0].media_type)
