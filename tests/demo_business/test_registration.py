"""The demo shop registers as a tool provider the way seed data or an operator would register it."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet

from apps.demo_business.spec import demo_spec_bytes
from apps.tools.services import provider_create
from tests.projects.factories import ProjectFactory


@pytest.mark.django_db
def test_the_demo_spec_registers_as_a_provider_with_five_enabled_tools(settings):
    settings.TOOL_SECRET_KEYS = [Fernet.generate_key().decode()]
    imported = provider_create(project=ProjectFactory(), name="demo-shop", base_url="http://127.0.0.1:8000/demo-business",
                               secret=settings.DEMO_BUSINESS_SIGNING_SECRET, spec=demo_spec_bytes(),
                               spec_filename="openapi.json")
    tools = imported.provider.tools.order_by("name")
    assert [(tool.name, tool.enabled) for tool in tools] == [
        ("add_customer_note", True), ("adjust_stock", True), ("get_order_status", True), ("issue_refund", True),
        ("lookup_product", True)]
    assert imported.provider.compile_report["warnings"] == []
