"""What a tool call's arguments and its tool's compiled fields decide, with no database: the
execution fingerprint (what an approval was given for), the ACC's approval reasons (``approval.when``
rules included) and the check of the arguments against the tool's input schema. The state machine
that acts on them is apps.tools.invocations."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jsonschema_rs

from apps.core.revisions import revision_of

from .models import ToolProvider

# The compiled fields that decide what is sent and whether it may be: the execution fingerprint.
EXECUTION_FIELDS = ("name", "method", "path", "scope", "risk", "approval_required", "approval_declared",
                    "approval_rules", "subject_required", "readonly", "idempotent", "timeout_ms", "rate_limit",
                    "input_schema", "parameter_locations", "content_type")


@dataclass(frozen=True)
class Target:
    """What one surface tool is for the engine: its compiled execution fields (or the built-in's
    definition), its provider, and its execution fingerprint."""

    name: str
    compiled: dict[str, Any]
    provider: ToolProvider | None
    fingerprint: str
    forced_approval: bool

    @property
    def builtin(self) -> bool:
        return self.provider is None


_SUBSCHEMA_KEYS = ("items", "additionalProperties")
_SUBSCHEMA_LISTS = ("oneOf", "anyOf", "allOf")


def _subschemas_mapped(schema: dict[str, Any], change: Callable[[Any], Any]) -> dict[str, Any]:
    """A copy of one input-schema node with ``change`` applied to each of its direct subschemas.
    The members of ``properties`` are argument names, not keywords: an argument may be called
    ``description`` or ``nullable``, and a walk that took every key for a keyword dropped it."""
    out = dict(schema)
    if isinstance(out.get("properties"), dict):
        out["properties"] = {name: change(sub) for name, sub in out["properties"].items()}
    for key in _SUBSCHEMA_KEYS:
        if isinstance(out.get(key), dict):
            out[key] = change(out[key])
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [change(option) for option in out[key]]
    return out


def _strip_descriptions(schema: Any) -> Any:
    """The input schema without its ``description`` annotations; everything that decides what is
    sent stays, an argument called ``description`` included."""
    if not isinstance(schema, dict):
        return schema
    out = _subschemas_mapped(schema, _strip_descriptions)
    out.pop("description", None)
    return out


def execution_fingerprint(*, route_key: str, provider: ToolProvider | None, compiled: dict[str, Any]) -> str:
    """SHA-256 over the route, the provider's name and base URL hash, and the tool's execution
    fields — not the secret (it rotates) and not descriptions or guidance (rewording must not
    block resuming an approved call)."""
    fields = {key: compiled.get(key) for key in EXECUTION_FIELDS}
    fields["input_schema"] = _strip_descriptions(fields["input_schema"])
    return revision_of({
        "route": route_key,
        "provider": provider.name if provider else None,
        "base_url_sha256": hashlib.sha256(provider.base_url.encode()).hexdigest() if provider else None,
        "tool": fields,
    })


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _argument_values(arguments: dict[str, Any], param: str) -> tuple[list[Any], bool]:
    """The values a rule's dotted ``param`` names in the arguments, and whether some branch lacks
    it. A path through an array (arrays in arrays too) names the value in each of its items
    (``lines.qty`` is every line's qty): such a rule never matched, and a call with a line over 100
    was sent unapproved. An item that is not an object lacks the rest of the path."""
    nodes: list[Any] = [arguments]
    missing = False
    for part in param.split("."):
        found = []
        for item in _items(nodes):
            if isinstance(item, dict) and part in item:
                found.append(item[part])
            else:
                missing = True
        nodes = found
    return nodes, missing or not nodes


def _items(nodes: list[Any]) -> list[Any]:
    """The nodes with every array, however deeply nested, replaced by its items."""
    flat: list[Any] = []
    for node in nodes:
        flat.extend(_items(node) if isinstance(node, list) else [node])
    return flat


def _json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values: ``true`` is not ``1`` and ``false`` not ``0`` (Python's ``==`` says
    they are), numbers compare by value, arrays and objects item by item."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[key], b[key]) for key in a)
    return bool(a == b)


def _rule_matches(rule: dict[str, Any], arguments: dict[str, Any]) -> bool:
    """One ``approval.when`` rule: it matches when any value its param names does (an array's
    items each on their own). A value the rule cannot compare needs approval (fails closed)."""
    values, missing = _argument_values(arguments, str(rule.get("param", "")))
    op, expected = rule.get("op"), rule.get("value")
    if op == "exists":  # present in any item, or (exists: false) absent from any
        return bool(values) if expected in (None, True) else missing
    return any(_value_matches(op, actual, expected) for actual in values)


def _value_matches(op: Any, actual: Any, expected: Any) -> bool:
    if op in (">", ">=", "<", "<="):
        if not (_number(actual) and _number(expected)):
            return True
        return bool({">": actual > expected, ">=": actual >= expected, "<": actual < expected,
                     "<=": actual <= expected}[op])
    # An array's items match `==` and `in` each on their own too (`skus in ["TEA-1"]` never
    # matched skus ["TEA-1", "CUP-2"]).
    items = _items([actual]) if isinstance(actual, list) else []
    if op == "==":
        return bool(actual == expected) or any(item == expected for item in items)
    if op == "!=":  # by JSON's equality: `1 != true` holds (Python's `1 != True` does not, and skipped the approval)
        return not _json_equal(actual, expected)
    if op == "in":
        if not isinstance(expected, list):
            return True
        return actual in expected or any(item in expected for item in items)
    if op == "contains":
        if (isinstance(actual, str) and isinstance(expected, str)) or isinstance(actual, list):
            return expected in actual
        return True
    return True


def approval_reasons(*, target: Target, arguments: dict[str, Any]) -> list[str]:
    """Why this call needs approval (empty: it does not): ACC ``risk.level`` high,
    ``approval.required``, a matching ``approval.when`` rule, or the route's own rule."""
    if target.builtin:
        return []
    compiled = target.compiled
    reasons = []
    if compiled.get("risk") == "high":
        reasons.append("risk_high")
    if compiled.get("approval_declared"):
        reasons.append("approval_required")
    for rule in compiled.get("approval_rules") or []:
        if _rule_matches(rule, arguments):
            reasons.append(f"approval_when: {rule.get('param')} {rule.get('op')} {json.dumps(rule.get('value'))}")
    if target.forced_approval:
        reasons.append("route_forced")
    return reasons


APPROVAL_RULE_SHOWN_CHARS = 80


def approval_summary(compiled: dict[str, Any]) -> str:
    """When a call of the tool needs approval, as an operator reads it (approval_reasons decides it
    per call): "always (high risk)", "always", "when quantity > 100" (rules joined by "or": any
    one that matches asks), or "no". A route can force it on top (the route's page says which)."""
    if compiled.get("risk") == "high":
        return "always (high risk)"
    if compiled.get("approval_declared"):
        return "always"
    rules = [_rule_text(rule) for rule in compiled.get("approval_rules") or [] if isinstance(rule, dict)]
    return "when " + " or ".join(rules) if rules else "no"


_WINDOW_WORDS = {"1s": "second", "1m": "minute", "1h": "hour", "1d": "day"}


def rate_limit_text(rate_limit: Any, *, held: bool = False) -> str:
    """A compiled tool's ``rate_limit`` as an operator reads it: "30 calls a minute, counted across
    every agent of the hub", or none (and why, when its spec's limit could not be read)."""
    if isinstance(rate_limit, dict) and rate_limit.get("window") in _WINDOW_WORDS:
        count = rate_limit.get("count")
        calls = "1 call" if count == 1 else f"{count} calls"
        word = _WINDOW_WORDS[rate_limit["window"]]
        return f"{calls} {'an' if word == 'hour' else 'a'} {word}, counted across every agent of the hub"
    if held:
        return "None that the hub can read: the spec's limit is invalid, so the tool is held off (see below)"
    return "None"


def _rule_text(rule: dict[str, Any]) -> str:
    param, op, value = str(rule.get("param", "")), rule.get("op"), rule.get("value")
    if op == "exists":
        text = f"{param} is {'given' if value in (None, True) else 'left out'}"
    else:
        text = f"{param} {op} {json.dumps(value, ensure_ascii=False)}"
    return text if len(text) <= APPROVAL_RULE_SHOWN_CHARS else text[: APPROVAL_RULE_SHOWN_CHARS - 1] + "\u2026"


def _validation_schema(node: Any) -> Any:
    """An agent input schema (OpenAPI flavoured: ``nullable``, boolean exclusive bounds) as the JSON
    Schema 2020-12 that validates the same values."""
    if not isinstance(node, dict):
        return node
    out = _subschemas_mapped(node, _validation_schema)
    out.pop("nullable", None)
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(out.get(exclusive), bool) and out.pop(exclusive) and bound in out:
            out[exclusive] = out.pop(bound)
    if node.get("nullable") is True:
        kind = out.get("type")
        if isinstance(kind, str):
            out["type"] = [kind, "null"]
        elif isinstance(kind, list) and "null" not in kind:
            out["type"] = [*kind, "null"]
        if isinstance(out.get("enum"), list) and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    return out


def schema_problem(*, schema: dict[str, Any], arguments: dict[str, Any]) -> tuple[str, str] | None:
    """(field, message) of the first way ``arguments`` break the tool's input schema, or None. The
    top level is closed: an argument the schema does not name has nowhere to go in the request (a
    parameter or a body property each have theirs), so it is refused rather than dropped unsaid."""
    checked = _validation_schema(schema)
    if isinstance(checked, dict) and isinstance(checked.get("properties"), dict):
        checked.setdefault("additionalProperties", False)
    try:
        validator = jsonschema_rs.validator_for(checked, validate_formats=False)
    except (ValueError, jsonschema_rs.ValidationError):
        return "arguments", "the tool's input schema cannot be checked"
    for error in validator.iter_errors(arguments):
        path = [str(part) for part in error.instance_path]
        field = ".".join(path)
        if not field and type(error.kind).__name__ == "Required":
            field = str(getattr(error.kind, "property", ""))
        if not field and type(error.kind).__name__ == "AdditionalProperties":
            unexpected = getattr(error.kind, "unexpected", None) or []
            field = str(unexpected[0]) if unexpected else ""
        return field or "arguments", _schema_message(error.message, error.instance)[:300]
    return None


SCHEMA_VALUE_SHOWN_CHARS = 60


def _schema_message(message: str, instance: Any) -> str:
    """The validator's message with the value it quotes cut: it begins with the whole value, and a
    note of 3,023 characters cut at 300 lost the reason ("is longer than 2000 characters") that the
    agent and the operator needed to put it right (browser audit)."""
    quoted = json.dumps(instance, ensure_ascii=False, separators=(",", ":"))
    if len(quoted) <= SCHEMA_VALUE_SHOWN_CHARS or not message.startswith(quoted):
        return message
    size = f"{len(instance):,} characters" if isinstance(instance, str) else f"{len(quoted):,} characters of JSON"
    return f"{quoted[:SCHEMA_VALUE_SHOWN_CHARS]}… ({size}){message[len(quoted):]}"
