"""What the compiler returns: frozen dataclasses, JSON-ready through ``as_dict``.

Schemas and approval values are plain JSON values (dicts and lists) inside frozen dataclasses: the
compiler never shares them with its caller's mutable state, and nothing downstream mutates them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

RISK_LEVELS = ("low", "medium", "high")
APPROVAL_OPERATORS = (">", ">=", "<", "<=", "==", "!=", "in", "contains", "exists")
# Exactly the operators the ACC contract lists; anything else is an invalid rule.
RATE_LIMIT_WINDOWS = ("1s", "1m", "1h", "1d")
SIDE_EFFECTS = ("none", "read", "write", "notify", "external")
PARAMETER_LOCATIONS = ("path", "query", "header", "body")


class SpecRefused(Exception):
    """The whole spec cannot be compiled; nothing of it may be saved."""

    def __init__(self, code: str, message: str, *, pointer: str = "") -> None:
        self.code = code
        self.message = message
        self.pointer = pointer
        super().__init__(f"{code}: {message}")

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "pointer": self.pointer}


@dataclass(frozen=True)
class CompileWarning:
    """One problem the compiler worked around: a stable code, where, what, and what it did instead."""

    code: str
    operation: str | None
    message: str
    fallback: str = ""
    pointer: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ApprovalRule:
    param: str
    op: str
    value: Any = None

    def as_dict(self) -> dict[str, Any]:
        return {"param": self.param, "op": self.op, "value": self.value}


@dataclass(frozen=True)
class RateLimit:
    count: int
    window: str

    def as_dict(self) -> dict[str, Any]:
        return {"count": self.count, "window": self.window}


@dataclass(frozen=True)
class ParameterLocation:
    """Where one input argument goes in the HTTP request.

    ``name`` is the name on the wire (path template name, query key, header name or body property);
    for a JSON body passed whole, ``location`` is ``body`` and ``name`` is empty.
    """

    argument: str
    location: str
    name: str

    def as_dict(self) -> dict[str, Any]:
        return {"argument": self.argument, "in": self.location, "name": self.name}


@dataclass(frozen=True)
class UsageGuidance:
    text: str
    truncated: bool
    source_chars: int
    source_bytes: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CompiledTool:
    name: str
    method: str
    path: str
    summary: str
    description: str
    description_truncated: bool
    usage_guidance: UsageGuidance
    usage_guidance_available: bool
    tags: tuple[str, ...]
    has_acc: bool
    enabled: bool
    scope: str
    risk: str
    approval_required: bool
    approval_declared: bool
    approval_rules: tuple[ApprovalRule, ...]
    approval_prompt: str
    subject_required: bool
    audit_sensitive: bool
    readonly: bool
    idempotent: bool
    timeout_ms: int
    rate_limit: RateLimit | None
    when_to_use: str
    returns: str
    examples: tuple[Any, ...]
    context: str
    outcome_result: str
    side_effect: str
    input_schema: dict[str, Any]
    parameter_locations: tuple[ParameterLocation, ...]
    content_type: str = ""
    deprecated: bool = False
    # Why its spec holds it off (acc.Governance.held_reason): a column of its own (Tool.held_reason),
    # not part of the compiled tool an execution fingerprint and the golden files read.
    held_reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("held_reason")
        data["tags"] = list(self.tags)
        data["examples"] = list(self.examples)
        data["approval_rules"] = [rule.as_dict() for rule in self.approval_rules]
        data["rate_limit"] = self.rate_limit.as_dict() if self.rate_limit else None
        data["parameter_locations"] = [loc.as_dict() for loc in self.parameter_locations]
        data["usage_guidance"] = self.usage_guidance.as_dict()
        return data


@dataclass(frozen=True)
class CompileResult:
    openapi_version: str
    title: str
    api_version: str
    sha256: str
    tools: tuple[CompiledTool, ...]
    warnings: tuple[CompileWarning, ...]
    operations_total: int
    operations_skipped: int
    acc_present: bool
    stats: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "openapi_version": self.openapi_version,
            "title": self.title,
            "api_version": self.api_version,
            "sha256": self.sha256,
            "acc_present": self.acc_present,
            "operations_total": self.operations_total,
            "operations_skipped": self.operations_skipped,
            "tools": [tool.as_dict() for tool in self.tools],
            "warnings": [warning.as_dict() for warning in self.warnings],
        }

    def report(self) -> dict[str, Any]:
        """The compile report kept with a provider: counts, warnings, no schemas."""
        counts: dict[str, int] = {}
        for warning in self.warnings:
            counts[warning.code] = counts.get(warning.code, 0) + 1
        return {
            "openapi_version": self.openapi_version,
            "title": self.title,
            "api_version": self.api_version,
            "acc_present": self.acc_present,
            "operations_total": self.operations_total,
            "operations_skipped": self.operations_skipped,
            "tools": [tool.name for tool in self.tools],
            "warning_counts": dict(sorted(counts.items())),
            "warnings": [warning.as_dict() for warning in self.warnings],
        }
