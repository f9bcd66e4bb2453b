"""Semantic capability search: the tool index (apps.tools.semantic), its freshness, and the order
it gives. The real local model (multilingual-e5-small, loaded in well under a second) embeds,
except where a test changes the configured embedder."""

from io import StringIO

import pytest
from django.core.management import call_command

from apps.knowledge.services import route_knowledge_bind
from apps.routes.services import route_update
from apps.tools import semantic
from apps.tools.catalog import capability_search
from apps.tools.models import ToolEmbedding
from apps.tools.ranking import lexical_order
from apps.tools.route_tools import SourceSpec, route_tools_set
from apps.tools.services import provider_reimport
from apps.tools.surface import route_surface
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.routes.factories import RouteFactory
from tests.tools.factories import STORE_SPEC, ToolProviderFactory
from tests.tools.surface_helpers import STORE_TOOLS, store_spec_with

pytest_plugins = ["tests.tools.surface_fixtures"]

PARAPHRASE = "we received more units, update inventory"


@pytest.fixture
def route(db):
    return RouteFactory(key="store-assistant", tools_direct_enabled=True)


@pytest.fixture
def indexed_route(tool_route, store_provider):
    semantic.index_rebuild(provider_id=store_provider.pk)
    return tool_route


def _search(route, query, limit=8):
    return capability_search(surface=route_surface(route=route, session=None), query=query, limit=limit)


def _names(answer):
    return [tool["name"] for tool in answer["tools"]]


def _lexical_names(route, query):
    surface = route_surface(route=route, session=None)
    return [surface.tools[i].name for i in lexical_order(query, [tool.rank_text for tool in surface.tools])]


def test_the_index_text_splits_the_name_and_carries_parameters_and_guidance():
    text = semantic.index_text({
        "name": "listRepoForks", "summary": "Forks", "description": "Forks", "when_to_use": "Someone copied it",
        "tags": ["repos"], "path": "/repos/{owner}/{repo}/forks",
        "input_schema": {"type": "object", "properties": {"per_page": {"type": "integer", "description": "Page size"}}},
    })
    assert text == ("list repo forks. Forks. Someone copied it. Topics: repos. Path: repos forks. "
                    "Parameters: per page (Page size).")


def test_a_rebuild_indexes_every_tool_with_its_text_hash(store_provider):
    outcome = semantic.index_rebuild(provider_id=store_provider.pk)
    rows = {row.tool.name: row for row in ToolEmbedding.objects.select_related("tool")}
    assert outcome == {"tools": 5, "embedded": 5, "dropped": 0}
    assert sorted(rows) == sorted(STORE_TOOLS)
    assert {row.model for row in rows.values()} == {"local:multilingual-e5-small:384"}
    tool = store_provider.tools.get(name="order_refund")
    assert rows["order_refund"].text_sha256 == semantic.text_sha256(semantic.index_text(tool.compiled))
    assert len(rows["order_refund"].embedding) == 384


def test_a_second_rebuild_embeds_nothing(store_provider):
    semantic.index_rebuild(provider_id=store_provider.pk)
    assert semantic.index_rebuild(provider_id=store_provider.pk) == {"tools": 5, "embedded": 0, "dropped": 0}


def test_without_an_index_the_search_is_lexical(tool_route):
    answer = _search(tool_route, PARAPHRASE)
    assert answer["discovery"]["ranking"] == "lexical"
    assert _names(answer) == _lexical_names(tool_route, PARAPHRASE)


def test_with_every_tool_indexed_the_search_is_semantic(indexed_route):
    assert _search(indexed_route, PARAPHRASE)["discovery"]["ranking"] == "semantic"


def test_a_paraphrase_finds_the_tool_semantically_that_the_lexical_order_misses(indexed_route):
    assert _lexical_names(indexed_route, PARAPHRASE)[0] != "stock_adjust"
    assert _names(_search(indexed_route, PARAPHRASE))[0] == "stock_adjust"


def test_one_stale_tool_text_makes_the_whole_search_lexical(indexed_route, store_provider):
    provider_reimport(provider=store_provider, spec=store_spec_with("summary: Adjust stock",
                                                                    "summary: Adjust the stock level"))
    answer = _search(indexed_route, PARAPHRASE)
    assert answer["discovery"]["ranking"] == "lexical"
    assert _names(answer) == _lexical_names(indexed_route, PARAPHRASE)


def test_a_missing_index_row_makes_the_whole_search_lexical(indexed_route):
    ToolEmbedding.objects.filter(tool__name="customer_note").delete()  # not on the surface: no effect
    assert _search(indexed_route, PARAPHRASE)["discovery"]["ranking"] == "semantic"
    ToolEmbedding.objects.filter(tool__name="order_status").delete()
    assert _search(indexed_route, PARAPHRASE)["discovery"]["ranking"] == "lexical"


