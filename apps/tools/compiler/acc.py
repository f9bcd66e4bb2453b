"""``x-agent-capability`` → governance fields. Every invalid field gives a named warning and a stated
fallback; where a field governs safety, the fallback is the safer reading (approval required,
treated as a write, tool disabled), never a silent loosening."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from .text import clean_text, cut_chars
from .types import APPROVAL_OPERATORS, RATE_LIMIT_WINDOWS, RISK_LEVELS, SIDE_EFFECTS, ApprovalRule, RateLimit

MAX_SCOPE_CHARS = 256
MAX_PROMPT_CHARS = 200
MAX_GUIDANCE_FIELD_CHARS = 20000
MAX_EXAMPLES = 20
DEFAULT_TIMEOUT_MS = 30000
MAX_TIMEOUT_MS = 600000
READ_METHODS = frozenset({"GET", "HEAD"})

KNOWN_FIELDS = frozenset({"version", "enabled", "scope", "risk", "approval", "subject", "audit", "execution",
                          "guidance", "outcome"})

Warn = Callable[[str, str, str], None]


@dataclass
class Governance:
    has_acc: bool
    enabled: bool
    scope: str
    risk: str
    approval_declared: bool = False
    approval_rules: list[ApprovalRule] = field(default_factory=list)
    approval_prompt: str = ""
    subject_required: bool = False
    audit_sensitive: bool = False
    readonly: bool = False
    idempotent: bool = False
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    rate_limit: RateLimit | None = None
    when_to_use: str = ""
    returns: str = ""
    examples: list[Any] = field(default_factory=list)
    context: str = ""
    outcome_result: str = ""
    side_effect: str = ""
    version: str = ""
    # Why the tool is held off until its spec is fixed (governance declared that cannot be read);
    # empty: not held. Carried on the compiled tool, not read back from the (capped) warnings.
    held_reason: str = ""

    @property
    def approval_required(self) -> bool:
        return self.risk == "high" or self.approval_declared or bool(self.approval_rules)


def _is_bool(value: Any) -> TypeGuard[bool]:
    return isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def inferred(*, name: str, method: str) -> Governance:
    """Governance for an operation without ACC: disabled until an operator enables it, read-only
    when the method reads."""
    readonly = method in READ_METHODS
    return Governance(has_acc=False, enabled=False, scope=name, risk="low" if readonly else "medium",
                      readonly=readonly, idempotent=readonly, side_effect="read" if readonly else "write")


def compile_acc(raw: Any, *, name: str, method: str, arguments: frozenset[str], warn: Warn) -> Governance:
    """``warn(code, message, fallback)`` records a warning for this operation."""
    if not isinstance(raw, dict):
        warn("acc_invalid", "x-agent-capability is not an object.",
             "the operation is compiled as if it had no ACC: disabled, read-only only for GET/HEAD")
        return inferred(name=name, method=method)
    gov = Governance(has_acc=True, enabled=True, scope=name, risk="")
    for key in sorted(str(key) for key in raw if key not in KNOWN_FIELDS):
        if not str(key).startswith("x-"):
            warn("acc_unknown_field", f"x-agent-capability has an unknown field {str(key)[:64]!r}.", "ignored")

    version = raw.get("version")
    if version is None:
        warn("acc_version_missing", "x-agent-capability has no version.", "read as version 1")
        gov.version = "1"
    elif isinstance(version, str | int) and not isinstance(version, bool) and str(version).strip():
        gov.version = str(version).strip()[:32]
    else:
        warn("acc_version_invalid", "x-agent-capability.version is not a string or integer.", "read as version 1")
        gov.version = "1"

    enabled = raw.get("enabled", True)
    if _is_bool(enabled):
        gov.enabled = enabled
    else:
        warn("acc_enabled_invalid", "x-agent-capability.enabled is not a boolean.", "the tool is disabled")
        gov.enabled = False

    scope = raw.get("scope")
    if scope is None:
        warn("acc_scope_missing", "x-agent-capability.scope is required.",
             "the scope is the operationId and the tool is disabled")
        gov.enabled = False
    elif not isinstance(scope, str) or not clean_text(scope) or len(clean_text(scope)) > MAX_SCOPE_CHARS:
        warn("acc_scope_invalid", f"x-agent-capability.scope must be a non-empty string of at most "
             f"{MAX_SCOPE_CHARS} characters.", "the scope is the operationId and the tool is disabled")
        gov.enabled = False
    else:
        gov.scope = clean_text(scope)

    _execution(raw.get("execution"), gov, method=method, warn=warn)
    default_risk = "low" if gov.readonly else "medium"
    risk = raw.get("risk")
    if risk is None:
        gov.risk = default_risk
    elif not isinstance(risk, dict):
        warn("acc_risk_invalid", "x-agent-capability.risk is not an object.", f"risk {default_risk} (the default)")
        gov.risk = default_risk
    else:
        level = risk.get("level")
        if level is None:
            gov.risk = default_risk
        elif level in RISK_LEVELS:
            gov.risk = level
        else:
            warn("acc_risk_level_invalid", f"x-agent-capability.risk.level must be one of {', '.join(RISK_LEVELS)}.",
                 "risk high")
            gov.risk = "high"

    _approval(raw.get("approval"), gov, arguments=arguments, warn=warn)
    gov.subject_required = _flag(raw, "subject", "required", default=False, safe=True, warn=warn)
    gov.audit_sensitive = _flag(raw, "audit", "sensitive", default=False, safe=True, warn=warn)
    _guidance(raw.get("guidance"), gov, warn=warn)
    _outcome(raw.get("outcome"), gov, warn=warn)
    return gov


def _flag(raw: dict[str, Any], section: str, key: str, *, default: bool, safe: bool, warn: Warn) -> bool:
    block = raw.get(section)
    if block is None:
        return default
    if not isinstance(block, dict):
        warn(f"acc_{section}_invalid", f"x-agent-capability.{section} is not an object.",
             f"{key} is {str(safe).lower()}")
        return safe
    value = block.get(key, default)
    if not _is_bool(value):
        warn(f"acc_{section}_{key}_invalid", f"x-agent-capability.{section}.{key} is not a boolean.",
             f"{key} is {str(safe).lower()}")
        return safe
    return value


def _execution(block: Any, gov: Governance, *, method: str, warn: Warn) -> None:
    gov.readonly = method in READ_METHODS
    gov.idempotent = gov.readonly
    if block is None:
        return
    if not isinstance(block, dict):
        warn("acc_execution_invalid", "x-agent-capability.execution is not an object.",
             "read-only only for GET/HEAD, idempotent only when read-only, default timeout, no rate limit")
        return
    readonly = block.get("readonly")
    if readonly is not None:
        if _is_bool(readonly):
            gov.readonly = readonly
        else:
            warn("acc_execution_readonly_invalid", "x-agent-capability.execution.readonly is not a boolean.",
                 "treated as a write (readonly false)")
            gov.readonly = False
    gov.idempotent = gov.readonly
    idempotent = block.get("idempotent")
    if idempotent is not None:
        if _is_bool(idempotent):
            gov.idempotent = idempotent
        else:
            warn("acc_execution_idempotent_invalid", "x-agent-capability.execution.idempotent is not a boolean.",
                 "idempotent false")
            gov.idempotent = False
    timeout = block.get("timeout_ms")
    if timeout is not None:
        if _is_int(timeout) and 1 <= timeout <= MAX_TIMEOUT_MS:
            gov.timeout_ms = timeout
        else:
            warn("acc_execution_timeout_invalid", f"x-agent-capability.execution.timeout_ms must be an integer "
                 f"from 1 to {MAX_TIMEOUT_MS}.", f"timeout {DEFAULT_TIMEOUT_MS} ms")
    limit = block.get("rate_limit")
    if limit is not None:
        if (isinstance(limit, dict) and _is_int(limit.get("count")) and limit["count"] >= 1
                and limit.get("window") in RATE_LIMIT_WINDOWS):
            gov.rate_limit = RateLimit(count=limit["count"], window=limit["window"])
        else:
            message = ("x-agent-capability.execution.rate_limit must be "
                       f"{{count: integer ≥ 1, window: {'|'.join(RATE_LIMIT_WINDOWS)}}}.")
            warn("acc_execution_rate_limit_invalid", message,
                 "the tool is disabled and cannot be switched on until the rate limit is fixed and the spec "
                 "re-imported")
            gov.enabled = False
            gov.held_reason = f"acc_execution_rate_limit_invalid: {message}"


def _approval(block: Any, gov: Governance, *, arguments: frozenset[str], warn: Warn) -> None:
    if block is None:
        return
    if not isinstance(block, dict):
        warn("acc_approval_invalid", "x-agent-capability.approval is not an object.", "approval is always required")
        gov.approval_declared = True
        return
    required = block.get("required", False)
    if _is_bool(required):
        gov.approval_declared = required
    else:
        warn("acc_approval_required_invalid", "x-agent-capability.approval.required is not a boolean.",
             "approval is always required")
        gov.approval_declared = True
    rules = block.get("when")
    if rules is not None:
        if not isinstance(rules, list):
            warn("acc_approval_when_invalid", "x-agent-capability.approval.when is not a list of rules.",
                 "approval is always required")
            gov.approval_declared = True
        else:
            for index, rule in enumerate(rules):
                problem = _rule_problem(rule, arguments)
                if problem:
                    warn("acc_approval_rule_invalid", f"x-agent-capability.approval.when[{index}]: {problem}",
                         "approval is always required")
                    gov.approval_declared = True
                else:
                    gov.approval_rules.append(ApprovalRule(param=rule["param"], op=rule["op"], value=rule.get("value")))
    prompt = block.get("prompt")
    if prompt is not None:
        if isinstance(prompt, str):
            text, cut = cut_chars(clean_text(prompt), MAX_PROMPT_CHARS)
            if cut:
                warn("acc_approval_prompt_truncated", f"x-agent-capability.approval.prompt is longer than "
                     f"{MAX_PROMPT_CHARS} characters.", f"cut to {MAX_PROMPT_CHARS} characters")
            gov.approval_prompt = text
        else:
            warn("acc_approval_prompt_invalid", "x-agent-capability.approval.prompt is not a string.",
                 "no approval prompt")


def _rule_problem(rule: Any, arguments: frozenset[str]) -> str:
    if not isinstance(rule, dict):
        return "a rule must be an object {param, op, value}."
    unknown = set(rule) - {"param", "op", "value"}
    if unknown:
        return f"unknown rule fields {sorted(str(key) for key in unknown)}."
    param, op = rule.get("param"), rule.get("op")
    if not isinstance(param, str) or not param:
        return "param must be a non-empty string."
    if param.split(".", 1)[0] not in arguments:
        return f"param {param[:64]!r} is not an input argument of this operation."
    if op not in APPROVAL_OPERATORS:
        return f"op must be one of {' '.join(APPROVAL_OPERATORS)}."
    value = rule.get("value")
    if op == "exists":
        if "value" in rule and not _is_bool(value):
            return "exists takes no value or a boolean."
    elif "value" not in rule:
        return f"op {op} needs a value."
    elif op in (">", ">=", "<", "<=") and not _is_number(value):
        return f"op {op} needs a number."
    elif op == "in" and not isinstance(value, list):
        return "op in needs a list."
    return ""


def _text_field(block: dict[str, Any], key: str, section: str, warn: Warn) -> str:
    value = block.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        warn(f"acc_{section}_{key}_invalid", f"x-agent-capability.{section}.{key} is not a string.", "ignored")
        return ""
    text, cut = cut_chars(clean_text(value), MAX_GUIDANCE_FIELD_CHARS)
    if cut:
        warn(f"acc_{section}_{key}_truncated", f"x-agent-capability.{section}.{key} is longer than "
             f"{MAX_GUIDANCE_FIELD_CHARS} characters.", f"cut to {MAX_GUIDANCE_FIELD_CHARS} characters")
    return text


def _guidance(block: Any, gov: Governance, *, warn: Warn) -> None:
    if block is None:
        return
    if not isinstance(block, dict):
        warn("acc_guidance_invalid", "x-agent-capability.guidance is not an object.", "no guidance")
        return
    gov.when_to_use = _text_field(block, "when_to_use", "guidance", warn)
    gov.returns = _text_field(block, "returns", "guidance", warn)
    gov.context = _text_field(block, "context", "guidance", warn)
    examples = block.get("examples")
    if examples is not None:
        if not isinstance(examples, list):
            warn("acc_guidance_examples_invalid", "x-agent-capability.guidance.examples is not a list.", "no examples")
        else:
            kept = [example for example in examples if isinstance(example, str | dict | list)]
            if len(kept) != len(examples):
                warn("acc_guidance_examples_invalid", "x-agent-capability.guidance.examples holds entries that "
                     "are neither text nor JSON objects.", "those entries are dropped")
            if len(kept) > MAX_EXAMPLES:
                warn("acc_guidance_examples_truncated", f"x-agent-capability.guidance.examples has more than "
                     f"{MAX_EXAMPLES} entries.", f"the first {MAX_EXAMPLES} are kept")
            gov.examples = [clean_text(item) if isinstance(item, str) else item for item in kept[:MAX_EXAMPLES]]


def _outcome(block: Any, gov: Governance, *, warn: Warn) -> None:
    derived = "read" if gov.readonly else "write"
    gov.side_effect = derived
    if block is None:
        return
    if not isinstance(block, dict):
        warn("acc_outcome_invalid", "x-agent-capability.outcome is not an object.", f"side_effect {derived}")
        return
    gov.outcome_result = _text_field(block, "result", "outcome", warn)
    side_effect = block.get("side_effect")
    if side_effect is None:
        return
    if side_effect in SIDE_EFFECTS:
        gov.side_effect = side_effect
    else:
        warn("acc_outcome_side_effect_invalid", f"x-agent-capability.outcome.side_effect must be one of "
             f"{'|'.join(SIDE_EFFECTS)}.", f"side_effect {derived}")


def example_text(example: Any) -> str:
    if isinstance(example, str):
        return example
    return json.dumps(example, ensure_ascii=False, sort_keys=True)
