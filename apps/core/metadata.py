"""What an OPTIONS request to an API endpoint is told."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rest_framework.metadata import BaseMetadata

if TYPE_CHECKING:  # DRF imports this module while rest_framework.views loads (DEFAULT_METADATA_CLASS)
    from rest_framework.request import Request
    from rest_framework.views import APIView


class AllowOnlyMetadata(BaseMetadata):
    """An empty JSON object: the answer's `Allow` header names the URL's methods, and that is all
    OPTIONS says. DRF's SimpleMetadata described the view class (`{"name": "Tool Invocation Api",
    "description", "renders", "parses"}`), internals no client needs; and on a builder URL served
    by one view per method (by_method), a body naming methods would name only the first view's."""

    def determine_metadata(self, request: Request, view: APIView) -> dict[str, Any]:
        return {}
