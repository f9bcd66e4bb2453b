"""Demo data an operator can log into: one project, two routes, one operator account.

The operator is staff, never a superuser, and an owner of the project: project membership, not
Django model permissions, is what lets them do every console task for it. Idempotent: running it
again creates nothing twice and keeps the operator's password; it only puts the operator's
access back as described if it was changed. The password comes from BAILING_DEMO_PASSWORD, or
is generated and printed once (the first time only).

Two runs at once (two `make run`s on one database) take turns: each looks for what exists and
creates what does not under one transaction-scoped advisory lock, so the second finds the first's
rows instead of failing on their unique names.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management.base import BaseCommand
from django.db import connection, transaction
from django.urls import reverse

from apps.agent_auth.models import AgentClient
from apps.agent_auth.services import agent_client_create
from apps.knowledge.models import EmbeddingModel, KnowledgeBase
from apps.knowledge.services import document_upload, knowledge_base_create, route_knowledge_bind
from apps.projects.models import Membership, Project
from apps.projects.services import membership_set, project_create, project_name_free
from apps.routes.models import Route
from apps.routes.services import route_create
from apps.tools.models import ToolProvider
from apps.tools.route_tools import SourceSpec, route_tools_set
from apps.tools.services import provider_create

DEMO_ROUTES = [
    {
        "key": "store-assistant",
        "name": "门店助手",
        "description": "为门店店员解答售后、退款与库存问题，并在授权后查询订单。",
        "system_prompt": (
            "你是百灵连锁门店的店员助手。回答要简洁、准确，优先引用知识库中的售后政策原文；"
            "没有依据时明确说“不确定”，不要编造流程。涉及退款金额或库存调整时，先说明将要执行的操作，"
            "等待审批结果后再答复顾客。"
        ),
        "agent_client_enabled": True,
        "agent_client_instructions": "本地 Agent 只能在店员明确要求时调用写工具；每次调用前复述关键参数。",
        "system_info_name": "百灵门店系统",
        "system_info_summary": "门店的订单、库存与售后工单系统，以及售后政策知识库。",
        "system_info_domains": ["订单查询", "库存", "售后与退款政策"],
        "system_info_boundaries": ["不处理线上商城订单", "退款超过 500 元需店长审批"],
        "knowledge_enabled": True,
        "knowledge_top_k": 5,
        "knowledge_max_docs": 4,
    },
    {
        "key": "hr-helpdesk",
        "name": "HR Helpdesk",
        "description": "Answers employee questions about leave, benefits and onboarding.",
        "system_prompt": (
            "You are the HR helpdesk for Bailing Retail. Answer from the employee handbook; cite the "
            "section you used. If the handbook does not cover a question, say so and suggest contacting "
            "hr@example.com. Never reveal another employee's personal data."
        ),
        "agent_client_enabled": True,
        "agent_client_instructions": "Keep answers under 200 words unless the employee asks for detail.",
        "audience_policy": Route.AudiencePolicy.LISTED,
        "allowed_audiences": ["employee", "hr"],
        "system_info_name": "Bailing HR",
        "system_info_summary": "Employee handbook, leave balances and benefits enrolment.",
        "system_info_domains": ["Leave", "Benefits", "Onboarding"],
        "system_info_boundaries": ["No payroll changes", "No access to performance reviews"],
        "knowledge_enabled": True,
        "memory_summary_enabled": True,
    },
]


DEMO_PROJECT_SLUG = "bailing-retail"
DEMO_PROJECT_NAME = "Bailing Retail"
# pg_advisory_xact_lock's key: "seed" and "demo" as two ints (no other lock of the hub uses it).
_SEED_LOCK = (0x73656564, 0x64656D6F)


class Command(BaseCommand):
    help = "Load demo data (idempotent)."

    def handle(self, *args, **options):
        with transaction.atomic():
            # Under READ COMMITTED (Django's default) each query after the wait sees what the
            # other run committed; a REPEATABLE READ snapshot would be taken before the wait.
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", list(_SEED_LOCK))
            # Found by its slug; a project of another slug that already took the name leaves the demo
            # one "Bailing Retail (2)" (names are unique) rather than stopping `make run`.
            project = Project.objects.filter(slug=DEMO_PROJECT_SLUG).first()
            if project is None:
                project = project_create(name=project_name_free(DEMO_PROJECT_NAME), slug=DEMO_PROJECT_SLUG,
                                         description="Demo project: a retail chain.")
            for spec in DEMO_ROUTES:
                if not Route.objects.filter(project=project, key=spec["key"]).exists():
                    route_create(project=project, **spec)
            username = os.environ.get("BAILING_DEMO_USER", "operator")
            User = get_user_model()
            user = User.objects.filter(username=username).first()
            password = None
            if user is None:
                password = os.environ.get("BAILING_DEMO_PASSWORD") or secrets.token_urlsafe(12)
                user = User.objects.create_user(username=username, password=password, is_staff=True,
                                                email=f"{username}@example.com")
            elif not user.is_staff or user.is_superuser or not user.is_active:
                user.is_staff, user.is_superuser, user.is_active = True, False, True
                user.save(update_fields=["is_staff", "is_superuser", "is_active"])
            membership_set(project=project, user=user, role=Membership.Role.OWNER)
            assistant = Route.objects.get(project=project, key="store-assistant")
            kb_note = _demo_knowledge(project=project, route=assistant)
            tools_note = _demo_tools(project=project, route=assistant)
            client_note = _demo_agent_client(project=project, route=assistant)
        if password and not os.environ.get("BAILING_DEMO_PASSWORD"):
            self.stdout.write(self.style.WARNING(
                f"Demo operator created. Log in at /admin/ as '{username}' with password: {password}\n"
                "(shown once; set BAILING_DEMO_PASSWORD to choose it)"
            ))
        elif password:
            self.stdout.write(f"Demo operator '{username}' created with BAILING_DEMO_PASSWORD.")
        elif os.environ.get("BAILING_DEMO_PASSWORD") and not user.check_password(os.environ["BAILING_DEMO_PASSWORD"]):
            self.stdout.write(self.style.WARNING(
                f"BAILING_DEMO_PASSWORD was not applied: operator '{username}' already exists and keeps its "
                f"password (the variable chooses it on the first run only). To set a new one: "
                f"{_change_password_command(username)}"
            ))
        else:
            self.stdout.write(f"Demo data present; operator '{username}' exists (its password was shown on the "
                              f"first run; to set a new one: {_change_password_command(username)}).")
        for note in (kb_note, tools_note, client_note):
            if note:
                self.stdout.write(note)


def _shown(path: Path) -> str:
    """`path` as the operator types it where make run was started: relative when it is below."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _change_password_command(username: str) -> str:
    """The command that sets the demo operator's password again, with this interpreter (the venv's)."""
    return f"DEBUG=true {_shown(Path(sys.executable))} manage.py changepassword {username}"


