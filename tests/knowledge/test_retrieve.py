"""The retrieval engine on small fixed corpora, through the real ingestion pipeline (in-process)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.knowledge import selectors, services
from apps.knowledge.models import Document, EmbeddingModel, IndexGeneration, KeywordTermStat
from apps.knowledge.pipeline import index
from apps.knowledge.pipeline.keyword_channel import stored_frequencies
from apps.knowledge.pipeline.retrieve import SearchOptions, search
from apps.knowledge.pipeline.rollup import utf8_window
from apps.knowledge.pipeline.terms import keyword_terms, term_frequencies
from tests.knowledge.factories import EmbeddingModelFactory, KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def e5_model(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        model = EmbeddingModel.objects.filter(provider="local").first()
        yield model or services.embedding_model_register(name="e5-test", provider="local", dimension=384)


CORPUS = {
    "sic.md": "# 材料\n\n碳化硅功率器件的耐压等级可以达到一千二百伏。",
    "refund.md": "# Policy\n\nThe refund window is seven days after delivery. Items must be unused.",
    "weather.md": "# Weather\n\nIt will rain heavily in the mountains this weekend.",
    "cats.md": "# Pets\n\nCats sleep for most of the day and hunt at night.",
}


@pytest.fixture
def semantic_kb(e5_model):
    kb = KnowledgeBaseFactory(embedding_model=e5_model)
    docs = ingest_texts(kb, CORPUS)
    return kb, docs


def _doc_ids(result):
    return [hit.document_id for hit in result.hits]


def test_a_chinese_keyword_query_is_found_by_the_keyword_channel(semantic_kb):
    kb, docs = semantic_kb
    result = search(kbs=[kb], query="碳化硅", options=SearchOptions(mode="keyword", top_k=3, explain=True))
    assert _doc_ids(result) == [docs["sic.md"].pk]
    assert {"碳化", "化硅", "碳", "化", "硅"} <= set(result.hits[0].explain["matched_terms"])
    assert result.hits[0].explain["keyword"]["rank"] == 1


def test_a_paraphrase_is_found_only_by_the_vector_channel(semantic_kb):
    kb, docs = semantic_kb
    query = "How long do I have to return a purchase?"
    keyword = search(kbs=[kb], query=query, options=SearchOptions(mode="keyword", top_k=3))
    vector = search(kbs=[kb], query=query, options=SearchOptions(mode="vector", top_k=1))
    assert docs["refund.md"].pk not in _doc_ids(keyword)
    assert _doc_ids(vector) == [docs["refund.md"].pk]


def test_hybrid_finds_both_kinds(semantic_kb):
    kb, docs = semantic_kb
    exact = search(kbs=[kb], query="碳化硅", options=SearchOptions(mode="hybrid", top_k=1))
    paraphrase = search(kbs=[kb], query="How long do I have to return a purchase?",
                        options=SearchOptions(mode="hybrid", top_k=1))
    assert _doc_ids(exact) == [docs["sic.md"].pk]
    assert _doc_ids(paraphrase) == [docs["refund.md"].pk]


def test_hybrid_explains_each_channel(semantic_kb):
    kb, _ = semantic_kb
    result = search(kbs=[kb], query="refund window", options=SearchOptions(mode="hybrid", top_k=1, explain=True))
    explain = result.hits[0].explain
    assert explain["keyword"]["rank"] == 1 and explain["vector"]["rank"] == 1
    assert explain["matched_terms"] == ["refund", "window"]
    assert explain["fused_score"] == pytest.approx(1.0)


def test_vector_threshold_applies_to_cosine_and_returns_fewer_rather_than_worse(semantic_kb):
    kb, _ = semantic_kb
    everything = search(kbs=[kb], query="refund window", options=SearchOptions(mode="vector", top_k=4))
    cut = (everything.hits[0].score + everything.hits[1].score) / 2
    limited = search(kbs=[kb], query="refund window",
                     options=SearchOptions(mode="vector", top_k=4, score_threshold=cut))
    assert len(everything.hits) == 4
    assert [h.chunk_id for h in limited.hits] == [everything.hits[0].chunk_id]
    assert all(h.score >= cut for h in limited.hits)


def test_hybrid_threshold_applies_to_the_fused_score_times_answerability(semantic_kb):
    kb, _ = semantic_kb
    everything = search(kbs=[kb], query="refund window", options=SearchOptions(mode="hybrid", top_k=4, explain=True))
    top = everything.hits[0]
    probability = top.explain["answerability"]
    assert top.explain["fused_score"] == pytest.approx(1.0)
    assert probability > 0.9 and top.score == pytest.approx(probability, abs=1e-6)
    assert [signal.probability for signal in everything.answerability] == [probability]
    limited = search(kbs=[kb], query="refund window",
                     options=SearchOptions(mode="hybrid", top_k=4, score_threshold=0.99 * probability))
    assert len(everything.hits) > 1
    assert [h.chunk_id for h in limited.hits] == [top.chunk_id]


# Nothing in CORPUS says anything about these.
UNCOVERED = ["量子色动力学中的渐近自由是谁发现的", "How do I rotate the TLS certificate of a Kubernetes ingress?"]


@pytest.mark.parametrize("query", UNCOVERED)
def test_a_question_the_kb_does_not_cover_scores_low_and_a_threshold_cuts_it(semantic_kb, query):
    kb, _ = semantic_kb
    everything = search(kbs=[kb], query=query, options=SearchOptions(mode="hybrid", top_k=4, explain=True))
    assert everything.hits, "without a threshold the best candidates still come back"
    assert everything.answerability[0].probability < 0.2
    assert all(hit.score < 0.2 for hit in everything.hits)
    assert everything.hits[0].explain["fused_score"] > 0.5  # relative to the others, as before
    cut = search(kbs=[kb], query=query, options=SearchOptions(mode="hybrid", top_k=4, score_threshold=0.5))
    assert cut.hits == []
    covered = search(kbs=[kb], query="碳化硅器件的耐压", options=SearchOptions(mode="hybrid", top_k=4,
                                                                             score_threshold=0.5))
    assert [hit.document_id for hit in covered.hits][:1] == [semantic_kb[1]["sic.md"].pk]


@pytest.mark.parametrize("query", ["你好，请问一下，碳化硅器件的耐压能到多少？麻烦告诉我，谢谢！",
                                   "Hi there! Quick question: how long is the refund window after delivery? Thanks!"])
def test_a_covered_question_typed_as_chat_keeps_its_hits_at_a_threshold(semantic_kb, query):
    kb, docs = semantic_kb
    result = search(kbs=[kb], query=query, options=SearchOptions(mode="hybrid", top_k=4, score_threshold=0.5))
    assert result.answerability[0].probability > 0.5
    assert result.hits[0].document_id in (docs["sic.md"].pk, docs["refund.md"].pk)


def test_answerability_scales_scores_without_changing_the_order(semantic_kb, monkeypatch):
    from apps.knowledge.pipeline import answerability

    kb, _ = semantic_kb
    options = SearchOptions(mode="hybrid", top_k=4, rollup=False)
    query = "cats hunting at night in the rain"
    scaled = search(kbs=[kb], query=query, options=options)
    monkeypatch.delitem(answerability.CALIBRATIONS, EmbeddingModel.Provider.LOCAL)
    relative = search(kbs=[kb], query=query, options=options)
    assert relative.answerability[0].probability is None
    probability = scaled.answerability[0].probability
    assert 0 < probability < 1
    assert [h.chunk_id for h in scaled.hits] == [h.chunk_id for h in relative.hits]
    assert [h.score for h in scaled.hits] == pytest.approx([h.score * probability for h in relative.hits], abs=1e-6)
    assert relative.hits[0].score == pytest.approx(1.0)


def test_a_model_without_a_calibration_keeps_relative_hybrid_scores():
    kb = KnowledgeBaseFactory()  # the hashing test model
    ingest_texts(kb, {"a.md": "# 甲\n\n退款政策说明。", "b.md": "# 乙\n\n天气预报。"})
    result = search(kbs=[kb], query="量子色动力学", options=SearchOptions(mode="hybrid", top_k=2, explain=True))
    assert result.answerability[0].probability is None
    assert result.hits[0].explain["answerability"] is None
    assert [hit.score for hit in result.hits] == [pytest.approx(hit.explain["fused_score"]) for hit in result.hits]


def test_scores_are_calibrated_only_when_every_group_carries_its_answerability(semantic_kb):
    kb, _ = semantic_kb
    query = "refund window"
    assert search(kbs=[kb], query=query, options=SearchOptions(mode="hybrid")).scores_calibrated is True
    assert search(kbs=[kb], query=query, options=SearchOptions(mode="vector")).scores_calibrated is False
    assert search(kbs=[kb], query=query, options=SearchOptions(mode="keyword")).scores_calibrated is False
    assert search(kbs=[kb], query=query, options=SearchOptions(mode="hybrid", fusion="rrf")).scores_calibrated is False
    hashing = KnowledgeBaseFactory()  # the hashing test model: relative scores
    ingest_texts(hashing, {"a.md": "# Policy\n\nThe refund window is short."})
    assert search(kbs=[hashing], query=query, options=SearchOptions(mode="hybrid")).scores_calibrated is False
    mixed = search(kbs=[kb, hashing], query=query, options=SearchOptions(mode="hybrid"))
    assert len(mixed.answerability) == 2 and mixed.scores_calibrated is False


def test_the_best_score_is_the_best_candidates_before_a_threshold(semantic_kb):
    kb, _ = semantic_kb
    everything = search(kbs=[kb], query="refund window", options=SearchOptions(mode="hybrid", top_k=4))
    assert everything.best_score == pytest.approx(everything.hits[0].score) and everything.best_score > 0.5
    cut = search(kbs=[kb], query="refund window", options=SearchOptions(mode="hybrid", top_k=4, score_threshold=1.0))
    assert cut.hits == [] and cut.best_score == pytest.approx(everything.best_score)


def test_term_statistics_follow_indexing_and_deletion():
    kb = KnowledgeBaseFactory()
    docs = ingest_texts(kb, {"a.md": "# 甲\n\n退款政策说明。", "b.md": "# 乙\n\n退款流程。"})
    generation = selectors.generation_active(kb=kb)

    def df(term):
        row = KeywordTermStat.objects.filter(generation=generation, term=term).values_list("df", flat=True)
        return row.first()

    assert (df("退款"), df("政策"), df("#n")) == (2, 1, 2)
    # Writing the same vectors again counts nothing twice.
    index.vectors_write(document_id=docs["a.md"].pk, generation_ids=[generation.pk], model=kb.embedding_model)
    assert (df("退款"), df("#n")) == (2, 2)
    services.document_delete(document=docs["a.md"])
    assert (df("退款"), df("政策"), df("#n")) == (1, 0, 1)


def _vector_entries(generation) -> list[dict[str, list[int] | None]]:
    """Each child's search vector of `generation` as {lexeme: positions}."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.id, u.lexeme, u.positions FROM knowledge_chunk c, unnest(c.search_vector) u "
            "WHERE c.generation_id = %s AND c.kind = 'child' ORDER BY c.id",
            [generation.pk],
        )
        entries: dict = {}
        for chunk_id, lexeme, positions in cursor.fetchall():
            entries.setdefault(chunk_id, {})[lexeme] = positions
    return list(entries.values())


