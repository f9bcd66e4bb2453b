"""A small world with one endpoint of every JSON family, for the hostile-input tests.

`make_world` drives the real services (sessions, turns, notes, knowledge bases) and names one URL per
JSON endpoint with the credentials it needs, so each hostile body can be sent to every family.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from rest_framework.test import APIClient

from apps.agent_auth.models import AgentAuthorization, AgentSession
from apps.knowledge.models import Document, KnowledgeBase
from apps.ledger.models import Conversation, MemoryNote, Message, Run
from apps.projects.models import Membership
from apps.projects.tokens import operator_token_create
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, authorization_for, session_for
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.ledger.helpers import open_turn
from tests.projects.factories import MembershipFactory
from tests.routes.factories import RouteFactory


@dataclass(frozen=True)
class Endpoint:
    name: str
    method: str
    url: str
    headers: dict = field(default_factory=dict)


@dataclass
class World:
    endpoints: list[Endpoint]
    access_token: str
    refresh_token: str
    client_token: str
    operator_token: str
    route_key: str
    kb: KnowledgeBase


def bearer(token: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def row_counts() -> dict[str, int]:
    """Rows a hostile request might create or change."""
    return {
        "authorizations": AgentAuthorization.objects.count(),
        "sessions": AgentSession.objects.filter(revoked_at__isnull=True).count(),
        "conversations": Conversation.objects.count(),
        "messages": Message.objects.count(),
        "runs": Run.objects.count(),
        "notes": MemoryNote.objects.count(),
        "kbs": KnowledgeBase.objects.count(),
        "documents": Document.objects.count(),
    }


def make_world() -> World:
    route = RouteFactory(key="store-assistant", name="门店助手", tools_direct_enabled=True)
    agent_client = AgentClientFactory(project=route.project, allowed_routes=[route.key])
    issued = session_for(agent_client, principal=PRINCIPAL)
    pending = authorization_for(agent_client)
    api = APIClient()
    run_id = open_turn(api, issued.access_token, route.key).json()["run_id"]
    note_id = api.post(f"/agent-api/v1/workspaces/{route.key}/memories", {"content": "记住：周一盘点。"},
                       format="json", **bearer(issued.access_token)).json()["memory_id"]
    project_note_id = api.post(f"/agent-api/v1/workspaces/{route.key}/project-memories", {"content": "项目备注"},
                               format="json", **bearer(issued.access_token)).json()["memory_id"]
    owner = MembershipFactory(project=route.project, role=Membership.Role.OWNER)
    _, operator_token = operator_token_create(user=owner.user, name="hostile",
                                             scopes=["knowledge:create", "knowledge:ingest", "knowledge:debug",
                                                     "knowledge:rebuild"])
    kb = KnowledgeBaseFactory(project=route.project)
    agent = bearer(issued.access_token)
    client = bearer(agent_client.token)
    operator = bearer(operator_token)
    ws = f"/agent-api/v1/workspaces/{route.key}"
    endpoints = [
        Endpoint("authorization_create", "POST", "/agent-auth/v1/authorizations"),
        Endpoint("token", "POST", "/agent-auth/v1/token"),
        Endpoint("revoke", "POST", "/agent-auth/v1/revoke"),
        Endpoint("authorization_approve", "POST", f"/agent-auth/v1/authorizations/{pending.pk}/approve", client),
        Endpoint("authorization_deny", "POST", f"/agent-auth/v1/authorizations/{pending.pk}/deny", client),
        Endpoint("turn_open", "POST", f"{ws}/turns", agent),
        Endpoint("run_complete", "POST", f"/agent-api/v1/runs/{run_id}/complete", agent),
        Endpoint("memory_create", "POST", f"{ws}/memories", agent),
        Endpoint("memory_update", "PATCH", f"{ws}/memories/{note_id}", agent),
        Endpoint("project_memory_create", "POST", f"{ws}/project-memories", agent),
        Endpoint("project_memory_update", "PATCH", f"{ws}/project-memories/{project_note_id}", agent),
        Endpoint("knowledge_search", "POST", f"{ws}/knowledge/search", agent),
        Endpoint("knowledge_read", "POST", f"{ws}/knowledge/read", agent),
        Endpoint("capability_search", "POST", f"{ws}/capabilities/search", agent),
        Endpoint("kb_create", "POST", "/api/v1/builder/knowledge-bases", operator),
        Endpoint("kb_update", "PATCH", f"/api/v1/builder/knowledge-bases/{kb.pk}", operator),
        Endpoint("kb_search", "POST", f"/api/v1/builder/knowledge-bases/{kb.pk}/search", operator),
        Endpoint("document_upload", "POST", f"/api/v1/builder/knowledge-bases/{kb.pk}/documents", operator),
    ]
    return World(endpoints=endpoints, access_token=issued.access_token, refresh_token=issued.refresh_token,
                 client_token=agent_client.token, operator_token=operator_token, route_key=route.key, kb=kb)


ENDPOINT_NAMES = [
    "authorization_create", "token", "revoke", "authorization_approve", "authorization_deny", "turn_open",
    "run_complete", "memory_create", "memory_update", "project_memory_create", "project_memory_update",
    "knowledge_search", "knowledge_read", "capability_search", "kb_create", "kb_update", "kb_search", "document_upload",
]


def endpoint(world: World, name: str) -> Endpoint:
    return next(item for item in world.endpoints if item.name == name)


def send(world: World, name: str, body: bytes | str, *, content_type: str = "application/json", **extra):
    target = endpoint(world, name)
    client = APIClient()
    client.raise_request_exception = False
    data = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    return client.generic(target.method, target.url, data, content_type=content_type, **target.headers, **extra)


def random_uuid() -> str:
    return str(uuid.uuid4())


# The other spellings uuid.UUID() reads as the same UUID; an id in a path or a body is taken only in
# the 8-4-4-4-12 form (either case), so each of these names no row.
NON_CANONICAL_UUID_FORMS = ["braces", "no_dashes", "urn", "dashes_elsewhere"]


def non_canonical_uuid(value: str, form: str) -> str:
    """`value` (a UUID in the 8-4-4-4-12 form) written in another `form` uuid.UUID() accepts."""
    bare = value.replace("-", "")
    return {"braces": "{" + value + "}", "no_dashes": bare, "urn": "urn:uuid:" + value,
            "dashes_elsewhere": f"{bare[:12]}-{bare[12:16]}-{bare[16:20]}-{bare[20:24]}-{bare[24:]}"}[form]
