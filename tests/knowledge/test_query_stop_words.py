"""A query's keyword terms leave English stop words out (the index keeps them): in a small KB a
shared "to" or "at" outweighed the words that matter."""

from __future__ import annotations

import pytest

from apps.knowledge.pipeline.retrieve import SearchOptions, search
from apps.knowledge.pipeline.terms import query_terms
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts

HOURS = "# Store hours\n\nOpen at 9 in the morning, close to 8 at night. Come to us at any time to see the store."
RETURNS = "# Returns\n\nAn item can be returned within 30 days of delivery for a full refund."
SHIPPING = "# Shipping\n\nOrders ship in two days; express delivery costs extra."


def test_stop_words_leave_the_query_unless_nothing_else_is_left():
    assert query_terms("How long do I have to return an item at the store?") == [
        "how", "long", "do", "i", "have", "return", "item", "store"]
    assert query_terms("to be or not to be") == ["to", "be", "or", "not"]  # nothing else: kept
    assert query_terms("退货 at the store") == ["退", "货", "退货", "store"]


@pytest.mark.django_db
def test_in_a_small_kb_the_keyword_channel_ranks_by_the_words_that_matter():
    kb = KnowledgeBaseFactory()
    documents = ingest_texts(kb, {"hours.md": HOURS, "returns.md": RETURNS, "shipping.md": SHIPPING})
    result = search(kbs=[kb], query="How long do I have to return an item?",
                    options=SearchOptions(mode="keyword", top_k=3, rollup=False, explain=True))
    assert result.hits[0].document_id == documents["returns.md"].pk
    assert documents["hours.md"].pk not in {hit.document_id for hit in result.hits}  # it shares only "to"
