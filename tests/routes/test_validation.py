"""Every route validation rule, with the message an operator sees; a refused route writes nothing."""

import pytest
from django.core.exceptions import ValidationError

from apps.routes.models import Route
from apps.routes.services import TOOL_NAME_LISTS, route_create, route_update
from tests.projects.factories import ProjectFactory
from tests.routes.factories import RouteFactory

pytestmark = pytest.mark.django_db

KEY_FORMAT = (
    "Route keys are 2–64 characters of lower-case letters, digits, '_' or '-', starting with a letter or digit."
)

CASES = [
    # (field, value, extra settings, message)
    ("key", "A-upper", {}, KEY_FORMAT),
    ("key", "-leading", {}, KEY_FORMAT),
    ("key", "x", {}, KEY_FORMAT),
    ("key", "has space", {}, KEY_FORMAT),
    ("key", "trailing-newline\n", {}, KEY_FORMAT),
    ("key", "k" * 65, {}, "Ensure this value has at most 64 characters (it has 65)."),
    ("key", "auto", {}, "'auto' is reserved and cannot be a route key."),
    ("name", "", {}, "This field cannot be blank."),
    ("name", "n" * 257, {}, "Ensure this value has at most 256 characters (it has 257)."),
    ("description", "d" * 2001, {}, "Ensure this value has at most 2000 characters (it has 2001)."),
    ("system_prompt", "p" * 79_001, {}, "Ensure this value has at most 79000 characters (it has 79001)."),
    ("agent_client_instructions", "i" * 20_001, {},
     "Ensure this value has at most 20000 characters (it has 20001)."),
    ("agent_client_active_tool_limit", 0, {}, "Ensure this value is greater than or equal to 1."),
    ("agent_client_active_tool_limit", 13, {}, "Ensure this value is less than or equal to 12."),
    ("system_info_name", "n" * 121, {"system_info_summary": "s"},
     "Ensure this value has at most 120 characters (it has 121)."),
    ("system_info_summary", "s" * 401, {"system_info_name": "n"},
     "Ensure this value has at most 400 characters (it has 401)."),
    ("system_info_domains", ["d"] * 7, {"system_info_name": "n", "system_info_summary": "s"},
     "At most 6 items are allowed."),
    ("system_info_domains", ["ok", "d" * 121], {"system_info_name": "n", "system_info_summary": "s"},
     "Item 2 is longer than 120 characters."),
    ("system_info_domains", ["ok", " "], {"system_info_name": "n", "system_info_summary": "s"},
     "Item 2 is empty."),
    ("system_info_boundaries", ["b" * 161], {"system_info_name": "n", "system_info_summary": "s"},
     "Item 1 is longer than 160 characters."),
    ("system_info_boundaries", ["b"] * 7, {"system_info_name": "n", "system_info_summary": "s"},
     "At most 6 items are allowed."),
    ("system_info_name", "", {"system_info_summary": "A summary"}, "System info needs a name."),
    ("system_info_summary", "", {"system_info_name": "A name"}, "System info needs a summary."),
    ("write_tools", ["*"], {}, "Wildcards are not allowed: list exact operationIds (found '*')."),
    ("write_tools", ["orders_*"], {}, "Wildcards are not allowed: list exact operationIds (found 'orders_*')."),
    ("write_tools", ["1order"], {},
     "'1order' is not a valid operationId (letters, digits and '_', at most 64, not starting with a digit)."),
    ("write_tools", ["order_update", "order_update"], {}, "'order_update' is listed twice."),
    ("write_tools", ["order_update\n"], {},
     "'order_update\n' is not a valid operationId (letters, digits and '_', at most 64, not starting with a digit)."),
    ("force_approval_tools", ["*"], {}, "Wildcards are not allowed: list exact operationIds (found '*')."),
    ("unattended_write_tools", ["*"], {"write_tools": ["a"]},
     "Wildcards are not allowed: list exact operationIds (found '*')."),
    ("unattended_write_tools", ["order_update"], {"write_tools": ["order_update"], "force_approval_tools": ["x"]},
     "The legacy unattended write tools cannot be combined with force approval tools. "
     "Clear the unattended write tools (a blank field; null in the API) and list the write tools that need approval "
     "in force approval tools instead."),
    ("unattended_write_tools", [], {"force_approval_tools": ["x"]},
     "The legacy unattended write tools cannot be combined with force approval tools. "
     "Clear the unattended write tools (a blank field; null in the API) and list the write tools that need approval "
     "in force approval tools instead."),
    ("unattended_write_tools", ["stock_adjust"], {"write_tools": ["order_update"]},
     "Every unattended write tool must also be a write tool; not in write tools: stock_adjust."),
    ("allowed_audiences", [], {"audience_policy": "listed"}, "List at least one audience, or admit any principal."),
    ("allowed_audiences", ["has space"], {"audience_policy": "listed"},
     "'has space' is not a valid audience (1–64 characters, no spaces)."),
    ("max_tool_calls", 51, {}, "Ensure this value is less than or equal to 50."),
    ("knowledge_top_k", 0, {}, "Ensure this value is greater than or equal to 1."),
    ("knowledge_top_k", 51, {}, "Ensure this value is less than or equal to 50."),
    ("knowledge_max_docs", 0, {}, "Ensure this value is greater than or equal to 1."),
    ("knowledge_max_docs", 21, {}, "Ensure this value is less than or equal to 20."),
    ("knowledge_score_threshold", -0.1, {}, "Ensure this value is greater than or equal to 0.0."),
    ("knowledge_score_threshold", 1.5, {}, "Ensure this value is less than or equal to 1.0."),
    ("knowledge_mode", "everything", {}, "Value 'everything' is not a valid choice."),
    ("memory_recent_messages", 101, {}, "Ensure this value is less than or equal to 100."),
    ("memory_recent_budget_chars", 64_001, {}, "Ensure this value is less than or equal to 64000."),
    ("memory_per_message_chars", 0, {}, "Ensure this value is greater than or equal to 1."),
    ("memory_per_message_chars", 3000, {"memory_recent_budget_chars": 2000},
     "Characters per message cannot exceed the recent-messages budget."),
    ("memory_summary_max_chars", 8001, {}, "Ensure this value is less than or equal to 8000."),
    ("audience_policy", "nobody", {}, "Value 'nobody' is not a valid choice."),
    ("permission", "root", {}, "Value 'root' is not a valid choice."),
]


