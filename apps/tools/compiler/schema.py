"""The input-schema projection: OpenAPI schema objects → the standard JSON-Schema keywords agents may
see, with local references inlined, bounded in depth, node count and bytes."""

from __future__ import annotations

import functools
import json
import re
import warnings
from dataclasses import dataclass, field
from typing import Any

from .refs import Resolver
from .text import clean_text

MAX_DEPTH = 16
MAX_SCHEMA_BYTES = 64 * 1024
MAX_NODES = 4000
MAX_DESCRIPTION_CHARS = 1000

_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
_COUNT_KEYS = ("minLength", "maxLength", "minItems", "maxItems")
_NUMBER_KEYS = ("minimum", "maximum")
_EXCLUSIVE_KEYS = ("exclusiveMinimum", "exclusiveMaximum")
_COMBINERS = ("oneOf", "anyOf", "allOf")
_SCALAR_KEYS = ("enum", "const", "nullable", "format", "pattern", *_COUNT_KEYS, *_NUMBER_KEYS, *_EXCLUSIVE_KEYS)


@dataclass
class Projection:
    """Options and what happened during one projection."""

    resolver: Resolver
    max_depth: int = MAX_DEPTH
    descriptions: bool = True
    nodes: int = 0
    depth_cut: bool = False
    recursion_cut: bool = False
    budget_cut: bool = False
    pattern_dropped: bool = False
    active: list[str] = field(default_factory=list)

    def project(self, node: Any, depth: int = 1) -> dict[str, Any] | None:
        """The projected schema; None for a ``false`` schema (nothing is valid)."""
        if node is True or node is None:
            return {}
        if node is False:
            return None
        if not isinstance(node, dict):
            return {}
        self.nodes += 1
        if self.nodes > MAX_NODES:
            self.budget_cut = True
            return {}
        ref = node.get("$ref")
        if isinstance(ref, str):
            target, pointer = self.resolver.target(ref)
            if pointer in self.active:
                self.recursion_cut = True
                return self._describe({}, node)
            self.active.append(pointer)
            try:
                projected = self.project(target, depth)
            finally:
                self.active.pop()
            if projected is None:
                return None
            return self._describe(dict(projected), node) if isinstance(node.get("description"), str) else projected
        out: dict[str, Any] = {}
        kind = node.get("type")
        if isinstance(kind, str) and kind in _TYPES:
            out["type"] = kind
        elif isinstance(kind, list) and kind and all(isinstance(item, str) and item in _TYPES for item in kind):
            out["type"] = list(dict.fromkeys(kind))
        self._describe(out, node)
        if depth >= self.max_depth:
            # Deeper structure is dropped, the node's own type and description stay.
            if any(key in node for key in ("properties", "items", "additionalProperties", *_COMBINERS)):
                self.depth_cut = True
            self._scalars(out, node)
            return out
        properties = node.get("properties")
        if isinstance(properties, dict) and properties:
            projected_properties = {}
            for name, sub in properties.items():
                projected = self.project(sub, depth + 1)
                if projected is not None:
                    projected_properties[str(name)] = projected
            out["properties"] = projected_properties
        required = node.get("required")
        if isinstance(required, list):
            names = list(dict.fromkeys(item for item in required if isinstance(item, str)))
            if names:
                out["required"] = names
        items = node.get("items")
        if isinstance(items, dict | bool):
            projected = self.project(items, depth + 1)
            out["items"] = projected if projected is not None else {"enum": []}
        additional = node.get("additionalProperties")
        if isinstance(additional, bool):
            out["additionalProperties"] = additional
        elif isinstance(additional, dict):
            projected = self.project(additional, depth + 1)
            out["additionalProperties"] = projected if projected is not None else False
        for key in _COMBINERS:
            options = node.get(key)
            if isinstance(options, list) and options:
                projected_options = [self.project(option, depth + 1) for option in options
                                     if isinstance(option, dict | bool)]
                projected_options = [option for option in projected_options if option is not None]
                if projected_options:
                    out[key] = projected_options
        self._scalars(out, node)
        return out

    def cut(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        """A projected `schema` placed at `depth` (projected as if at depth 1: a body only known to
        sit under ``body`` once projected), cut as ``project`` would have cut it there."""
        if depth >= self.max_depth:
            structure = ("properties", "items", "additionalProperties", *_COMBINERS)
            if any(key in schema for key in structure):
                self.depth_cut = True
            return {key: value for key, value in schema.items() if key not in (*structure, "required")}
        out = dict(schema)
        if isinstance(out.get("properties"), dict):
            out["properties"] = {name: self.cut(sub, depth + 1) for name, sub in out["properties"].items()}
        for key in ("items", "additionalProperties"):
            if isinstance(out.get(key), dict):
                out[key] = self.cut(out[key], depth + 1)
        for key in _COMBINERS:
            if isinstance(out.get(key), list):
                out[key] = [self.cut(option, depth + 1) for option in out[key]]
        return out

    def _describe(self, out: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
        description = node.get("description")
        if self.descriptions and isinstance(description, str):
            text = clean_text(description)[:MAX_DESCRIPTION_CHARS]
            if text:
                out["description"] = text
        return out

    def _scalars(self, out: dict[str, Any], node: dict[str, Any]) -> None:
        # Most schema nodes carry one or two of these keywords: visit only those present, in a fixed
        # order so the output's key order never depends on the process.
        for key in _SCALAR_KEYS:
            if key not in node:
                continue
            value = node[key]
            if key == "enum":
                if isinstance(value, list) and value:
                    out[key] = value
            elif key == "const":
                out[key] = value
            elif key == "nullable":
                if isinstance(value, bool):
                    out[key] = value
            elif key == "format":
                if isinstance(value, str):
                    out[key] = value
            elif key == "pattern":
                if isinstance(value, str):
                    if _valid_pattern(value):
                        out[key] = value
                    else:
                        self.pattern_dropped = True
            elif key in _COUNT_KEYS:
                if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                    out[key] = value
            elif key in _NUMBER_KEYS:
                if isinstance(value, int | float) and not isinstance(value, bool):
                    out[key] = value
            elif isinstance(value, int | float | bool):
                out[key] = value


@functools.lru_cache(maxsize=4096)
def _valid_pattern(pattern: str) -> bool:
    """Patterns in another regex dialect (Java's \\p{Print}, \\A ... \\z) would break the validator
    of whoever checks arguments against the schema; only patterns Python can compile are kept."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return False
    return True


def encoded_size(schema: dict[str, Any]) -> int:
    """The schema's size as a response sends it: compact UTF-8, with U+2028 and U+2029 escaped as
    DRF's renderer escapes them (six bytes each, not three). The compiler runs without Django's
    settings, so it does not call the renderer (apps.core.jsonbytes.json_bytes) itself."""
    text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8")) + 3 * (text.count("\u2028") + text.count("\u2029"))
