"""Local ``$ref`` resolution. Every reference in the document is checked once, up front: a remote
one, one that points nowhere, a chain of references that loops or runs too deep refuses the spec
with the reference's location. A schema that contains itself through its properties is not a loop
(recursive data is legitimate); the schema projection cuts it where it recurs."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from .types import SpecRefused

MAX_REF_CHAIN = 32
# Payload keys whose values are data, not spec: a "$ref" inside an example is just text.
_DATA_KEYS = frozenset({"example", "examples", "default", "enum", "const"})
_NAME_MAPS = frozenset({"properties", "patternProperties", "schemas", "parameters", "responses", "headers",
                        "requestBodies", "securitySchemes", "links", "callbacks", "pathItems", "paths",
                        "content", "encoding", "variables", "mapping", "definitions", "$defs"})

_MISSING = object()


def escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _pointer(parts: list[str]) -> str:
    return "/" + "/".join(escape(part) for part in parts) if parts else ""


class Resolver:
    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self._targets: dict[str, tuple[Any, str]] = {}
        self.ref_count = 0

    def check_all(self) -> None:
        """Walk the whole document once; raise SpecRefused for the first bad reference."""
        stack: list[tuple[Any, list[str], bool]] = [(self.document, [], False)]
        while stack:
            node, path, names = stack.pop()
            if isinstance(node, dict):
                ref = node.get("$ref") if not names else None
                if isinstance(ref, str):
                    self.ref_count += 1
                    self.target(ref, where=_pointer(path))
                for key, value in node.items():
                    if not isinstance(value, dict | list):
                        continue
                    if not names and (key in _DATA_KEYS or key.startswith("x-")):
                        continue
                    stack.append((value, [*path, key], (not names) and key in _NAME_MAPS))
            elif isinstance(node, list):
                for index, value in enumerate(node):
                    if isinstance(value, dict | list):
                        stack.append((value, [*path, str(index)], False))

    def target(self, ref: str, *, where: str = "") -> tuple[Any, str]:
        """The node a reference finally points at (following chains), and its pointer."""
        cached = self._targets.get(ref)
        if cached is not None:
            return cached
        chain = [ref]
        current = ref
        while True:
            node = self._lookup(current, where=where)
            inner = node.get("$ref") if isinstance(node, dict) else None
            if not isinstance(inner, str):
                break
            if inner in chain:
                loop = " -> ".join([*chain, inner])
                raise SpecRefused("ref_loop", f"The references at {where or '/'} loop: {loop}"[:1000], pointer=where)
            chain.append(inner)
            if len(chain) > MAX_REF_CHAIN:
                raise SpecRefused("ref_too_deep", f"The reference at {where or '/'} chains through more than "
                                  f"{MAX_REF_CHAIN} references.", pointer=where)
            current = inner
        result = (node, current[1:])
        for link in chain:
            self._targets[link] = result
        return result

    def _lookup(self, ref: str, *, where: str) -> Any:
        if not ref.startswith("#"):
            raise SpecRefused("ref_remote", f"The reference {ref[:200]!r} at {where or '/'} is not local; "
                              "remote references are refused.", pointer=where)
        fragment = unquote(ref[1:])
        if fragment and not fragment.startswith("/"):
            raise SpecRefused("ref_unresolvable", f"The reference {ref[:200]!r} at {where or '/'} is not a JSON "
                              "pointer.", pointer=where)
        node: Any = self.document
        for token in fragment.split("/")[1:] if fragment else []:
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict):
                node = node.get(token, _MISSING)
            elif isinstance(node, list) and token.isascii() and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                node = _MISSING
            if node is _MISSING:
                raise SpecRefused("ref_unresolvable", f"The reference {ref[:200]!r} at {where or '/'} points at "
                                  "nothing in the spec.", pointer=where)
        return node

    def deref(self, node: Any) -> tuple[Any, str | None]:
        """The node itself, or what its ``$ref`` points at (and that pointer)."""
        if isinstance(node, dict) and isinstance(node.get("$ref"), str):
            target, pointer = self.target(node["$ref"])
            return target, pointer
        return node, None
