"""An MCP session end to end: the SDK's stdio client launches `bailinghub-mcp serve`, signed in
by the scripted login, against the live hub."""

from __future__ import annotations

import pytest

from apps.knowledge.models import KnowledgeBase
from apps.ledger.models import Message, Run
from tests.knowledge.helpers import ingest_texts, wait_for
from tests.mcp.mcp_client import mcp_session, run_async, text_of
from tests.runtime.knowledge_helpers import REFUND, chain_body

pytestmark = pytest.mark.django_db(transaction=True)

BUILTINS = {"knowledge_search", "knowledge_read", "capability_search", "resume_invocation", "inspect_invocation"}
DEMO_TOOLS = {"lookup_product", "get_order_status", "adjust_stock", "issue_refund", "add_customer_note"}


def test_the_tool_list_is_the_bridge_tools_and_the_workspace_tools_with_their_schemas(signed_in):
    async def scenario():
        async with mcp_session(signed_in) as client:
            return (await client.list_tools()).tools

    tools = {tool.name: tool for tool in run_async(scenario)}

    assert set(tools) == BUILTINS | DEMO_TOOLS
    lookup, refund = tools["lookup_product"], tools["issue_refund"]
    assert lookup.input_schema["type"] == "object" and "query" in lookup.input_schema["properties"]
    assert set(refund.input_schema["required"]) >= {"order_id", "amount"}
    assert (lookup.annotations.read_only_hint, refund.annotations.read_only_hint) == (True, False)
    assert "approval_required: true" in refund.description and "risk: high" in refund.description


def test_knowledge_search_gives_hints_and_knowledge_read_gives_the_text_behind_a_ref(signed_in):
    async def scenario():
        async with mcp_session(signed_in) as client:
            found = await client.call_tool("knowledge_search", {"query": "退款政策 七天", "limit": 2})
            ref = found.structured_content["hints"][0]["ref"]
            page = await client.call_tool("knowledge_read", {"ref": ref})
            return found, page

    found, page = run_async(scenario)

    assert found.is_error is False
    assert found.structured_content["schema_version"] == "bailing.agent-knowledge-search.v1"
    assert found.structured_content["status"] == "ok"
    assert found.structured_content["hints"][0]["title"] == "退款.md"
    assert "knowledge_read" in text_of(found)
    assert "A score only orders these hits (it is not a relevance probability" in text_of(found)
    assert page.is_error is False
    assert page.structured_content["schema_version"] == "bailing.agent-knowledge-read.v1"
    assert REFUND[:20] in page.structured_content["content"] and REFUND[:20] in text_of(page)
    # The section's heading is in the text where it begins, and the page names the section it begins in.
    assert page.structured_content["content"] == f"# 退款\n\n{REFUND}"
    assert "(this page begins in section: 退款)\n\n# 退款\n\n" + REFUND[:20] in text_of(page)
    assert page.structured_content["trust"] == "reference_only"


def test_a_bad_ref_is_shown_to_the_model_as_the_hubs_error(signed_in):
    async def scenario():
        async with mcp_session(signed_in) as client:
            return await client.call_tool("knowledge_read", {"ref": "not-a-ref"})

    result = run_async(scenario)

    assert result.is_error is True
    assert result.structured_content == {"error": "knowledge_reference_invalid", "status": 400,
                                         "message": result.structured_content["message"]}


def test_capability_search_returns_matching_workspace_tools(signed_in):
    async def scenario():
        async with mcp_session(signed_in) as client:
            return await client.call_tool("capability_search", {"query": "refund an order to the customer"})

    result = run_async(scenario)

    names = [tool["name"] for tool in result.structured_content["tools"]]
    assert result.is_error is False
    assert "issue_refund" in names and set(names) <= DEMO_TOOLS
    assert "callable as tools of this server" in text_of(result)
    # The hub's count took in its knowledge tools, which this server offers as built-ins.
    assert result.structured_content["discovery"]["returned_count"] == len(names)


def test_an_argument_a_built_in_tool_does_not_declare_is_refused_and_nothing_is_searched(signed_in):
    async def scenario():
        async with mcp_session(signed_in) as client:
            return await client.call_tool("capability_search", {"query": "refund", "limit": 3})

    result = run_async(scenario)

    assert result.is_error is True
    assert "limit: not an argument of capability_search, which takes query." in text_of(result)
    assert Run.objects.count() == 0  # no run was opened for a search that did not happen


def test_one_mcp_session_is_one_run_completed_when_the_session_ends(signed_in):
    async def scenario():
        async with mcp_session(signed_in) as client:
            await client.list_tools()
            await client.call_tool("capability_search", {"query": "stock"})
            await client.list_tools()

    run_async(scenario)

    run = wait_for(lambda: Run.objects.filter(state=Run.State.COMPLETED).first(), timeout=20,
                   message="the session's run to complete")
    assert Run.objects.count() == 1
    assert run.route.key == "store-assistant" and run.knowledge_delivery == "on_demand"
    reply = Message.objects.filter(conversation=run.conversation).order_by("-sequence").first()  # ids are UUIDs
    assert reply.content == "MCP session ended."


def test_knowledge_read_follows_the_cursor_through_a_long_text(signed_in, workspace):
    kb = KnowledgeBase.objects.get(project=workspace.project)
    rule = "会员积分规则说明，积分可以在门店兑换礼品，兑换后不退不换。"
    paragraphs = [f"第{number}条：{rule}" for number in range(1, 301)]
    document = ingest_texts(kb, {"会员积分.md": "# 会员积分\n\n" + "\n\n".join(paragraphs)})["会员积分.md"]

    async def scenario():
        async with mcp_session(signed_in) as client:
            found = await client.call_tool("knowledge_search", {"query": "会员积分 兑换礼品", "limit": 1})
            ref = found.structured_content["hints"][0]["ref"]
            first = await client.call_tool("knowledge_read", {"ref": ref, "max_bytes": 4096})
            second = await client.call_tool("knowledge_read", {"ref": ref, "max_bytes": 4096,
                                                               "cursor": first.structured_content["next_cursor"]})
            return found, first, second

    found, first, second = run_async(scenario)

    assert found.structured_content["hints"][0]["title"] == "会员积分.md"
    assert first.structured_content["truncated"] is True and first.structured_content["next_cursor"]
    assert "call knowledge_read with the same ref and cursor" in text_of(first)
    assert second.is_error is False
    # The two pages, in order, are where the reference's chain starts (its hit's section).
    pages = first.structured_content["content"] + second.structured_content["content"]
    assert second.structured_content["content"] and chain_body(document, found.structured_content["hints"][0]["ref"]
                                                               ).startswith(pages)
