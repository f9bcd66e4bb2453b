"""Schema-driven fuzzing (schemathesis) of the agent and builder APIs against a live server: every
operation of /api/schema/, with real credentials (an agent session, a business backend's client
token, an operator token) and real path parameters half the time, in positive and negative modes.

Bounded: MAX_EXAMPLES cases per operation and mode, and a time budget for the whole run. The
checks: no 5xx, and every answer conforms to the schema (documented status, content type, body,
and for errors the operation's enum of codes)."""

from __future__ import annotations

import os
import time
import uuid

import pytest
import requests
import schemathesis
from django.core.files.uploadedfile import SimpleUploadedFile
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from apps.agent_auth.models import AgentSession
from apps.knowledge.services import document_upload
from apps.ledger.services import memory_note_create
from apps.projects.models import Membership, OperatorToken
from apps.projects.tokens import operator_token_create
from apps.tasks.services import MemberSpec, PolicySpec, task_create
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.projects.factories import MembershipFactory
from tests.routes.factories import RouteFactory
from tests.tools.factories import ToolProviderFactory

# A deeper run: FUZZ_MAX_EXAMPLES=100 FUZZ_TIME_BUDGET=1800 pytest tests/core/test_fuzz.py
MAX_EXAMPLES = int(os.environ.get("FUZZ_MAX_EXAMPLES", "10"))
TIME_BUDGET_SECONDS = int(os.environ.get("FUZZ_TIME_BUDGET", "90"))
# Past the budget each operation still gets this many negative cases: no run ends without its negative pass.
NEGATIVE_FLOOR = 3
# Operations that end the credentials every other operation uses get their own, spent ones.
SPENDS_SESSION = {"revoke"}


@pytest.fixture
def world(transactional_db, ingest_unconsumed):  # its document stays pending whichever test ran before
    owner = MembershipFactory(role=Membership.Role.OWNER)
    project = owner.project
    route = RouteFactory(project=project, key="store-assistant", tools_direct_enabled=True)
    client = AgentClientFactory(project=project, allowed_routes=[route.key])
    kb = KnowledgeBaseFactory(project=project)
    provider = ToolProviderFactory(project=project)
    families = ("knowledge:", "tools:", "routes:", "tasks:")
    scopes = [scope for scope in OperatorToken.Scope.values if scope.startswith(families)]
    _row, operator_token = operator_token_create(user=owner.user, name="fuzz", scopes=scopes)
    agent = session_for(client, principal=PRINCIPAL)
    [document] = document_upload(kb=kb, files=[SimpleUploadedFile("退货政策.md", "# 退货\n\n七天无理由。".encode())],
                                 user=owner.user)
    note = memory_note_create(session=agent.session, project=project, route=route, content="喜欢简短的回答。")
    # A task of a session of its own (a member session is task-enforced: the fuzzed one must not be).
    member = session_for(client, principal=PRINCIPAL)
    task, _ = task_create(project=project, user=owner.user, request_id="fuzz-task", policy=PolicySpec(),
                          members=[MemberSpec(session_id=str(member.session.pk), workspace=route.key,
                                              client_conversation_id="fuzz-task-conversation", allowed_tools=())])
    return {
        "route": route, "client": client, "kb": kb, "provider": provider, "operator_token": operator_token,
        "document": document, "note": note, "agent": agent, "spare": session_for(client, principal=PRINCIPAL),
        "task": task,
    }


def _open_turn(base_url: str, world) -> str:
    """A real run, so that completion and run-bound knowledge calls reach past the run lookup."""
    response = requests.post(
        f"{base_url}/agent-api/v1/workspaces/{world['route'].key}/turns", timeout=30,
        headers={"Authorization": f"Bearer {world['agent'].access_token}"},
        json={"client_conversation_id": "fuzz-conversation", "client_turn_id": "fuzz-turn-1",
              "user_message_id": "fuzz-message-1", "user_input": "退货政策是什么?"})
    assert response.status_code == 200, response.text
    return response.json()["run_id"]


def _credentials(operation, world) -> dict[str, str]:
    security = {name for requirement in operation.definition.raw.get("security", []) for name in requirement}
    if operation.path.startswith("/api/v1/builder/") or "operatorToken" in security:
        # The RAG endpoints take an operator token too: without one every case was a 401.
        return {"Authorization": f"Bearer {world['operator_token']}"}
    if "clientToken" in security:
        return {"Authorization": f"Bearer {world['client'].token}"}
    if "agentBearer" in security:
        tokens = world["spare"] if operation.definition.raw.get("operationId") in SPENDS_SESSION else world["agent"]
        return {"Authorization": f"Bearer {tokens.access_token}"}
    return {}