def test_the_generation_lexeme_scopes_the_keyword_index():
    kb = KnowledgeBaseFactory()
    ingest_texts(kb, {"a.md": "退款政策"})
    generation = selectors.generation_active(kb=kb)
    (vector,) = _vector_entries(generation)
    assert vector.pop(index.generation_lexeme(generation.pk)) is None  # no frequency
    assert set(vector) == set(keyword_terms("退款政策"))


def test_the_keyword_index_stores_each_terms_frequency():
    kb = KnowledgeBaseFactory()
    text = "退款退款，退款政策。Refunds refund REFUNDED; 哈哈哈"
    ingest_texts(kb, {"a.txt": text})
    (vector,) = _vector_entries(selectors.generation_active(kb=kb))
    vector.pop(index.generation_lexeme(selectors.generation_active(kb=kb).pk))
    expected = term_frequencies(text, set(keyword_terms(text)))
    assert {term: positions[0] for term, positions in vector.items()} == dict(expected)
    assert all(len(positions) == 1 for positions in vector.values())
    # Counted as the text is read at search time: 退款 three times, the stem of every form three
    # times, 哈哈 once (str.count does not overlap), 哈 three times.
    assert (expected["退款"], expected["refund"], expected["哈哈"], expected["哈"]) == (3, 3, 1, 3)


