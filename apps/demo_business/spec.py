"""The demo shop's OpenAPI 3.1 spec with ``x-agent-capability``, as bytes, exactly as served at
``/demo-business/openapi.json``."""

from __future__ import annotations

from functools import cache
from pathlib import Path

SPEC_PATH = Path(__file__).with_name("openapi.json")


@cache
def demo_spec_bytes() -> bytes:
    """The spec a hub imports to register the demo shop as a tool provider."""
    return SPEC_PATH.read_bytes()
