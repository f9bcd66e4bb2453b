"""The Tools list in Chromium at 1366×768, the admin's sidebar and filters open: every column fits in
the list's box, the last one (Enabled) included, also beside a provider, a tool and a path as long as
they may be (a path cut short has the whole endpoint in its title). The list once ran 345 px past its
box, where Read-only, Approval required, Declares ACC and Enabled were behind a scrollbar.
Screenshots land in /tmp/shots/."""

from __future__ import annotations

import json

import pytest

from apps.demo_business.spec import demo_spec_bytes
from tests.browser.layout import assert_changelist_fits, changelist_at_1366
from tests.tools.factories import ToolProviderFactory

LONG_PROVIDER = "p" * 64
LONG_TOOL = "t" * 64
LONG_PATH = "/" + "/".join(["warehouse-inventory-reconciliation"] * 6) + "/{sku}"


def long_spec() -> bytes:
    operation = {"operationId": LONG_TOOL, "summary": "A tool named and routed as long as a spec allows",
                 "parameters": [{"name": "sku", "in": "path", "required": True, "schema": {"type": "string"}}],
                 "responses": {"200": {"description": "ok"}}}
    return json.dumps({"openapi": "3.0.3", "info": {"title": "Long", "version": "1"},
                       "paths": {LONG_PATH: {"post": operation}}}).encode()


@pytest.fixture
def tools(project):
    ToolProviderFactory(project=project, name="demo-shop", spec=demo_spec_bytes())
    ToolProviderFactory(project=project, name=LONG_PROVIDER, spec=long_spec())


def test_every_column_of_the_tools_list_fits_at_1366(logged_in_page, tools):
    page = logged_in_page
    changelist_at_1366(page, "/admin/tools/tool/", rows=6, shot="tools-list-1366.png")
    assert_changelist_fits(page, last_header="enabled")
    endpoint = page.locator("#result_list tbody tr", has_text=LONG_TOOL).locator(".bh-endpoint")
    assert endpoint.get_attribute("title") == f"POST {LONG_PATH}"
