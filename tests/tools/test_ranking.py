from apps.tools.ranking import RankText, lexical_order, query_clean


def _names(query, tools):
    return [tools[i].name for i in lexical_order(query, tools)]


def _tool(name, scope="", description=""):
    return RankText(name=name, scope=scope, description=description)


def test_an_exact_name_comes_first():
    tools = [_tool("order_status_history"), _tool("order_status"), _tool("a_order_status")]
    assert _names("order_status", tools)[0] == "order_status"


def test_a_name_containing_the_query_beats_a_description_containing_it():
    tools = [_tool("lookup", description="Refund lookup for an order"), _tool("refund_lookup")]
    assert _names("refund lookup", tools) == ["refund_lookup", "lookup"]


def test_the_query_inside_the_text_beats_scattered_words():
    tools = [_tool("b_tool", description="stock of a product, adjust later"),
             _tool("c_tool", description="adjust stock for a product")]
    assert _names("adjust stock", tools) == ["c_tool", "b_tool"]


def test_a_word_in_the_name_weighs_more_than_in_the_scope_and_the_scope_more_than_the_description():
    tools = [_tool("x_desc", description="refund"), _tool("x_scope", scope="orders.refund"),
             _tool("refund_x")]
    assert _names("refund please", tools) == ["refund_x", "x_scope", "x_desc"]


def test_a_chinese_query_ranks_by_shared_bigrams():
    tools = [_tool("a_tool", description="查询商品价格"), _tool("b_tool", description="调整库存数量")]
    assert _names("帮我调整一下库存", tools) == ["b_tool", "a_tool"]


def test_ties_are_broken_by_name_and_zero_scores_are_kept():
    tools = [_tool("zeta"), _tool("alpha"), _tool("mid")]
    assert _names("nothing matches", tools) == ["alpha", "mid", "zeta"]


def test_matching_ignores_case_and_separators():
    tools = [_tool("other"), _tool("Order_Status")]
    assert _names("ORDER STATUS", tools) == ["Order_Status", "other"]


def test_the_order_is_deterministic():
    tools = [_tool(f"tool_{i}", description="order stock refund"[: i % 17]) for i in range(40)]
    assert lexical_order("order stock", tools) == lexical_order("order stock", list(tools))


def test_query_clean_removes_control_characters_and_trims():
    assert query_clean(" \x00refund\x07 order\nnow\t\x9f ") == "refund order now"


def test_query_clean_drops_lone_surrogates():
    assert query_clean("a\ud800b") == "ab"


def test_a_verb_counts_as_a_query_word():
    # "get" in a name weighs 3, "thing" in a description 1: the contract's tier 4.
    tools = [_tool("list_orders", description="A thing"), _tool("get_item", description="An item")]
    assert _names("get thing", tools) == ["get_item", "list_orders"]


def test_stop_words_do_not_rank():
    # Were "the" a word, a_tool would tie on words and win on shared bigrams.
    tools = [_tool("a_tool", description="the efor theo"), _tool("b_tool", description="fork")]
    assert _names("the fork", tools) == ["b_tool", "a_tool"]
