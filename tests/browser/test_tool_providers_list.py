"""The Tool providers list in Chromium at 1366×768, the admin's sidebar and filters open: every column
fits in the list's box, the last one included, also beside a provider name and a base URL as long as
they may be (a URL cut short has the whole of it in its title). The list once ran about 350 px past its
box, where the last columns were behind a scrollbar. Screenshots land in /tmp/shots/."""

from __future__ import annotations

import pytest

from apps.demo_business.spec import demo_spec_bytes
from tests.browser.layout import assert_changelist_fits, changelist_at_1366
from tests.tools.factories import ToolProviderFactory

LONG_PROVIDER = "p" * 64
LONG_URL = "https://" + "warehouse-inventory-reconciliation." * 4 + "example/" + "segment-without-breaks" * 8


@pytest.fixture
def providers(project):
    ToolProviderFactory(project=project, name="demo-shop", spec=demo_spec_bytes())
    ToolProviderFactory(project=project, name=LONG_PROVIDER, base_url=LONG_URL)


def test_every_column_of_the_tool_providers_list_fits_at_1366(logged_in_page, providers):
    page = logged_in_page
    changelist_at_1366(page, "/admin/tools/toolprovider/", rows=2, shot="tool-providers-list-1366.png")
    assert_changelist_fits(page, last_header="compiled")
    url = page.locator("#result_list tbody tr", has_text=LONG_PROVIDER).locator(".bh-url")
    assert url.get_attribute("title") == LONG_URL