def test_a_generation_indexed_before_stored_frequencies_ranks_the_same_by_recounting_text(semantic_kb, e5_model):
    kb, _docs = semantic_kb
    other = KnowledgeBaseFactory(embedding_model=e5_model)
    ingest_texts(other, {"rules.md": "# 规则\n\n退款须在七天内申请。The refund window closes after seven days."})
    queries = ["碳化硅器件耐压", "refund window days", "rain in the mountains", "猫 sleep", "退款 七天"]
    options = SearchOptions(mode="hybrid", top_k=4, explain=True)

    def ranking(kbs):
        """{query: hits}, and whether the keyword rows carried frequencies or text."""
        with CaptureQueriesContext(connection) as queries_run:
            hits = {query: [(hit.chunk_id, hit.score, hit.explain["keyword"]["score"], hit.explain["matched_terms"])
                            for hit in search(kbs=kbs, query=query, options=options).hits] for query in queries}
        # (Windows are always read by their stored frequencies: they are new with analyzer 3.)
        sql = " ".join(q["sql"] for q in queries_run.captured_queries if "knowledge_chunkwindow" not in q["sql"])
        # The keyword scorer's row columns: a row's filtered vector, or its text to recount.
        return hits, ("ts_filter(setweight(" in sql, "c.id, c.text, c.chapter_path, greatest(" in sql)

    stored, stored_paths = ranking([kb, other])
    assert stored_paths == (True, False)
    assert any(hits for hits in stored.values())
    # One of the two generations indexed before analyzer 3: the whole search recounts text.
    IndexGeneration.objects.filter(pk=selectors.generation_active(kb=other).pk).update(keyword_analyzer=2)
    assert ranking([kb, other]) == (stored, (False, True))
    assert ranking([kb])[1] == (True, False)
    IndexGeneration.objects.filter(pk=selectors.generation_active(kb=kb).pk).update(keyword_analyzer=2)
    assert ranking([kb, other]) == (stored, (False, True))


