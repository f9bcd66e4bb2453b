"""Spec bytes → a JSON document, or a precise refusal.

JSON is tried first (most specs, and much faster); YAML goes through PyYAML's safe loader (the C
one when present), which builds only plain data. YAML aliases are kept as shared references by the
loader, so an alias bomb costs no memory here; the compiler's walks are bounded separately.
"""

from __future__ import annotations

import json
import re
from typing import Any, NoReturn, cast

import jsonschema_rs
import yaml
from openapi_spec_validator.schemas.utils import get_schema_content

from .types import SpecRefused

MAX_SPEC_BYTES = 20 * 1024 * 1024
MAX_VALIDATION_ERRORS = 5
MAX_EXPANDED_NODES = 5_000_000

_VERSION = re.compile(r"^3\.(0|1)\.\d+(-.+)?$")

_YamlLoader: type[yaml.SafeLoader] | type[yaml.CSafeLoader]
try:
    _YamlLoader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - PyYAML without libyaml
    _YamlLoader = yaml.SafeLoader

_validators: dict[str, jsonschema_rs.Validator] = {}


def _validator(minor: str) -> jsonschema_rs.Validator:
    if minor not in _validators:
        # Formats are annotations here: `pattern` is "format: regex", and the regex dialects real specs
        # use (Java's \p{Print}, \A) are not the validator's; the projection vets patterns instead.
        _validators[minor] = jsonschema_rs.validator_for(dict(get_schema_content(minor)), validate_formats=False,
                                                         offline=True)
    return _validators[minor]


def _reject_constant(value: str) -> NoReturn:
    raise ValueError(f"{value} is not JSON")


def parse(data: bytes) -> dict[str, Any]:
    if len(data) > MAX_SPEC_BYTES:
        raise SpecRefused("spec_too_large", f"The spec is {len(data)} bytes; the limit is {MAX_SPEC_BYTES} bytes.")
    if not data.strip():
        raise SpecRefused("spec_empty", "The spec is empty.")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecRefused("spec_not_utf8", f"The spec is not UTF-8 text (byte {exc.start}).") from None
    document: Any
    is_json = text.lstrip()[:1] in "{["
    if is_json:
        try:
            document = json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            raise SpecRefused("spec_not_parseable", f"The spec is not valid JSON ({_json_problem(exc)})."[:500]
                              ) from None
    else:
        try:
            document = yaml.load(text, Loader=_YamlLoader)  # noqa: S506 - a safe loader (CSafeLoader)
        except (yaml.YAMLError, RecursionError, ValueError) as exc:
            raise SpecRefused("spec_not_parseable",
                              f"The spec is neither JSON nor YAML ({_yaml_problem(exc)})."[:500]) from None
    if not isinstance(document, dict):
        raise SpecRefused("spec_not_openapi", "The spec is not an OpenAPI document (its top level is not an object).")
    if not is_json and _expanded_size(document) > MAX_EXPANDED_NODES:
        raise SpecRefused("spec_too_large",
                          f"The spec's YAML aliases expand to more than {MAX_EXPANDED_NODES} nodes.")
    parsed: dict[str, Any] = document if is_json else _as_json(document)
    # A NUL comes from an escape (JSON \u0000, YAML \0 \x00 \u0000): no walk for a spec without one.
    if ("\\" in text or "\x00" in text) and (where := _nul_pointer(parsed)) is not None:
        raise SpecRefused("spec_not_parseable", "The spec holds a NUL character, which cannot be stored.",
                          pointer=where)
    return parsed


# Texts the compiler cleans of control characters (compiler.text.clean_text) before keeping them.
_CLEANED_TEXTS = frozenset({"title", "summary", "description"})


def _nul_pointer(document: Any) -> str | None:
    """The JSON pointer of the first key or string holding a NUL (for a key, its object's), walked
    without recursion; None when there is none. Titles, summaries and descriptions are cleaned
    by the compiler instead."""
    stack: list[tuple[Any, str]] = [(document, "")]
    while stack:
        node, pointer = stack.pop()
        if isinstance(node, str):
            if "\x00" in node:
                return pointer
        elif isinstance(node, dict):
            for key, child in node.items():
                if "\x00" in key:
                    return pointer
                if not (isinstance(child, str) and key in _CLEANED_TEXTS):
                    stack.append((child, f"{pointer}/{key.replace('~', '~0').replace('/', '~1')}"))
        elif isinstance(node, list):
            stack.extend((child, f"{pointer}/{index}") for index, child in enumerate(node))
    return None


