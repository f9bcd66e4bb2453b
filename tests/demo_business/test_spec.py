"""The demo shop's spec compiles with the hub's compiler into the five tools the catalogue expects."""

from __future__ import annotations

import json

from apps.demo_business.spec import SPEC_PATH, demo_spec_bytes
from apps.tools.compiler import compile_spec


def tools_by_name():
    return {tool.name: tool for tool in compile_spec(demo_spec_bytes()).tools}


def test_the_spec_is_openapi_3_1_with_an_acc_on_every_operation():
    document = json.loads(SPEC_PATH.read_bytes())
    operations = [op for item in document["paths"].values() for op in item.values()]
    assert document["openapi"] == "3.1.0"
    assert [op["x-agent-capability"]["version"] for op in operations] == ["1"] * 5


def test_the_spec_compiles_without_warnings():
    result = compile_spec(demo_spec_bytes())
    assert (result.operations_total, result.operations_skipped, result.warnings) == (5, 0, ())


def test_the_spec_compiles_to_the_five_shop_tools():
    assert sorted(tools_by_name()) == ["add_customer_note", "adjust_stock", "get_order_status", "issue_refund",
                                       "lookup_product"]


def test_each_tool_has_its_governance():
    governance = {name: (tool.method, tool.enabled, tool.readonly, tool.risk, tool.approval_required,
                         [rule.as_dict() for rule in tool.approval_rules])
                  for name, tool in tools_by_name().items()}
    assert governance == {
        "lookup_product": ("GET", True, True, "low", False, []),
        "get_order_status": ("GET", True, True, "low", False, []),
        "adjust_stock": ("POST", True, False, "medium", True, [{"param": "quantity", "op": ">", "value": 100}]),
        "issue_refund": ("POST", True, False, "high", True, []),
        "add_customer_note": ("POST", True, False, "low", False, []),
    }


def test_each_tool_says_where_its_arguments_go():
    locations = {name: [(loc.argument, loc.location) for loc in tool.parameter_locations]
                 for name, tool in tools_by_name().items()}
    assert locations == {
        "lookup_product": [("query", "query")],
        "get_order_status": [("order_id", "path")],
        "adjust_stock": [("sku", "body"), ("direction", "body"), ("quantity", "body"), ("reason", "body")],
        "issue_refund": [("order_id", "body"), ("amount", "body"), ("reason", "body")],
        "add_customer_note": [("customer_id", "path"), ("note", "body")],
    }


def test_each_tool_carries_usage_guidance():
    tools = tools_by_name()
    assert all(tool.when_to_use and tool.returns and tool.scope.startswith("shop.") for tool in tools.values())
    assert "When to use:" in tools["issue_refund"].usage_guidance.text