def test_stored_frequencies_read_a_filtered_vector():
    assert stored_frequencies("'国家':2A 'it''s':1A 'a\\\\b':7A") == {"国家": 2, "it's": 1, "a\\b": 7}
    assert stored_frequencies("") == {}


def test_hits_of_one_parent_merge_into_one_result():
    kb = KnowledgeBaseFactory(chunk_strategy={"strategy": "auto", "min_chars": 0, "max_chars": 32,
                                              "overlap_chars": 0})
    section = "退款第一条规定的内容在这里。退款第二条规定的内容在这里。退款第三条规定的内容在这里。"
    ingest_texts(kb, {"p.md": f"# 退款\n\n{section}\n\n# 其他\n\n天气晴朗。"})
    result = search(kbs=[kb], query="退款", options=SearchOptions(mode="keyword", top_k=5, explain=True))
    assert len(result.hits) == 1
    hit = result.hits[0]
    assert hit.chapter_path == "退款"
    assert hit.content == section
    assert hit.metadata["merged_chunks"] == len(hit.explain["merged_chunk_ids"]) > 1


def test_a_long_section_is_cut_around_the_hit_within_the_budget():
    filler = "无关内容。" * 400
    kb = KnowledgeBaseFactory(chunk_strategy={"strategy": "auto", "min_chars": 0, "max_chars": 64,
                                              "overlap_chars": 0})
    ingest_texts(kb, {"long.md": f"# 长章节\n\n{filler}碳化硅器件耐压很高。{filler}"})
    result = search(kbs=[kb], query="碳化硅", options=SearchOptions(mode="keyword", top_k=1, budget_bytes=300))
    content = result.hits[0].content
    assert "碳化硅器件耐压很高。" in content
    assert len(content.encode("utf-8")) <= 300
    assert result.hits[0].metadata["truncated"] is True
    lo, hi = result.hits[0].metadata["parent_window"]
    assert 0 < lo < hi < result.hits[0].metadata["parent_chars"]  # cut on both sides, around the hit