def _json_problem(exc: ValueError | RecursionError) -> str:
    """What is wrong and where, in the operator's terms (lines and columns from 1)."""
    if isinstance(exc, RecursionError):
        return "it nests too deeply"
    if isinstance(exc, json.JSONDecodeError):
        return f"line {exc.lineno}, column {exc.colno}: {exc.msg[:1].lower()}{exc.msg[1:]}"
    return str(exc)


def _yaml_problem(exc: Exception) -> str:
    """The parser's problem and where, without its "<unicode string>" source name (lines and
    columns from 1, as an editor counts them)."""
    if isinstance(exc, RecursionError):
        return "it nests too deeply"
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem is None or exc.problem_mark is None:
        return re.sub(r'\s*in "<[^>]*>",', "", str(exc)).replace("\n", " ")
    mark = exc.problem_mark
    sentence = f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    start = exc.context_mark
    if exc.context and start is not None and (start.line, start.column) != (mark.line, mark.column):
        sentence += f" {exc.context} that starts at line {start.line + 1}, column {start.column + 1}"
    elif exc.context:
        sentence += f" {exc.context}"
    return sentence


def _expanded_size(document: Any) -> int:
    """Node count once every YAML alias is expanded, computed without expanding (memoised by
    identity), so an alias bomb is refused before anything walks it. An alias inside its own anchor
    (a recursive document, which JSON cannot represent) is refused here too."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[Any, bool]] = [(document, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children = [child for child in (node.values() if isinstance(node, dict) else node)
                    if isinstance(child, dict | list)]
        if done:
            open_nodes.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes[id(child)] for child in children) + (len(node) - len(children))
            if sizes[id(node)] > MAX_EXPANDED_NODES:
                return sizes[id(node)]
            continue
        open_nodes.add(id(node))
        stack.append((node, True))
        for child in children:
            if id(child) in open_nodes:
                raise SpecRefused("spec_not_parseable", "The YAML contains itself through an alias (a recursive "
                                  "document), which has no JSON form.")
            stack.append((child, False))
    return sizes.get(id(document), 1)


def check_version(document: dict[str, Any]) -> str:
    version = document.get("openapi")
    if "swagger" in document and version is None:
        raise SpecRefused("spec_not_openapi3", f"Swagger {document.get('swagger')!s:.20} is not OpenAPI 3.0 or 3.1.",
                          pointer="/swagger")
    if not isinstance(version, str):
        raise SpecRefused("spec_not_openapi", "The spec has no `openapi` version string; it is not an OpenAPI "
                          "document.", pointer="/openapi")
    if not _VERSION.fullmatch(version):
        raise SpecRefused("spec_not_openapi3", f"OpenAPI version {version[:40]!r} is not 3.0.x or 3.1.x.",
                          pointer="/openapi")
    return version


def validate(document: dict[str, Any], version: str) -> None:
    """Structural validation against the OpenAPI 3.0 / 3.1 JSON Schemas that openapi-spec-validator
    ships, run by jsonschema-rs (the pure-Python run takes seconds on a large spec)."""
    minor = "3.1" if version.startswith("3.1") else "3.0"
    errors = []
    try:
        for error in _validator(minor).iter_errors(document):
            errors.append(error)
            if len(errors) >= MAX_VALIDATION_ERRORS:
                break
    except (ValueError, TypeError, RecursionError) as exc:
        raise SpecRefused("spec_invalid", f"The spec could not be validated: {exc}"[:500]) from None
    if errors:
        first = errors[0]
        pointer = "/" + "/".join(str(part).replace("~", "~0").replace("/", "~1") for part in first.instance_path)
        details = "; ".join(
            f"at {'/' + '/'.join(str(p) for p in error.instance_path)}: {error.message[:200]}" for error in errors
        )
        raise SpecRefused("spec_invalid", f"The spec is not valid OpenAPI {minor}: {details}"[:2000], pointer=pointer)


def _as_json(document: dict[str, Any]) -> dict[str, Any]:
    """YAML can carry what JSON cannot (dates, non-string keys, NaN): a JSON round trip gives the
    document a JSON spec would have, or refuses it."""
    try:
        return cast(dict[str, Any], json.loads(json.dumps(document, default=_default, allow_nan=False)))
    except (TypeError, ValueError, RecursionError) as exc:
        raise SpecRefused("spec_not_parseable", f"The spec holds a value JSON cannot represent: {exc}"[:500]) from None


def _default(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, bytes):
        raise TypeError("binary values have no JSON form")
    raise TypeError(f"{type(value).__name__} values have no JSON form")
