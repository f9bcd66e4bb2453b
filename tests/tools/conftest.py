# The suite's tool secret key (tests/conftest.py sets it for every test), for rows built outside a
# test's own settings, such as module-scoped worlds.
from tests.conftest import TOOL_SECRET_KEY as TEST_SECRET_KEY
from tests.projects.console_fixtures import browser, owner
from tests.tools.approval_fixtures import approval, issued, route

__all__ = ["TEST_SECRET_KEY", "approval", "browser", "issued", "owner", "route"]