@pytest.mark.parametrize("budget", [1, 2, 3, 4, 5, 7, 10, 11])
def test_utf8_window_never_splits_a_character_and_keeps_the_hit(budget):
    text = "前文€😀碳化硅后文"
    start = text.index("碳")
    lo, hi = utf8_window(text, start=start, end=start + 1, budget=budget)
    piece = text[lo:hi]
    assert len(piece.encode("utf-8")) <= budget
    piece.encode("utf-8").decode("utf-8")
    assert ("碳" in piece) == (budget >= 3)


def test_utf8_window_grows_on_both_sides_of_the_hit():
    text = "a" * 50 + "HIT" + "b" * 50
    lo, hi = utf8_window(text, start=50, end=53, budget=13)
    assert text[lo:hi] == "aaaaaHITbbbbb"


def test_several_kbs_with_different_models_merge_by_rank():
    small_model = EmbeddingModelFactory(dimension=32)
    other_model = EmbeddingModelFactory(dimension=48)
    kb_a = KnowledgeBaseFactory(embedding_model=small_model)
    kb_b = KnowledgeBaseFactory(embedding_model=other_model)
    docs_a = ingest_texts(kb_a, {"a.md": "退款政策：七天无理由退款。", "a2.md": "天气预报。"})
    docs_b = ingest_texts(kb_b, {"b.md": "退款流程：联系客服办理退款。", "b2.md": "猫咪喜欢睡觉。"})
    result = search(kbs=[kb_a, kb_b], query="退款", options=SearchOptions(mode="hybrid", top_k=2))
    assert set(_doc_ids(result)) == {docs_a["a.md"].pk, docs_b["b.md"].pk}


def test_route_search_uses_the_route_settings():
    from apps.knowledge.models import RouteKnowledgeBinding
    from tests.routes.factories import RouteFactory

    kb = KnowledgeBaseFactory()
    docs = ingest_texts(kb, {"a.md": "# 甲\n\n退款政策。", "b.md": "# 乙\n\n退款流程。", "c.md": "# 丙\n\n天气。"})
    route = RouteFactory(project=kb.project, knowledge_enabled=True, knowledge_top_k=5, knowledge_max_docs=1)
    RouteKnowledgeBinding.objects.create(route=route, knowledge_base=kb)
    hits = selectors.route_knowledge_search(route=route, query="退款")
    assert len(hits) == 1
    assert hits[0].document_id in {docs["a.md"].pk, docs["b.md"].pk}
    route.knowledge_enabled = False
    assert selectors.route_knowledge_search(route=route, query="退款") == []


def _candidates(keyword: list[float], dense: list[float]):
    from apps.knowledge.pipeline.candidates import Candidate

    out = []
    for i in range(max(len(keyword), len(dense))):
        c = Candidate(chunk_id=i)
        if i < len(keyword):
            c.keyword_rank, c.keyword_score = i + 1, keyword[i]
        if i < len(dense):
            c.vector_rank, c.vector_score = i + 1, dense[i]
        out.append(c)
    return out


def test_query_units_count_cjk_characters_and_words():
    from apps.knowledge.pipeline.fusion import query_units

    assert query_units("小米6防水等级") == 7
    assert query_units("How long is the refund window") == 6


def test_short_queries_lean_on_vectors_and_long_ones_on_keywords():
    from apps.knowledge.pipeline.fusion import adaptive_dense_weight

    even = _candidates([2.0, 1.0], [0.9, 0.8, 0.7])  # equal margins: the length decides
    assert adaptive_dense_weight(even, query="小米防水") == pytest.approx(0.85)
    assert adaptive_dense_weight(even, query="请问小米手机六的防水等级到底是多少呢谢谢大家") == pytest.approx(0.35)


def test_traditional_chinese_and_western_queries_have_their_own_base_weight_at_any_length():
    from apps.knowledge.pipeline.fusion import adaptive_dense_weight

    even = _candidates([2.0, 1.0], [0.9, 0.8, 0.7])
    # Traditional-only characters (發, 樣): e5-small's weak script leans on keywords, short or long.
    assert adaptive_dense_weight(even, query="手機防水") == pytest.approx(0.35)
    assert adaptive_dense_weight(even, query="請問小米手機六的防水等級到底是多少呢謝謝大家") == pytest.approx(0.35)
    # No CJK at all: one weight for every length.
    assert adaptive_dense_weight(even, query="refund window") == pytest.approx(0.6)
    assert adaptive_dense_weight(
        even, query="the refund window for unused items bought online is seven days after delivery"
    ) == pytest.approx(0.6)
    # Characters shared by both scripts (乾, 於) keep a Simplified query on the length schedule.
    assert adaptive_dense_weight(even, query="乾隆於") == pytest.approx(0.85)
    # Mixed Chinese and English follows the Chinese schedule.
    assert adaptive_dense_weight(even, query="iPhone防水") == pytest.approx(0.85)


