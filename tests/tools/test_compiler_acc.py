"""x-agent-capability: one test per rule, per default and per invalid field (its warning and fallback)."""

from __future__ import annotations

import pytest

from .compiler_helpers import QUANTITY_BODY, acc, codes, compile_one


def test_risk_defaults_to_medium_for_a_write():
    tool, _ = compile_one(acc=acc(), method="post", body=QUANTITY_BODY)
    assert (tool.risk, tool.readonly) == ("medium", False)


def test_risk_defaults_to_low_for_a_get():
    tool, _ = compile_one(acc=acc(), method="get")
    assert (tool.risk, tool.readonly) == ("low", True)


def test_risk_defaults_to_low_for_a_post_declared_readonly():
    tool, _ = compile_one(acc=acc(execution={"readonly": True}), method="post")
    assert (tool.risk, tool.readonly, tool.idempotent) == ("low", True, True)


def test_declared_risk_level_is_kept():
    tool, warnings = compile_one(acc=acc(risk={"level": "low"}), method="delete")
    assert tool.risk == "low" and warnings == ()


def test_high_risk_requires_approval():
    tool, _ = compile_one(acc=acc(risk={"level": "high"}))
    assert tool.approval_required is True and tool.approval_declared is False


def test_approval_required_flag_requires_approval():
    tool, _ = compile_one(acc=acc(approval={"required": True}))
    assert (tool.approval_required, tool.approval_declared) == (True, True)


def test_no_approval_fields_means_no_approval():
    tool, _ = compile_one(acc=acc(), body=QUANTITY_BODY)
    assert tool.approval_required is False


@pytest.mark.parametrize(("op", "value"), [
    (">", 100), (">=", 100), ("<", 0), ("<=", 0), ("==", 7), ("!=", 7), ("in", [1, 2]), ("contains", "x"),
    ("exists", True),
])
def test_each_approval_operator_compiles_to_a_rule(op, value):
    tool, warnings = compile_one(acc=acc(approval={"when": [{"param": "quantity", "op": op, "value": value}]}),
                                 body=QUANTITY_BODY)
    assert [rule.as_dict() for rule in tool.approval_rules] == [{"param": "quantity", "op": op, "value": value}]
    assert tool.approval_required is True and warnings == ()


def test_exists_rule_needs_no_value():
    tool, warnings = compile_one(acc=acc(approval={"when": [{"param": "note", "op": "exists"}]}), body=QUANTITY_BODY)
    assert tool.approval_rules[0].value is None and warnings == ()


def test_rule_on_a_nested_argument_names_its_top_level_argument():
    tool, warnings = compile_one(acc=acc(approval={"when": [{"param": "quantity.units", "op": ">", "value": 1}]}),
                                 body=QUANTITY_BODY)
    assert tool.approval_rules[0].param == "quantity.units" and warnings == ()


@pytest.mark.parametrize(("rule", "fragment"), [
    ({"param": "quantity", "op": "=~", "value": 1}, "op must be one of"),
    ({"param": "quantity", "op": ">", "value": "100"}, "op > needs a number"),
    ({"param": "quantity", "op": ">", "value": True}, "op > needs a number"),
    ({"param": "quantity", "op": "in", "value": 3}, "op in needs a list"),
    ({"param": "quantity", "op": "=="}, "op == needs a value"),
    ({"param": "quantity", "op": "exists", "value": 3}, "exists takes no value or a boolean"),
    ({"param": "absent", "op": ">", "value": 1}, "not an input argument"),
    ({"param": "", "op": ">", "value": 1}, "param must be a non-empty string"),
    ({"param": "quantity", "op": ">", "value": 1, "unit": "kg"}, "unknown rule fields"),
    ("quantity > 1", "a rule must be an object"),
])
def test_invalid_approval_rule_warns_and_falls_back_to_always_approve(rule, fragment):
    tool, warnings = compile_one(acc=acc(approval={"when": [rule]}), body=QUANTITY_BODY)
    assert codes(warnings) == ["acc_approval_rule_invalid"]
    assert fragment in warnings[0].message
    assert warnings[0].fallback == "approval is always required"
    assert warnings[0].operation == "op"
    assert tool.approval_rules == () and tool.approval_declared is True and tool.approval_required is True


def test_invalid_rule_does_not_drop_valid_rules_beside_it():
    rules = [{"param": "quantity", "op": ">", "value": 100}, {"param": "quantity", "op": "?"}]
    tool, _ = compile_one(acc=acc(approval={"when": rules}), body=QUANTITY_BODY)
    assert [rule.op for rule in tool.approval_rules] == [">"]


