"""An MCP session whose agent session an operator has made a task's member, against the live hub:
every turn and call of it must then carry a task binding, which this bridge does not send. The
hub's 403 TASK_REQUIRED reached only the bridge's stderr; the model read that the workspace's
tools did not exist ("Unknown tool …: find tools with capability_search first")."""

from __future__ import annotations

import pytest

from apps.agent_auth.models import AgentSession
from apps.ledger.models import Run
from apps.tasks.services import MemberSpec, PolicySpec, task_create
from apps.tools.models import Invocation
from tests.mcp.conftest import WORKSPACE
from tests.mcp.mcp_client import mcp_session, run_async, text_of
from tests.projects.factories import MembershipFactory

pytestmark = pytest.mark.django_db(transaction=True)

BUILTINS = {"knowledge_search", "knowledge_read", "capability_search", "resume_invocation", "inspect_invocation"}
TASK_REFUSAL = "This agent session belongs to a BailingHub task, which this MCP bridge cannot join"


@pytest.fixture
def task_member(signed_in, workspace):
    owner = MembershipFactory(project=workspace.project)
    task_create(project=workspace.project, user=owner.user, request_id="desk-task", name="restock",
                members=[MemberSpec(session_id=str(AgentSession.objects.get().pk), workspace=WORKSPACE,
                                    client_conversation_id="desk-1", allowed_tools=("lookup_product",))],
                policy=PolicySpec())
    return signed_in


def test_a_governed_tool_of_a_task_members_session_answers_the_task_refusal_not_unknown_tool(task_member):
    async def scenario():
        async with mcp_session(task_member) as client:
            listed = {tool.name for tool in (await client.list_tools()).tools}
            return listed, await client.call_tool("lookup_product", {"query": "保温杯"})

    listed, result = run_async(scenario)

    assert listed == BUILTINS  # the hub lists no tool without a bound turn
    assert result.is_error is True
    assert result.structured_content["error"] == "TASK_REQUIRED" and result.structured_content["status"] == 403
    assert TASK_REFUSAL in text_of(result) and "bailinghub-mcp login" in text_of(result)
    assert "Unknown tool" not in text_of(result)
    assert (Run.objects.count(), Invocation.objects.count()) == (0, 0)


@pytest.mark.parametrize(("tool", "arguments"), [("capability_search", {"query": "stock"}),
                                                 ("knowledge_search", {"query": "退款"})])
def test_a_search_of_a_task_members_session_answers_the_task_refusal(task_member, tool, arguments):
    async def scenario():
        async with mcp_session(task_member) as client:
            return await client.call_tool(tool, arguments)

    result = run_async(scenario)

    assert result.is_error is True
    assert (result.structured_content["error"], result.structured_content["status"]) == ("TASK_REQUIRED", 403)
    assert TASK_REFUSAL in text_of(result) and "bailinghub-mcp login" in text_of(result)
    assert Run.objects.count() == 0