def test_a_standout_keyword_hit_moves_the_weight_towards_keywords():
    from apps.knowledge.pipeline.fusion import adaptive_dense_weight

    flat_dense = [0.9 - 0.01 * i for i in range(21)]  # top-1 margin 0.05 of the band
    standout_keyword = _candidates([10.0, 1.0], flat_dense)
    flat_keyword = _candidates([10.0, 9.9], flat_dense)
    assert adaptive_dense_weight(standout_keyword, query="小米防水") < adaptive_dense_weight(
        flat_keyword, query="小米防水")


def test_a_mid_size_kb_reads_only_rare_postings_in_keyword_phase_one():
    """Every posting is read only for a small KB; a KB where the query's terms have thousands of
    postings keeps the rare-term cut (reading the common ones made a query 100+ ms)."""
    from apps.knowledge.pipeline import keyword_channel

    scorer = keyword_channel.KeywordScorer(terms=["的", "刑法"], df={"的": 5000, "刑法": 12},
                                           idf={"的": 0.01, "刑法": 5.0}, avg_length=100.0, n=6000)
    small = keyword_channel.KeywordScorer(terms=["的", "刑法"], df={"的": 40, "刑法": 3},
                                          idf={"的": 0.1, "刑法": 2.0}, avg_length=100.0, n=50)
    assert keyword_channel.phase1_terms(scorer) == ["刑法"]
    assert keyword_channel.phase1_terms(small) == ["刑法", "的"]


def test_hybrid_search_reads_postings_up_to_its_own_budget(semantic_kb, settings):
    """Phase 1 stops at the posting budget: keyword_posting_budget in keyword search,
    hybrid_keyword_posting_budget in hybrid search (the vector channel finds what more postings
    would)."""
    from apps.knowledge.pipeline import keyword_channel
    from apps.knowledge.pipeline.retrieval_settings import retrieval_settings

    rare = {f"t{i}": 1000 for i in range(6)}  # 1 % of the chunks each, 6,000 postings in all
    scorer = keyword_channel.KeywordScorer(terms=list(rare), df=rare, idf=dict.fromkeys(rare, 1.0), avg_length=50.0,
                                           n=100_000)
    settings.KNOWLEDGE_RETRIEVAL = {"keyword_posting_budget": 4500, "hybrid_keyword_posting_budget": 2500}
    assert len(keyword_channel.phase1_terms(scorer)) == 4
    scorer.posting_budget = retrieval_settings().hybrid_keyword_posting_budget
    assert len(keyword_channel.phase1_terms(scorer)) == 2

    kb, _docs = semantic_kb
    seen = {}
    real = keyword_channel.phase1_terms

    def watched(scorer):
        seen[scorer.posting_budget] = real(scorer)
        return seen[scorer.posting_budget]

    settings.KNOWLEDGE_RETRIEVAL = {"keyword_posting_budget": 7, "hybrid_keyword_posting_budget": 3}
    with pytest.MonkeyPatch.context() as patch:
        # Looked up in keyword_channel when phase 1 runs: patched there.
        patch.setattr(keyword_channel, "phase1_terms", watched)
        search(kbs=[kb], query="refund window", options=SearchOptions(mode="keyword", top_k=2))
        search(kbs=[kb], query="refund window", options=SearchOptions(mode="hybrid", top_k=2))
    assert set(seen) == {None, 3}


@pytest.mark.parametrize("mode", ["keyword", "vector", "hybrid"])
def test_chunks_of_a_document_whose_ingestion_is_not_completed_are_never_shown(semantic_kb, mode):
    kb, docs = semantic_kb
    options = SearchOptions(mode=mode, top_k=4)
    query = "refund window seven days"
    before = _doc_ids(search(kbs=[kb], query=query, options=options))
    assert docs["refund.md"].pk in before  # the premise
    Document.objects.filter(pk=docs["refund.md"].pk).update(status=Document.Status.EMBEDDING)

    assert _doc_ids(search(kbs=[kb], query=query, options=options)) == [d for d in before if d != docs["refund.md"].pk]