def test_approval_when_not_a_list_warns():
    tool, warnings = compile_one(acc=acc(approval={"when": {"param": "quantity"}}), body=QUANTITY_BODY)
    assert codes(warnings) == ["acc_approval_when_invalid"] and tool.approval_required is True


def test_approval_required_not_boolean_warns_and_requires_approval():
    tool, warnings = compile_one(acc=acc(approval={"required": "no"}))
    assert codes(warnings) == ["acc_approval_required_invalid"] and tool.approval_declared is True


def test_approval_not_an_object_warns_and_requires_approval():
    tool, warnings = compile_one(acc=acc(approval=True))
    assert codes(warnings) == ["acc_approval_invalid"] and tool.approval_required is True


def test_approval_prompt_is_kept_up_to_200_characters():
    tool, warnings = compile_one(acc=acc(approval={"required": True, "prompt": "p" * 200}))
    assert tool.approval_prompt == "p" * 200 and warnings == ()


def test_long_approval_prompt_is_cut_with_a_warning():
    tool, warnings = compile_one(acc=acc(approval={"required": True, "prompt": "p" * 250}))
    assert codes(warnings) == ["acc_approval_prompt_truncated"]
    assert len(tool.approval_prompt) == 200 and tool.approval_prompt.endswith("…")


def test_approval_prompt_not_text_is_dropped_with_a_warning():
    tool, warnings = compile_one(acc=acc(approval={"required": True, "prompt": 5}))
    assert codes(warnings) == ["acc_approval_prompt_invalid"] and tool.approval_prompt == ""


def test_scope_is_kept():
    tool, _ = compile_one(acc=acc(scope="orders.write"))
    assert (tool.scope, tool.enabled) == ("orders.write", True)


def test_missing_scope_disables_the_tool():
    tool, warnings = compile_one(acc={"version": 1})
    assert codes(warnings) == ["acc_scope_missing"]
    assert (tool.scope, tool.enabled) == ("op", False)


@pytest.mark.parametrize("scope", [42, "", "s" * 257])
def test_invalid_scope_disables_the_tool(scope):
    tool, warnings = compile_one(acc={"version": 1, "scope": scope})
    assert codes(warnings) == ["acc_scope_invalid"] and tool.enabled is False


def test_enabled_false_is_kept_without_warning():
    tool, warnings = compile_one(acc=acc(enabled=False))
    assert tool.enabled is False and warnings == ()


def test_enabled_not_boolean_disables_the_tool():
    tool, warnings = compile_one(acc=acc(enabled="yes"))
    assert codes(warnings) == ["acc_enabled_invalid"] and tool.enabled is False


def test_missing_version_warns():
    _, warnings = compile_one(acc={"scope": "s"})
    assert codes(warnings) == ["acc_version_missing"]


def test_invalid_version_warns():
    _, warnings = compile_one(acc={"scope": "s", "version": [1]})
    assert codes(warnings) == ["acc_version_invalid"]


def test_invalid_risk_level_falls_back_to_high():
    tool, warnings = compile_one(acc=acc(risk={"level": "critical"}))
    assert codes(warnings) == ["acc_risk_level_invalid"]
    assert (tool.risk, tool.approval_required) == ("high", True)


def test_risk_not_an_object_falls_back_to_the_default():
    tool, warnings = compile_one(acc=acc(risk="high"), method="post")
    assert codes(warnings) == ["acc_risk_invalid"] and tool.risk == "medium"


def test_subject_and_audit_flags_are_kept():
    tool, _ = compile_one(acc=acc(subject={"required": True}, audit={"sensitive": True}))
    assert (tool.subject_required, tool.audit_sensitive) == (True, True)


def test_invalid_subject_required_falls_back_to_required():
    tool, warnings = compile_one(acc=acc(subject={"required": 1}))
    assert codes(warnings) == ["acc_subject_required_invalid"] and tool.subject_required is True


def test_audit_not_an_object_falls_back_to_sensitive():
    tool, warnings = compile_one(acc=acc(audit=True))
    assert codes(warnings) == ["acc_audit_invalid"] and tool.audit_sensitive is True


def test_execution_fields_are_kept():
    tool, warnings = compile_one(acc=acc(execution={"readonly": False, "idempotent": True, "timeout_ms": 600000,
                                                    "rate_limit": {"count": 5, "window": "1h"}}))
    assert (tool.readonly, tool.idempotent, tool.timeout_ms) == (False, True, 600000)
    assert tool.rate_limit.as_dict() == {"count": 5, "window": "1h"} and warnings == ()


def test_default_timeout_is_30_seconds():
    tool, _ = compile_one(acc=acc())
    assert tool.timeout_ms == 30000 and tool.rate_limit is None