def test_a_rebuild_after_a_reimport_makes_the_search_semantic_again(indexed_route, store_provider):
    provider_reimport(provider=store_provider, spec=store_spec_with("summary: Adjust stock",
                                                                    "summary: Adjust the stock level"))
    outcome = semantic.index_rebuild(provider_id=store_provider.pk)
    assert outcome["embedded"] == 1
    assert _search(indexed_route, PARAPHRASE)["discovery"]["ranking"] == "semantic"


def test_another_embedder_makes_the_index_stale_until_rebuilt(indexed_route, store_provider, settings):
    settings.TOOL_EMBEDDER = {"provider": "hashing", "name": "hash-test", "dimension": 64}
    assert _search(indexed_route, PARAPHRASE)["discovery"]["ranking"] == "lexical"
    outcome = semantic.index_rebuild(provider_id=store_provider.pk)
    assert (outcome["embedded"], outcome["dropped"]) == (5, 5)
    assert set(ToolEmbedding.objects.values_list("model", flat=True)) == {"hashing:hash-test:64"}
    assert _search(indexed_route, PARAPHRASE)["discovery"]["ranking"] == "semantic"


def test_an_embedder_that_cannot_embed_leaves_the_search_lexical(indexed_route, settings):
    settings.TOOL_EMBEDDER = {"provider": "openai", "name": "none", "dimension": 384, "options": {}}
    semantic.ToolEmbedding.objects.update(model="openai:none:384")
    answer = _search(indexed_route, "refund the order please")
    assert answer["discovery"]["ranking"] == "lexical"
    assert _names(answer) == _lexical_names(indexed_route, "refund the order please")


def test_the_semantic_order_is_the_same_on_every_search(indexed_route):
    semantic._QUERY_CACHE.clear()
    first = _names(_search(indexed_route, "has my parcel left the warehouse"))
    semantic._QUERY_CACHE.clear()
    assert _names(_search(indexed_route, "has my parcel left the warehouse")) == first
    assert sorted(first) == sorted(["product_lookup", "order_status", "stock_adjust", "order_refund"])


def test_fusion_breaks_ties_by_name():
    names = ["b_tool", "a_tool", "c_tool"]
    order = semantic.fused_order(names=names, lexical=[0, 1, 2], lexical_matched=0, semantic=[0.5, 0.5, 0.5])
    assert [names[i] for i in order] == ["a_tool", "b_tool", "c_tool"]


def test_fusion_lifts_a_lexical_match_over_a_close_semantic_neighbour():
    names = ["order_refund", "order_status"]
    order = semantic.fused_order(names=names, lexical=[1, 0], lexical_matched=1, semantic=[0.81, 0.80])
    assert [names[i] for i in order] == ["order_status", "order_refund"]


def test_the_built_in_knowledge_tools_rank_without_index_rows(indexed_route, store_provider):
    route_update(route=indexed_route, knowledge_enabled=True)
    route_knowledge_bind(route=indexed_route, knowledge_base=KnowledgeBaseFactory(project=indexed_route.project))
    answer = _search(indexed_route, "look something up in our handbook", limit=12)
    assert answer["discovery"]["ranking"] == "semantic"
    assert {"kb_search", "kb_read"} <= set(_names(answer))


def test_a_surface_from_two_providers_needs_both_indexed(indexed_route, store_provider):
    other = ToolProviderFactory(project=indexed_route.project, name="store-two",
                                spec=STORE_SPEC.replace(b"operationId: order_status", b"operationId: order_state"))
    route_tools_set(route=indexed_route, sources=[
        SourceSpec(provider=store_provider, allowed_tools=STORE_TOOLS),
        SourceSpec(provider=other, allowed_tools=["order_state"]),
    ])
    assert _search(indexed_route, PARAPHRASE)["discovery"]["ranking"] == "lexical"
    semantic.index_rebuild(provider_id=other.pk)
    assert _search(indexed_route, PARAPHRASE)["discovery"]["ranking"] == "semantic"


def test_the_keyword_channel_ranks_by_bm25_over_stemmed_terms():
    names = ["order_refund", "order_status", "stock_adjust"]
    index = semantic.KeywordIndex(["Refund an order.", "Order status.", "Adjust stock."])
    order, matched = index.ranking("refunds for my orders", names)
    assert ([names[i] for i in order], matched) == (["order_refund", "order_status", "stock_adjust"], 2)


def test_the_rebuild_command_indexes_every_provider(store_provider):
    out = StringIO()
    call_command("tools_index_rebuild", stdout=out)
    assert ToolEmbedding.objects.filter(tool__provider=store_provider).count() == 5
    assert out.getvalue().endswith("store: 5 tools, 5 embedded with local:multilingual-e5-small:384\n")
