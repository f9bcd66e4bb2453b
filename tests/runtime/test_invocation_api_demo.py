"""End to end with the demo shop served over real HTTP (live server) and a real worker: a turn,
capability search, a read-only call, a refund that needs approval, the decision, resume and the
receipt. The shop verifies every signed call with apps.demo_business.verify."""

import importlib
from urllib.parse import urlsplit

import pytest
from django.urls import clear_url_caches
from rest_framework.test import APIClient

import bailinghub.urls
from apps.demo_business.models import RequestLogEntry
from apps.demo_business.spec import demo_spec_bytes
from apps.projects.tokens import operator_token_create
from apps.tools.models import Approval
from apps.tools.route_tools import SourceSpec, route_tools_set
from apps.tools.services import provider_create
from apps.tools.surface import route_surface
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, bearer, session_for
from tests.ledger.helpers import open_turn, post_json
from tests.projects.factories import MembershipFactory
from tests.routes.factories import RouteFactory
from tests.tools.invocation_helpers import URL, new_id

SECRET = "demo-shop-e2e-signing-key"


@pytest.fixture
def demo_mounted(settings):
    original = settings.DEMO_BUSINESS_ENABLED
    settings.DEMO_BUSINESS_SIGNING_SECRET = SECRET
    settings.DEMO_BUSINESS_ENABLED = True
    importlib.reload(bailinghub.urls)
    clear_url_caches()
    yield
    settings.DEMO_BUSINESS_ENABLED = original
    importlib.reload(bailinghub.urls)
    clear_url_caches()


def test_a_turn_a_read_an_approved_refund_and_its_receipt(live_server, demo_mounted, celery_worker_session, settings):
    settings.TOOL_INVOCATION_WAIT_SECONDS = 30  # the test worker runs one task at a time
    parts = urlsplit(live_server.url)
    route = RouteFactory(key="demo-store", tools_direct_enabled=True)
    provider = provider_create(project=route.project, name="demo-shop", secret=SECRET, spec=demo_spec_bytes(),
                               base_url=f"{parts.scheme}://{parts.netloc}/demo-business").provider
    route_tools_set(route=route, sources=[SourceSpec(provider=provider, allowed_tools=[
        "lookup_product", "get_order_status", "adjust_stock", "issue_refund", "add_customer_note"])],
        write_tools=["adjust_stock", "issue_refund", "add_customer_note"], tools_direct_enabled=True)
    issued = session_for(AgentClientFactory(project=route.project, allowed_routes=["demo-store"]), principal=PRINCIPAL)
    agent = APIClient()
    turn = open_turn(agent, issued.access_token, "demo-store", user_input="给订单 SO-240002 退款 10 元").json()
    search = post_json(agent, "/agent-api/v1/workspaces/demo-store/capabilities/search", {"query": "refund"},
                       issued.access_token).json()
    assert "issue_refund" in [tool["name"] for tool in search["tools"]]
    revision = route_surface(route=route, session=issued.session).revision
    assert turn["capability_revision"] == search["capability_revision"] == revision

    def invoke(tool, arguments, invocation_id=None):
        return post_json(agent, URL, {"invocation_id": invocation_id or new_id(), "route": "demo-store",
                                      "capability_revision": revision, "agent_run_id": turn["run_id"],
                                      "tool": tool, "arguments": arguments}, issued.access_token).json()

    read = invoke("lookup_product", {"query": "保温杯"})
    assert (read["state"], read["business_status"]) == ("executed", 200)
    assert "SKU-1003" in read["text"]

    refund_id = new_id()
    waiting = invoke("issue_refund", {"order_id": "SO-240002", "amount": 10, "reason": "Damaged lid"}, refund_id)
    assert waiting["state"] == "awaiting_approval"
    owner = MembershipFactory(project=route.project)
    _, token = operator_token_create(user=owner.user, name="approver", scopes=["approvals:decide"])
    decided = APIClient().post(f"/api/v1/builder/approvals/{waiting['approval_id']}/decision",
                               {"decision_id": "approve-1", "decision": "approved"}, format="json",
                               HTTP_AUTHORIZATION=f"Bearer {token}")
    assert decided.status_code == 200, decided.content
    done = agent.generic("POST", f"{URL}/{refund_id}/resume", "{}", content_type="application/json",
                         **bearer(issued.access_token)).json()
    assert (done["state"], done["business_status"]) == ("executed", 200)
    assert "SO-240002" in done["text"]
    receipt = agent.get(f"{URL}/{refund_id}/receipt", **bearer(issued.access_token)).json()
    assert (receipt["result"], receipt["approval"]["status"], receipt["journal_state"]) == (
        done, "approved", "completed")
    log = list(RequestLogEntry.objects.order_by("id").values_list("operation", "signature_valid", "outcome"))
    assert log == [("lookup_product", True, "read"), ("issue_refund", True, "applied")]
    assert Approval.objects.get().used_at is not None
