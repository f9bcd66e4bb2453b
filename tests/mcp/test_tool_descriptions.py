"""A workspace tool's governance facts, written into its MCP description, read as JSON does: a
model reads them right under a JSON schema, where Python's True/False/None mean nothing."""

from __future__ import annotations

from bailinghub_mcp.server import governed_tool

DEFINITION = {"name": "issue_refund", "description": "Refund an order.", "scope": "orders.refund", "risk": "high",
              "approval_required": True, "readonly": False, "idempotent": True,
              "input_schema": {"type": "object", "properties": {}}}


def test_the_description_writes_booleans_as_json():
    assert governed_tool(DEFINITION).description == (
        "Refund an order.\n[BailingHub governed tool; risk: high, approval_required: true, readonly: false, "
        "idempotent: true, scope: orders.refund]")


def test_a_missing_value_reads_null_not_none():
    assert governed_tool({**DEFINITION, "scope": None}).description.endswith("scope: null]")