def test_hybrid_fusion_gives_every_candidate_both_channels_scores_in_three_reads_of_the_chunks(semantic_kb):
    """The vector channel reads its rows' BM25 and where they sit in its own query, the keyword
    channel likewise; one read of the candidates' windows; then one read of the shown rows. (Here
    the vector channel brings every chunk, so no keyword candidate lacks a cosine:
    tests/knowledge/test_parallel.py covers that read.)"""
    kb, _docs = semantic_kb
    with CaptureQueriesContext(connection) as queries_run:
        result = search(kbs=[kb], query="refund window 碳化硅", options=SearchOptions(mode="hybrid", top_k=4,
                                                                                    explain=True))
    assert len(result.hits) == 4
    for hit in result.hits:
        assert hit.explain["vector"]["score"] is not None
        assert hit.explain["keyword"]["score"] is not None
    assert {hit.explain["keyword"]["rank"] is None for hit in result.hits} == {True, False}  # both kinds
    chunk_reads = [q["sql"] for q in queries_run.captured_queries
                   if "knowledge_chunk" in q["sql"] and "knowledge_chunkwindow" not in q["sql"]]
    assert len(chunk_reads) == 3, chunk_reads
    window_reads = [q for q in queries_run.captured_queries if "knowledge_chunkwindow" in q["sql"]]
    assert len(window_reads) == 1, window_reads
    assert all(hit.explain["window"]["cosine"] is not None for hit in result.hits)
    # The shown rows' read brings their documents' status: no read of the documents alone.
    assert [q["sql"] for q in queries_run.captured_queries if 'FROM "knowledge_document"' in q["sql"]] == []


def test_keyword_candidates_bring_their_cosines_when_the_query_vector_comes_first(semantic_kb):
    """Inside a transaction the query is embedded first, so the keyword channel's read brings
    each candidate's cosine: no read of its own for the candidates the vector channel missed."""
    from apps.knowledge.pipeline.embedders import embedder_for
    from apps.knowledge.pipeline.vector_channel import vector_candidates

    kb, _docs = semantic_kb
    options = SearchOptions(mode="hybrid", top_k=4, candidate_k=2, explain=True)
    for query in ("refund window 碳化硅 rain", "cats hunt 耐压 weekend", "碳化硅 refund", "sleep rain delivery"):
        with CaptureQueriesContext(connection) as queries_run:
            result = search(kbs=[kb], query=query, options=options)
        if [hit for hit in result.hits if hit.explain["vector"]["rank"] is None]:
            break  # the premise: a candidate of the keyword channel alone
    else:
        pytest.fail("no query brought a keyword-only candidate")
    exact = {row[0]: row[1] for row in vector_candidates(
        model=kb.embedding_model, generation_ids=[selectors.generation_active(kb=kb).pk],
        query_vector=embedder_for(kb.embedding_model).embed_query(query), limit=100, indexed=[])}
    for hit in result.hits:
        assert hit.explain["vector"]["score"] == pytest.approx(exact[hit.chunk_id], abs=1e-6)
    sql = [q["sql"] for q in queries_run.captured_queries
           if "<=>" in q["sql"] and "knowledge_chunkwindow" not in q["sql"]]
    assert len(sql) == 2, sql  # the vector channel's, and the keyword channel's with the cosines
    assert not [q for q in sql if "WHERE id = ANY" in q]


def test_a_search_reads_the_active_generations_once_and_takes_the_kbs_as_the_caller_read_them(semantic_kb):
    """The KBs' settings and models come from the caller (loaded with select_related): the
    engine reads only which generation of each is active, in one query."""
    from apps.knowledge.models import KnowledgeBase

    kb, _docs = semantic_kb
    other = KnowledgeBaseFactory(embedding_model=kb.embedding_model)  # no generation: not searched
    kbs = list(KnowledgeBase.objects.filter(pk__in=[kb.pk, other.pk]).select_related("embedding_model"))
    with CaptureQueriesContext(connection) as queries_run:
        result = search(kbs=kbs, query="refund window", options=SearchOptions(mode="hybrid", top_k=2))
    assert result.hits and {hit.knowledge_base_id for hit in result.hits} == {kb.pk}
    sql = [q["sql"] for q in queries_run.captured_queries]
    assert len([q for q in sql if "knowledge_indexgeneration" in q]) == 1, sql
    assert [q for q in sql if "knowledge_knowledgebase" in q or "knowledge_embeddingmodel" in q] == []
    # A KB whose model the caller did not load reads it, and finds the same hits.
    fresh = KnowledgeBase.objects.get(pk=kb.pk)
    assert [hit.chunk_id for hit in search(kbs=[fresh], query="refund window",
                                           options=SearchOptions(mode="hybrid", top_k=2)).hits] == \
        [hit.chunk_id for hit in result.hits]