# Tool name lists are set through apps.tools.route_tools.route_tools_set, which runs the model's
# validation (below) besides its checks against the route's tool sources.
TOOL_CASES = [case for case in CASES if TOOL_NAME_LISTS & {case[0], *case[2]}]
SERVICE_CASES = [case for case in CASES if case not in TOOL_CASES]


@pytest.mark.parametrize(
    ("field", "value", "extra", "message"), SERVICE_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(SERVICE_CASES)]
)
def test_route_create_refuses_invalid_settings(field, value, extra, message):
    project = ProjectFactory()
    settings = {"key": "valid-key", "name": "Valid", **extra, field: value}
    key, name = settings.pop("key"), settings.pop("name")

    with pytest.raises(ValidationError) as caught:
        route_create(project=project, key=key, name=name, **settings)

    assert message in caught.value.message_dict[field]
    assert Route.objects.count() == 0


@pytest.mark.parametrize(
    ("field", "value", "extra", "message"), TOOL_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(TOOL_CASES)]
)
def test_the_model_refuses_invalid_tool_name_lists(field, value, extra, message):
    route = Route(project=ProjectFactory(), key="valid-key", name="Valid", **{**extra, field: value})

    with pytest.raises(ValidationError) as caught:
        route.full_clean()

    assert message in caught.value.message_dict[field]


@pytest.mark.parametrize("field", sorted(TOOL_NAME_LISTS))
def test_route_services_leave_tool_names_to_route_tools_set(field):
    route = RouteFactory()

    with pytest.raises(TypeError, match="route_tools_set"):
        route_update(route=route, **{field: ["order_update"]})
    with pytest.raises(TypeError, match="route_tools_set"):
        route_create(project=route.project, key="another", name="Another", **{field: ["order_update"]})
    assert Route.objects.count() == 1


def test_route_key_is_unique_per_project():
    existing = RouteFactory(key="store-assistant")

    with pytest.raises(ValidationError) as caught:
        route_create(project=existing.project, key="store-assistant", name="Again")

    assert caught.value.messages == ["A route with this key already exists in this project."]
    assert Route.objects.count() == 1


def test_the_same_key_is_allowed_in_another_project():
    RouteFactory(key="store-assistant")
    other = route_create(project=ProjectFactory(), key="store-assistant", name="Other")
    assert other.pk is not None
    assert Route.objects.filter(key="store-assistant").count() == 2


def test_a_refused_update_leaves_the_stored_route_unchanged():
    route = RouteFactory(knowledge_top_k=5)

    with pytest.raises(ValidationError):
        route_update(route=route, knowledge_top_k=0, name="Changed")

    route.refresh_from_db()
    assert route.knowledge_top_k == 5
    assert route.name != "Changed"


def test_defaults_follow_the_spec():
    route = route_create(project=ProjectFactory(), key="defaults", name="Defaults")
    assert (route.memory_recent_messages, route.memory_recent_budget_chars, route.memory_per_message_chars,
            route.memory_summary_enabled, route.memory_summary_max_chars) == (12, 8000, 2000, False, 1200)
    assert route.agent_client_active_tool_limit == 8
    assert route.unattended_write_tools is None
    assert (route.knowledge_top_k, route.knowledge_max_docs, route.knowledge_mode) == (5, 4, "chunk")


def test_valid_legacy_unattended_write_tools_are_accepted():
    route = Route(project=ProjectFactory(), key="legacy", name="Legacy",
                  write_tools=["order_update", "stock_adjust"], unattended_write_tools=["order_update"])
    route.full_clean()
    assert route.unattended_write_tools == ["order_update"]