def _mcp_command() -> str:
    """How to run the MCP bridge from here: its name when PATH finds it, else its path beside this
    interpreter (`make install` puts it in the venv, and make run adds nothing to PATH)."""
    script = Path(sys.executable).with_name("bailinghub-mcp")
    if shutil.which("bailinghub-mcp") or not script.exists():
        return "bailinghub-mcp"
    return _shown(script)


DEMO_DIR = Path(__file__).resolve().parents[2] / "demo"
DEMO_KB = "门店知识库"
DEMO_DOCUMENTS = ("after-sales-policy.md", "stock-handbook.md")
DEMO_PROVIDER = "demo-shop"
DEMO_WRITE_TOOLS = ["adjust_stock", "issue_refund", "add_customer_note"]
DEMO_AGENT_CLIENT = "demo-agent"


def _demo_knowledge(*, project: Project, route: Route) -> str | None:
    """A KB of two short documents (the offline e5 model), bound to the store assistant; its
    documents are queued for the worker on commit."""
    if KnowledgeBase.objects.filter(project=project, name=DEMO_KB).exists():
        return None
    model = EmbeddingModel.objects.get(name="multilingual-e5-small")
    kb = knowledge_base_create(project=project, name=DEMO_KB, embedding_model=model,
                               embedding_dim=model.dimension,
                               description="售后政策与库存手册（演示数据）。")
    document_upload(kb=kb, files=[SimpleUploadedFile(name, (DEMO_DIR / name).read_bytes())
                                  for name in DEMO_DOCUMENTS])
    route_knowledge_bind(route=route, knowledge_base=kb)
    return f"Demo knowledge base '{DEMO_KB}' created; the worker ingests its documents."


def _demo_tools(*, project: Project, route: Route) -> str | None:
    """The demo shop (apps.demo_business, served by this process under /demo-business/) as a tool
    provider of the store assistant: two readonly tools and three writes, all allowed."""
    if not settings.DEMO_BUSINESS_ENABLED or ToolProvider.objects.filter(project=project,
                                                                         name=DEMO_PROVIDER).exists():
        return None
    from apps.demo_business.spec import demo_spec_bytes

    provider = provider_create(project=project, name=DEMO_PROVIDER, base_url=settings.DEMO_BUSINESS_BASE_URL,
                               secret=settings.DEMO_BUSINESS_SIGNING_SECRET, spec=demo_spec_bytes(),
                               spec_filename="openapi.json").provider
    names = sorted(provider.tools.values_list("name", flat=True))
    route_tools_set(route=route, sources=[SourceSpec(provider=provider, allowed_tools=names)],
                    tools_direct_enabled=True, write_tools=DEMO_WRITE_TOOLS)
    return (f"Demo shop registered as tool provider '{DEMO_PROVIDER}' ({settings.DEMO_BUSINESS_BASE_URL}) "
            f"for route '{route.key}': {', '.join(names)}.")


def _demo_agent_client(*, project: Project, route: Route) -> str | None:
    """An agent client whose users sign in on this hub's own page, so an agent host (the MCP
    bridge) can connect to the demo as README says, with no business backend of its own. Its client
    token is never shown: this hub's page needs none."""
    if AgentClient.objects.filter(app_id=DEMO_AGENT_CLIENT).exists():
        return None
    authorize_url = f"{settings.WEB_ORIGIN}{reverse('agent-auth-authorize')}"
    try:
        agent_client_create(project=project, app_id=DEMO_AGENT_CLIENT, name="Demo agent host",
                            allowed_routes=[route.key], agent_authorize_url=authorize_url)
    except ValidationError as exc:  # WEB_BIND names a host this hub's page may not be sent to over http
        return f"No demo agent client: {authorize_url} is not a page agents may be sent to ({exc.messages[0]})"
    return (f"Demo agent client '{DEMO_AGENT_CLIENT}' for route '{route.key}' (sign-in on this hub's page): "
            f"{_mcp_command()} login --hub {settings.WEB_ORIGIN} --client-app-id {DEMO_AGENT_CLIENT} "
            f"--workspace {route.key}")