def test_a_chunk_disabled_after_the_channels_read_it_gives_its_place_to_the_next(semantic_kb):
    """The roll-up groups candidates on where the channels saw them; a chunk disabled (or
    deleted) since is not shown, and the next candidate takes its place. A candidate the
    channels did not place is placed by the roll-up itself."""
    from apps.knowledge.models import Chunk
    from apps.knowledge.pipeline.candidates import Candidate
    from apps.knowledge.pipeline.rollup import rollup

    kb, _docs = semantic_kb
    children = list(Chunk.objects.filter(document__knowledge_base=kb, kind="child").order_by("document__filename")
                    .values_list("id", "parent_id", "document_id"))
    assert len(children) == 4
    ranked = [Candidate(chunk_id=chunk_id, score=1.0 - i / 10, placement=(parent_id, document_id))
              for i, (chunk_id, parent_id, document_id) in enumerate(children)]
    ranked[3].placement = None

    def shown():
        return [hit.chunk_id for hit in rollup(ranked, top_k=2, max_docs=None, budget=4096, explain=False,
                                               rollup=True)]

    assert shown() == [children[0][0], children[1][0]]
    Chunk.objects.filter(pk=children[0][0]).update(disabled=True)
    Chunk.objects.filter(pk=children[1][0]).delete()
    assert shown() == [children[2][0], children[3][0]]
    # A document re-ingested since: its chunk is not shown, and nothing takes its place here.
    assert len({document_id for _chunk, _parent, document_id in children}) == 4  # the premise
    Document.objects.filter(pk=children[2][2]).update(status=Document.Status.EMBEDDING)
    assert shown() == [children[3][0]]
    Document.objects.filter(pk=children[2][2]).update(status=Document.Status.COMPLETED)
    assert shown() == [children[2][0], children[3][0]]


def test_keyword_phase_one_cuts_ties_by_text_so_two_ingests_of_the_same_texts_rank_alike(settings):
    """Phase 1 sends the chunks with the highest summed idf to exact BM25; the ones tied at its cut
    went by chunk id, a random UUID per ingestion, so two KBs of the same texts ranked differently
    (scifact: keyword nDCG@10 0.6839 / 0.6931 against 0.6832 / 0.6901, bench/README stop 40). Ties
    now go by the chunk's text hash: the same texts pass, whichever ingestion made them."""
    settings.KNOWLEDGE_RETRIEVAL = {"keyword_phase1_limit": 3, "search_candidates": 3}
    # Each holds zircon once (tied in phase 1) beside n other words (apart in BM25: a chunk's
    # length is its count of distinct terms).
    texts = {f"d{n:02}.md": "zircon " + " ".join(f"filler{i}" for i in range(n)) for n in range(1, 13)}
    ranked = []
    for _ in range(2):
        kb = KnowledgeBaseFactory()
        documents = ingest_texts(kb, texts)
        names = {document.pk: name for name, document in documents.items()}
        result = search(kbs=[kb], query="zircon", options=SearchOptions(mode="keyword", top_k=3))
        ranked.append([names[hit.document_id] for hit in result.hits])
        hashes = dict(kb.generations.get().chunks.filter(kind="child").values_list("document_id", "text_hash"))
        first_by_hash = {names[pk] for pk, _ in sorted(hashes.items(), key=lambda item: item[1])[:3]}
    assert ranked[0] == ranked[1]
    assert set(ranked[0]) == first_by_hash
    # BM25 orders the three it was given: the shorter text first.
    assert ranked[0] == sorted(ranked[0], key=lambda name: len(texts[name]))
