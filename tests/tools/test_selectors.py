"""Agent-facing projections of a stored tool."""

from __future__ import annotations

import pytest

from apps.tools.selectors import tool_definition, tool_usage_guidance

from .factories import ToolProviderFactory

pytestmark = pytest.mark.django_db


def test_tool_definition_is_the_whitelisted_projection():
    tool = ToolProviderFactory().tools.get(name="stock_adjust")
    assert tool_definition(tool=tool) == {
        "name": "stock_adjust", "description": "Adjust stock", "scope": "stock.write", "risk": "medium",
        "approval_required": True, "readonly": False, "idempotent": False,
        "input_schema": {"type": "object", "required": ["sku", "quantity"], "properties": {
            "sku": {"type": "string", "description": "SKU to adjust"},
            "quantity": {"type": "integer", "description": "Units to add (negative to remove)"},
            "note": {"type": "string", "nullable": True}}},
    }


def test_route_forced_approval_sets_approval_required():
    tool = ToolProviderFactory().tools.get(name="customer_note")
    assert tool_definition(tool=tool)["approval_required"] is False
    assert tool_definition(tool=tool, force_approval=True)["approval_required"] is True


def test_guidance_flag_appears_only_with_separate_guidance():
    tools = ToolProviderFactory().tools
    assert tool_definition(tool=tools.get(name="product_lookup"))["usage_guidance_available"] is True
    assert "usage_guidance_available" not in tool_definition(tool=tools.get(name="order_status"))


def test_usage_guidance_block_has_its_limits():
    tool = ToolProviderFactory().tools.get(name="product_lookup")
    block = tool_usage_guidance(tool=tool)
    assert block["text"].startswith("Look up a product by SKU\n\nReturns name, price and stock for one product.")
    assert block["text"].endswith('Example: {"sku": "TEA-001"}')
    assert (block["truncated"], block["max_chars"], block["max_bytes"]) == (False, 32768, 65536)
    assert block["source_chars"] == len(block["text"])