def _known_path_parameters(operation, world) -> dict[str, str]:
    # Deleting the document or the note would leave every later operation a 404: those get strangers.
    keep = operation.method.upper() == "DELETE"
    known = {"route": world["route"].key, "kb_id": str(world["kb"].pk),
             "document_id": str(uuid.uuid4() if keep else world["document"].pk),
             "memory_id": str(uuid.uuid4() if keep else world["note"].pk),
             "authorization_id": str(uuid.uuid4()), "session_id": str(uuid.uuid4()),
             "run_id": world.get("run_id", str(uuid.uuid4())), "name": "no_such_tool",
             "route_key": world["route"].key, "provider_id": str(uuid.uuid4() if keep else world["provider"].pk),
             "task_id": str(world["task"].pk)}
    names = {p["name"] for p in operation.definition.raw.get("parameters", []) if p.get("in") == "path"}
    return {name: known[name] for name in names if name in known}


def test_fuzzing_finds_no_server_error_and_no_schema_violation(world, live_server):
    world["run_id"] = _open_turn(live_server.url, world)
    raw = requests.get(f"{live_server.url}/api/schema/", params={"format": "json"}, timeout=30).json()
    schema = schemathesis.openapi.from_dict(raw)
    checks = [status_code_conformance, content_type_conformance, response_schema_conformance]
    http = requests.Session()
    failures: list[str] = []
    statuses: dict[int, int] = {}
    per_operation: dict[str, dict[int, int]] = {}
    negative_operations: set[str] = set()
    cases = 0
    started = time.monotonic()
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 40

    def fuzz(operation, mode, headers, strategy, examples):
        @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                  phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
        @given(case=strategy)
        def run(case):
            nonlocal cases
            cases += 1
            negative_operations.update([operation.label] if mode == GenerationMode.NEGATIVE else [])
            response = case.call(base_url=live_server.url, session=http, headers=headers, timeout=30)
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            seen = per_operation.setdefault(operation.label, {})
            seen[response.status_code] = seen.get(response.status_code, 0) + 1
            where = f"{case.method} {case.formatted_path} [{mode.value}] → {response.status_code}"
            if response.status_code >= 500:
                failures.append(f"{where}: {response.text[:300]}")
                return
            try:
                case.validate_response(response, checks=checks)
            except (Exception, BaseExceptionGroup) as exc:  # every violation is collected, not only the first
                failures.append(f"{where}: {str(exc)[:600]}")

        run()

    # Every operation gets both passes whatever the time; past the time budget (a loaded machine)
    # the negative pass runs NEGATIVE_FLOOR cases an operation instead of MAX_EXAMPLES.
    runs = [(mode, operation) for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
            for operation in operations]
    for mode, operation in runs:
        examples = MAX_EXAMPLES
        if mode == GenerationMode.NEGATIVE and time.monotonic() - started > TIME_BUDGET_SECONDS:
            examples = min(NEGATIVE_FLOOR, MAX_EXAMPLES)
        # Positive cases reach the real route and knowledge base; negative ones make up path parameters.
        known = _known_path_parameters(operation, world) if mode == GenerationMode.POSITIVE else None
        fuzz(operation, mode, _credentials(operation, world),
             operation.as_strategy(generation_mode=mode, path_parameters=known or None), examples)
    http.close()

    elapsed = time.monotonic() - started
    for label, seen in sorted(per_operation.items()):
        print(f"  {label}: {sorted(seen.items())}")
    print(f"fuzz: {len(operations)} operations, {cases} cases in {elapsed:.1f}s, statuses {sorted(statuses.items())}")
    assert not failures, "\n".join(sorted(set(failures))[:40])
    assert len(per_operation) == len(operations)
    # Every operation that takes credentials got past them at least once: a fuzz answered only
    # 401 never reached the code behind the door.
    assert not [label for label, seen in per_operation.items() if set(seen) == {401}]
    assert len(negative_operations) == len(operations)
    assert cases >= len(operations) * MAX_EXAMPLES
    # The spare session was spent by the revoke operation; the main one served every other call.
    assert AgentSession.objects.filter(pk=world["agent"].session.pk, revoked_at__isnull=True).exists()
