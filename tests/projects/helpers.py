"""A whole project as operators meet it, built through the real services: an owner, a route with
a bound and ingested knowledge base, an agent client with a session, one completed turn, a memory
note and the owner's builder API token. Used to show that an operator of one project never sees
another's rows."""

from __future__ import annotations

from dataclasses import dataclass

from django.test import Client
from rest_framework.test import APIClient

from apps.agent_auth.models import AgentAuthorization, AgentClient, AgentSession
from apps.knowledge import services as knowledge_services
from apps.knowledge.models import Document, EmbeddingModel, KnowledgeBase, RouteKnowledgeBinding
from apps.ledger.models import Conversation, MemoryNote, Message, Run
from apps.projects.models import Membership, OperatorToken, Project
from apps.projects.tokens import operator_token_create
from apps.routes.models import Route
from apps.routes.services import route_update
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import session_for
from tests.knowledge.factories import EmbeddingModelFactory, KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts
from tests.ledger.helpers import complete_run, open_turn, post_json
from tests.projects.factories import MembershipFactory, ProjectFactory
from tests.routes.factories import RouteFactory

REFUND_TEXT = "# 售后政策\n\n## 退款\n\n自签收之日起七天内可以无理由退货，商品须保持完好。退款三个工作日内原路退回。"
DELIVERY_TEXT = "# 配送\n\n同城订单当天送达，外地订单三到五天送达。"


@dataclass
class World:
    project: Project
    owner: Membership
    route: Route
    kb: KnowledgeBase
    documents: dict[str, Document]
    agent_client: AgentClient
    session: AgentSession
    run: Run
    note: MemoryNote
    token: OperatorToken
    token_secret: str
    access_token: str

    @property
    def user(self):
        return self.owner.user


def project_world(slug: str, *, role: str = Membership.Role.OWNER, user=None, project: Project | None = None
                  ) -> World:
    """A new project named after `slug` — or `project`, with `user`'s existing membership."""
    if project is None:
        project = ProjectFactory(name=f"Project {slug}", slug=slug)
    owner = Membership.objects.filter(project=project, user=user).first() if user else None
    if owner is None:
        owner = MembershipFactory(project=project, role=role, **({"user": user} if user else {}))
    route = RouteFactory(project=project, key=f"{slug}-route", name=f"Route of {slug}")
    route = route_update(route=route, knowledge_enabled=True)
    # One embedding model for every world: registering one creates an index, which PostgreSQL refuses
    # inside a transaction that already wrote chunks.
    model = EmbeddingModel.objects.filter(name="world-hashing").first() or EmbeddingModelFactory(name="world-hashing")
    kb = KnowledgeBaseFactory(project=project, name=f"KB of {slug}", embedding_model=model)
    knowledge_services.route_knowledge_bind(route=route, knowledge_base=kb)
    documents = ingest_texts(kb, {f"{slug}-refund.md": REFUND_TEXT, f"{slug}-delivery.md": DELIVERY_TEXT})
    agent_client = AgentClientFactory(project=project, allowed_routes=[route.key], app_id=f"{slug}-app")
    issued = session_for(agent_client, on_behalf_of=f"clerk@{slug}.example.com")
    api = APIClient()
    run_id = open_turn(api, issued.access_token, route.key, user_input=f"{slug}: 退款要几天？").json()["run_id"]
    complete_run(api, issued.access_token, run_id, content=f"{slug}: 三个工作日。")
    post_json(api, f"/agent-api/v1/workspaces/{route.key}/memories", {"content": f"{slug} 偏好简体中文"},
              issued.access_token)
    token, secret = operator_token_create(user=owner.user, name=f"{slug} token", scopes=["knowledge:debug"])
    return World(project=project, owner=owner, route=route, kb=kb, documents=documents, agent_client=agent_client,
                 session=AgentSession.objects.get(client=agent_client), run=Run.objects.get(pk=run_id),
                 note=MemoryNote.objects.get(route=route), token=token, token_secret=secret,
                 access_token=issued.access_token)


def admin_client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def row_counts() -> dict[str, int]:
    """Rows of every table an operator could change, to assert a refused request changed nothing."""
    models = (Project, Membership, Route, KnowledgeBase, Document, RouteKnowledgeBinding, AgentClient, AgentSession,
              AgentAuthorization, Conversation, Message, Run, MemoryNote, OperatorToken)
    return {model.__name__: model.objects.count() for model in models}