@pytest.mark.parametrize("timeout", [0, 600001, "5000", 1.5, True])
def test_invalid_timeout_falls_back_to_the_default(timeout):
    tool, warnings = compile_one(acc=acc(execution={"timeout_ms": timeout}))
    assert codes(warnings) == ["acc_execution_timeout_invalid"] and tool.timeout_ms == 30000


@pytest.mark.parametrize("limit", [{"count": 5, "window": "2m"}, {"count": 0, "window": "1m"}, {"window": "1m"}, 10])
def test_invalid_rate_limit_disables_the_tool(limit):
    tool, warnings = compile_one(acc=acc(execution={"rate_limit": limit}))
    assert codes(warnings) == ["acc_execution_rate_limit_invalid"]
    assert (tool.rate_limit, tool.enabled) == (None, False)


def test_readonly_not_boolean_is_treated_as_a_write():
    tool, warnings = compile_one(acc=acc(execution={"readonly": "true"}), method="get")
    assert codes(warnings) == ["acc_execution_readonly_invalid"]
    assert (tool.readonly, tool.risk) == (False, "medium")


def test_idempotent_not_boolean_falls_back_to_false():
    tool, warnings = compile_one(acc=acc(execution={"idempotent": 1}), method="get")
    assert codes(warnings) == ["acc_execution_idempotent_invalid"] and tool.idempotent is False


def test_execution_not_an_object_warns():
    tool, warnings = compile_one(acc=acc(execution=[]), method="get")
    assert codes(warnings) == ["acc_execution_invalid"] and tool.readonly is True


def test_guidance_fields_are_kept():
    tool, warnings = compile_one(acc=acc(guidance={"when_to_use": "W", "returns": "R", "examples": ["E", {"a": 1}],
                                                   "context": "C"}))
    assert (tool.when_to_use, tool.returns, tool.examples, tool.context) == ("W", "R", ("E", {"a": 1}), "C")
    assert warnings == ()


@pytest.mark.parametrize("field", ["when_to_use", "returns", "context"])
def test_guidance_text_that_is_not_a_string_is_ignored(field):
    tool, warnings = compile_one(acc=acc(guidance={field: 5}))
    assert codes(warnings) == [f"acc_guidance_{field}_invalid"] and getattr(tool, field) == ""


def test_guidance_examples_not_a_list_are_ignored():
    tool, warnings = compile_one(acc=acc(guidance={"examples": "E"}))
    assert codes(warnings) == ["acc_guidance_examples_invalid"] and tool.examples == ()


def test_guidance_not_an_object_warns():
    _, warnings = compile_one(acc=acc(guidance="use it"))
    assert codes(warnings) == ["acc_guidance_invalid"]


def test_outcome_is_kept():
    tool, warnings = compile_one(acc=acc(outcome={"result": "order", "side_effect": "notify"}))
    assert (tool.outcome_result, tool.side_effect) == ("order", "notify") and warnings == ()


def test_side_effect_defaults_from_readonly():
    read, _ = compile_one(acc=acc(), method="get")
    write, _ = compile_one(acc=acc(), method="post")
    assert (read.side_effect, write.side_effect) == ("read", "write")


def test_invalid_side_effect_falls_back_to_the_derived_one():
    tool, warnings = compile_one(acc=acc(outcome={"side_effect": "delete"}), method="post")
    assert codes(warnings) == ["acc_outcome_side_effect_invalid"] and tool.side_effect == "write"


def test_outcome_not_an_object_warns():
    _, warnings = compile_one(acc=acc(outcome="done"))
    assert codes(warnings) == ["acc_outcome_invalid"]


def test_unknown_acc_field_warns_and_is_ignored():
    _, warnings = compile_one(acc=acc(colour="blue"))
    assert codes(warnings) == ["acc_unknown_field"] and "colour" in warnings[0].message


def test_extension_fields_inside_acc_are_allowed():
    _, warnings = compile_one(acc=acc(**{"x-team": "ops"}))
    assert warnings == ()


def test_acc_not_an_object_compiles_as_without_acc():
    tool, warnings = compile_one(acc=True, method="get")
    assert codes(warnings) == ["acc_invalid"]
    assert (tool.has_acc, tool.enabled, tool.readonly) == (False, False, True)


def test_every_warning_names_its_operation_and_a_fallback():
    _, warnings = compile_one(acc={"version": [1], "enabled": "y", "scope": 1, "risk": {"level": "x"},
                                   "approval": {"required": "n"}, "execution": {"timeout_ms": -1}})
    assert len(warnings) == 6
    assert all(warning.operation == "op" and warning.fallback and warning.message for warning in warnings)
    assert all(warning.pointer == "/paths/~1things/post/x-agent-capability" for warning in warnings)
