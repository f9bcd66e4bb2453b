"""Sentence windows: cut from each child, embedded and keyword-indexed with it, carried through
rebuilds, edits, keyword rewrites and deletions, and blended into hybrid fusion."""

from __future__ import annotations

import itertools

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.knowledge import rebuild, selectors, services
from apps.knowledge.models import Chunk, ChunkWindow, EmbeddingCache
from apps.knowledge.pipeline import index
from apps.knowledge.pipeline.candidates import Candidate
from apps.knowledge.pipeline.embedders import embedder_for
from apps.knowledge.pipeline.fusion import fuse, window_shares
from apps.knowledge.pipeline.index import embedding_text, search_terms_literal, text_hash
from apps.knowledge.pipeline.keyword_channel import bm25, keyword_scorer
from apps.knowledge.pipeline.retrieve import SearchOptions, search
from apps.knowledge.pipeline.terms import keyword_terms, term_frequencies
from apps.knowledge.pipeline.windows import WESTERN_SENTENCE_END, sentence_pieces, window_spans
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts

pytestmark = pytest.mark.django_db

TEXT = "甲乙丙。丁戊己庚！辛壬。\n子丑寅卯辰巳午未申酉。"

LONG = ("# 退货规则\n\n"
        "包裹破损时请在签收当天拍照。客服会在两个工作日内回复。运费由商家承担。"
        "超过七天的订单不能退货。定制商品不支持退货。退款会原路返回到付款账户，通常需要三到五天。"
        "会员可以享受免费上门取件服务。节假日期间处理时间可能延长。")


def _texts(text: str, width: int) -> list[str]:
    return [text[start:end] for start, end in window_spans(text, width)]


# The cut


def test_windows_pack_whole_sentences_without_overlap():
    assert _texts(TEXT, 8) == ["甲乙丙。", "丁戊己庚！辛壬。", "子丑寅卯辰巳午未", "申酉。"]
    assert _texts(TEXT, 11) == ["甲乙丙。丁戊己庚！", "辛壬。", "子丑寅卯辰巳午未申酉。"]
    assert _texts(TEXT, 12) == ["甲乙丙。丁戊己庚！辛壬。", "子丑寅卯辰巳午未申酉。"]


@pytest.mark.parametrize("width", [1, 5, 8, 12, 96])
def test_windows_cover_the_text_in_order_within_the_width(width):
    spans = window_spans(LONG, width)
    assert all(0 < end - start <= width for start, end in spans)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    # Every character but whitespace is in a window.
    covered = "".join(LONG[start:end] for start, end in spans)
    assert "".join(covered.split()) == "".join(LONG.split())


def test_a_text_that_fits_is_one_window_and_width_zero_or_blank_text_none():
    assert window_spans("  短句。 ", 96) == [(2, 5)]
    assert window_spans(LONG, 0) == []
    assert window_spans(" \n\t ", 96) == []
    assert window_spans("", 96) == []


ENGLISH = ("Parcels damaged in transit must be photographed on the day they arrive. Customer service replies "
           "within two working days. Custom-made goods cannot be returned! Refunds go back to the paying account, "
           "usually within three to five days.")


def test_a_text_without_chinese_characters_gets_windows_four_times_as_wide():
    """The width counts Chinese characters; an English text's windows hold about as many words."""
    assert len(ENGLISH) == 233
    # 4 × 40 = 160 characters: up to the "!" (159 characters) fits, the rest is the next window.
    assert _texts(ENGLISH, 40) == [ENGLISH[:ENGLISH.index(" Refunds")], ENGLISH[ENGLISH.index("Refunds"):]]
    assert _texts(ENGLISH, 60) == [ENGLISH]  # 240 characters
    # One Chinese character anywhere and the width is characters again.
    assert window_spans(ENGLISH + "退款。", 40) == [(0, 40), (40, 80), (80, 120), (120, 159), (160, 200), (200, 236)]


def test_a_text_without_chinese_characters_also_ends_sentences_at_a_full_stop():
    """English windows hold whole sentences: a full stop before a space ends one, as 。 does."""
    first, second, third, fourth = (ENGLISH[:71], ENGLISH[72:121], ENGLISH[122:159], ENGLISH[160:])
    assert " ".join([first, second, third, fourth]) == ENGLISH
    assert [len(first), len(second), len(third)] == [71, 49, 37]
    # 4 × 25 = 100 characters: the first sentence alone (the second would not fit beside it), the
    # next two together, the last alone; never a cut inside a sentence.
    assert _texts(ENGLISH, 25) == [first, f"{second} {third}", fourth]
    # A stop inside a word or a number is no sentence end: the sentences themselves, before packing.
    text = "Version 2.5 of e.g.x ships. It is late."
    assert sentence_pieces(text, 100, WESTERN_SENTENCE_END) == [(0, 27), (28, 39)]
    assert sentence_pieces(text, 100) == [(0, 39)]  # Chinese rules: a full stop ends nothing
    # In a text with Chinese characters a full stop ends nothing (。 does): Chinese text is cut as before.
    mixed = "First one. Second one. 第三句。"
    assert _texts(mixed, 12) == [mixed[:12], mixed[12:24], mixed[24:]]


# Ingestion


def _windows(kb) -> list[ChunkWindow]:
    generation = selectors.generation_active(kb=kb)
    return list(ChunkWindow.objects.filter(chunk__generation=generation).select_related("chunk")
                .order_by("chunk__index", "index"))


def test_ingestion_gives_every_child_its_windows_with_vectors_and_terms(settings):
    settings.KNOWLEDGE_WINDOW_CHARS = 40
    kb = KnowledgeBaseFactory()
    ingest_texts(kb, {"rules.md": LONG})
    generation = selectors.generation_active(kb=kb)
    assert generation.chunk_strategy["window_chars"] == 40
    children = list(Chunk.objects.filter(generation=generation, kind=Chunk.Kind.CHILD))
    windows = _windows(kb)
    assert len(windows) == sum(len(window_spans(child.text, 40)) for child in children) > len(children)
    embedder = embedder_for(kb.embedding_model)
    for window in windows:
        child = window.chunk
        assert (window.start, window.end) in window_spans(child.text, 40)
        embedded = embedding_text(text=child.text[window.start:window.end], chapter_path=child.chapter_path)
        assert window.text_hash == text_hash(embedded)
        assert list(window.embedding) == pytest.approx(embedder.embed_documents([embedded])[0], abs=1e-6)
        with connection.cursor() as cursor:
            cursor.execute("SELECT %s::tsvector = search_vector FROM knowledge_chunkwindow WHERE id = %s",
                           [search_terms_literal(embedded), window.pk])
            assert cursor.fetchone() == (True,)
    # The windows' vectors are cached like the children's.
    assert EmbeddingCache.objects.filter(embedding_model=kb.embedding_model,
                                         text_hash__in=[w.text_hash for w in windows]).count() == len(
        {w.text_hash for w in windows})


def test_a_build_without_windows_has_none_and_its_hybrid_search_reads_none(settings):
    settings.KNOWLEDGE_WINDOW_CHARS = 0
    kb = KnowledgeBaseFactory()
    ingest_texts(kb, {"rules.md": LONG})
    assert _windows(kb) == []
    with CaptureQueriesContext(connection) as queries:
        hits = search(kbs=[kb], query="退货 运费", options=SearchOptions(mode="hybrid", explain=True)).hits
    assert hits and hits[0].explain["window"] == {"cosine": None, "bm25": None, "blend": None}
    assert [q for q in queries.captured_queries if "knowledge_chunkwindow" in q["sql"]] == []
    # Searched beside a KB with windows, its candidates are their own windows.
    settings.KNOWLEDGE_WINDOW_CHARS = 40
    windowed = KnowledgeBaseFactory(embedding_model=kb.embedding_model)
    ingest_texts(windowed, {"rules.md": LONG})
    with CaptureQueriesContext(connection) as queries:
        hits = search(kbs=[kb, windowed], query="退货 运费",
                      options=SearchOptions(mode="hybrid", explain=True, rollup=False, top_k=10)).hits
    assert len([q for q in queries.captured_queries if "knowledge_chunkwindow" in q["sql"]]) == 1
    by_kb = {hit.knowledge_base_id: hit.explain["window"]["cosine"] for hit in hits}
    assert by_kb[kb.pk] is None and by_kb[windowed.pk] is not None


def test_a_rebuild_cuts_windows_at_the_width_of_its_start(settings):
    settings.KNOWLEDGE_WINDOW_CHARS = 0
    kb = KnowledgeBaseFactory()
    ingest_texts(kb, {"rules.md": LONG})
    settings.KNOWLEDGE_WINDOW_CHARS = 30
    generation = services.knowledge_base_rebuild(kb=kb)
    assert rebuild.generation_build(generation_id=generation.pk) == "activated"
    windows = _windows(kb)
    assert windows and all(w.embedding is not None and w.end - w.start <= 30 for w in windows)
    assert selectors.generation_active(kb=kb).pk == generation.pk


def test_deleting_a_document_or_a_kb_deletes_their_windows(settings):
    settings.KNOWLEDGE_WINDOW_CHARS = 40
    kb = KnowledgeBaseFactory()
    docs = ingest_texts(kb, {"a.md": LONG, "b.md": LONG.replace("退货", "换货")})
    before = ChunkWindow.objects.filter(chunk__document__knowledge_base=kb).count()
    of_b = ChunkWindow.objects.filter(chunk__document=docs["b.md"]).count()
    assert of_b > 0
    services.document_delete(document=docs["a.md"])
    assert ChunkWindow.objects.filter(chunk__document__knowledge_base=kb).count() == of_b < before
    services.knowledge_base_delete(kb=kb)
    assert ChunkWindow.objects.count() == 0
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the foreign keys hold


EDITED = "换货须在十天内申请。换货运费由买家承担。商家收到货后三天内寄出新货。节假日顺延，定制商品除外。"


def _child_to_edit(settings):
    """A KB with 40-character windows, and its child; the edit's text has two windows."""
    settings.KNOWLEDGE_WINDOW_CHARS = 40
    kb = KnowledgeBaseFactory()
    ingest_texts(kb, {"rules.md": LONG})
    assert len(window_spans(EDITED, 40)) == 2
    return kb, Chunk.objects.filter(generation=selectors.generation_active(kb=kb), kind=Chunk.Kind.CHILD).first()


def test_an_edited_chunk_gets_the_windows_of_its_new_text_with_vectors(settings):
    kb, child = _child_to_edit(settings)
    new_text = EDITED
    user = get_user_model().objects.create_user(username="editor", password="x")
    services.chunk_text_edit(chunk=child, text=new_text, user=user)
    windows = list(ChunkWindow.objects.filter(chunk=child).order_by("index"))
    assert [(w.start, w.end) for w in windows] == window_spans(new_text, 40)
    embedder = embedder_for(kb.embedding_model)
    for window in windows:
        embedded = embedding_text(text=new_text[window.start:window.end], chapter_path=child.chapter_path)
        assert list(window.embedding) == pytest.approx(embedder.embed_documents([embedded])[0], abs=1e-6)
        assert window.search_vector is not None
    assert index.vectors_missing(document_id=child.document_id, generation_ids=[child.generation_id]) == 0


def test_an_edit_whose_window_vectors_are_missing_is_refused(settings):
    from apps.knowledge import chunk_overrides, errors
    from apps.knowledge.pipeline.index import cache_store

    kb, child = _child_to_edit(settings)
    new_text = EDITED
    content = embedding_text(text=new_text, chapter_path=child.chapter_path)
    # The child's own vector is cached, its windows' are not.
    cache_store(model=kb.embedding_model, vectors={text_hash(content): embedder_for(kb.embedding_model)
                                                   .embed_documents([content])[0]})
    with pytest.raises(errors.ChunkNotEditable, match="windows"):
        chunk_overrides._text_set(child, new_text, model=kb.embedding_model)


def test_a_keyword_rewrite_rewrites_the_windows_terms(settings):
    settings.KNOWLEDGE_WINDOW_CHARS = 40
    kb = KnowledgeBaseFactory()
    ingest_texts(kb, {"rules.md": LONG})
    generation = selectors.generation_active(kb=kb)
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, search_vector::text FROM knowledge_chunkwindow ORDER BY id")
        before = cursor.fetchall()
        cursor.execute("UPDATE knowledge_chunkwindow SET search_vector = 'stale'::tsvector")
    index.keywords_rewrite(generation_id=generation.pk)
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, search_vector::text FROM knowledge_chunkwindow ORDER BY id")
        assert cursor.fetchall() == before


def test_a_window_without_its_vector_keeps_the_document_from_completing(settings):
    settings.KNOWLEDGE_WINDOW_CHARS = 40
    kb = KnowledgeBaseFactory()
    docs = ingest_texts(kb, {"rules.md": LONG})
    generation = selectors.generation_active(kb=kb)
    assert index.vectors_missing(document_id=docs["rules.md"].pk, generation_ids=[generation.pk]) == 0
    ChunkWindow.objects.filter(pk=_windows(kb)[1].pk).update(embedding=None)
    assert index.vectors_missing(document_id=docs["rules.md"].pk, generation_ids=[generation.pk]) == 1


# Fusion


def _pool() -> dict:
    # a: the better child by both channels; b: a child whose one sentence is the question.
    return {
        "a": Candidate("a", vector_rank=1, vector_score=0.90, keyword_rank=1, keyword_score=10.0,
                       window_cosine=0.88, window_keyword=4.0),
        "b": Candidate("b", vector_rank=2, vector_score=0.80, keyword_rank=2, keyword_score=8.0,
                       window_cosine=0.95, window_keyword=9.0),
        "c": Candidate("c", vector_rank=3, vector_score=0.70, keyword_rank=3, keyword_score=2.0),
    }


def test_without_window_shares_fusion_is_the_childrens():
    ranked = fuse(_pool(), fusion="convex", dense_weight=0.5)
    # a: .5 × 1 + .5 × 1 = 1; b: .5 × .5 + .5 × .8 = .65; c: 0 + .5 × .2 = .1
    assert [(c.chunk_id, round(c.score, 6)) for c in ranked] == [("a", 1.0), ("b", 0.65), ("c", 0.1)]


def test_window_shares_blend_each_candidates_best_window_into_both_parts():
    ranked = fuse(_pool(), fusion="convex", dense_weight=0.5, window_dense=0.5, window_keyword=0.5)
    # c has no windows read: its own cosine and BM25 stand in, scaled with the windows'.
    # Window cosines .88 / .95 / (.70) min-max: a .72, b 1, c 0; BM25 over the best 9: a .4444,
    # b 1, c .2222.
    # a: .5 × (.5 × 1 + .5 × .72) + .5 × (.5 × 1 + .5 × .4444) = .43 + .3611 = .7911
    # b: .5 × (.5 × .5 + .5 × 1) + .5 × (.5 × .8 + .5 × 1) = .375 + .45 = .825
    # c: .5 × 0 + .5 × (.5 × .2 + .5 × .2222) = .1056
    assert [(c.chunk_id, round(c.score, 4)) for c in ranked] == [("b", 0.825), ("a", 0.7911), ("c", 0.1056)]
    assert ranked[0].dense_weight == 0.5


def test_window_shares_change_nothing_when_no_candidate_has_windows():
    pool = {key: Candidate(c.chunk_id, vector_rank=c.vector_rank, vector_score=c.vector_score,
                           keyword_rank=c.keyword_rank, keyword_score=c.keyword_score) for key, c in _pool().items()}
    plain = [(c.chunk_id, c.score) for c in fuse(dict(pool), fusion="convex", dense_weight=0.5)]
    blended = fuse(pool, fusion="convex", dense_weight=0.5, window_dense=1.0, window_keyword=1.0)
    assert [(c.chunk_id, c.score) for c in blended] == plain


def test_a_search_reads_each_candidates_best_window(settings):
    settings.KNOWLEDGE_WINDOW_CHARS = 40
    kb = KnowledgeBaseFactory()
    ingest_texts(kb, {"rules.md": LONG})
    query = "定制商品 退货"
    result = search(kbs=[kb], query=query, options=SearchOptions(mode="hybrid", explain=True, rollup=False))
    best = result.hits[0]
    embedder = embedder_for(kb.embedding_model)
    query_vector = embedder.embed_query(query)
    windows = ChunkWindow.objects.filter(chunk_id=best.chunk_id)
    cosines = [sum(a * b for a, b in zip(w.embedding, query_vector, strict=True)) for w in windows]
    assert best.explain["window"]["cosine"] == pytest.approx(max(cosines), abs=1e-5)
    # BM25 by the engine's formula: the generation's idf, each window's distinct terms as its
    # length, the average over the windows the search read (here every window of the KB: the
    # search's pool holds every child).
    scorer = keyword_scorer(generation_ids=[selectors.generation_active(kb=kb).pk], query=query)
    every = list(ChunkWindow.objects.filter(chunk__document__knowledge_base=kb).select_related("chunk"))
    embedded = {w.pk: embedding_text(text=w.chunk.text[w.start:w.end], chapter_path=w.chunk.chapter_path)
                for w in every}
    lengths = {pk: len(set(keyword_terms(text))) for pk, text in embedded.items()}
    average = sum(lengths.values()) / len(lengths)
    expected = max(bm25(tf=term_frequencies(embedded[w.pk], scorer.idf), idf=scorer.idf, length=lengths[w.pk],
                        avg_length=average) for w in every if w.chunk_id == best.chunk_id)
    assert best.explain["window"]["bm25"] == pytest.approx(expected, rel=1e-9) and expected > 0
    assert "windows_ms" in result.timings_ms


def test_window_shares_of_zero_read_no_windows(settings):
    settings.KNOWLEDGE_WINDOW_CHARS = 40
    settings.KNOWLEDGE_RETRIEVAL = {"hybrid_window_dense": 0, "hybrid_window_keyword": 0}
    kb = KnowledgeBaseFactory()
    ingest_texts(kb, {"rules.md": LONG})
    with CaptureQueriesContext(connection) as queries:
        result = search(kbs=[kb], query="定制商品 退货", options=SearchOptions(mode="hybrid", explain=True))
    assert result.hits and result.hits[0].explain["window"] == {"cosine": None, "bm25": None, "blend": None}
    assert [q for q in queries.captured_queries if "knowledge_chunkwindow" in q["sql"]] == []


def test_the_query_script_chooses_the_window_shares(settings):
    settings.KNOWLEDGE_RETRIEVAL = {
        "hybrid_window_dense": 0.1, "hybrid_window_keyword": 0.2, "hybrid_window_shift": 0.3,
        "hybrid_window_dense_western": 0.4, "hybrid_window_keyword_western": 0.5, "hybrid_window_shift_western": -0.2,
        "hybrid_window_dense_traditional": 0.6, "hybrid_window_keyword_traditional": 0.7,
        "hybrid_window_shift_traditional": -0.1,
    }
    assert window_shares("定制商品 退货") == (0.1, 0.2, 0.3)
    assert window_shares("custom goods 退货") == (0.1, 0.2, 0.3)  # one Chinese character is enough
    assert window_shares("custom-made goods cannot be returned") == (0.4, 0.5, -0.2)
    assert window_shares("定製商品 退貨") == (0.6, 0.7, -0.1)
    assert window_shares("custom goods 退貨") == (0.6, 0.7, -0.1)  # one Traditional-only character is enough
    assert window_shares("商品") == (0.1, 0.2, 0.3)  # characters both scripts share are Simplified's


def _window_reads(kb, query: str) -> tuple[int, float]:
    """(window reads, the best hit's dense weight) of one hybrid search."""
    with CaptureQueriesContext(connection) as queries:
        result = search(kbs=[kb], query=query, options=SearchOptions(mode="hybrid", explain=True))
    assert result.hits
    return (len([q for q in queries.captured_queries if "knowledge_chunkwindow" in q["sql"]]),
            result.hits[0].explain["dense_weight"])


def test_the_query_script_decides_which_window_shares_a_search_blends(settings):
    """Windows of an English and a Chinese text in one KB: an English query reads them by the
    western shares, a Chinese one by the others, each moving its dense weight by its own shift."""
    settings.KNOWLEDGE_WINDOW_CHARS = 40
    kb = KnowledgeBaseFactory()
    ingest_texts(kb, {"rules.md": LONG, "english.md": ENGLISH})
    chinese, english = "定制商品 退货", "custom-made goods returned"
    settings.KNOWLEDGE_RETRIEVAL = {"hybrid_window_dense": 0, "hybrid_window_keyword": 0}
    _, chinese_weight = _window_reads(kb, chinese)
    settings.KNOWLEDGE_RETRIEVAL = {"hybrid_window_dense_western": 0, "hybrid_window_keyword_western": 0}
    _, english_weight = _window_reads(kb, english)
    # Western shares of 0 read no windows for the English query; the Chinese query still reads them
    # and moves its weight by hybrid_window_shift.
    assert _window_reads(kb, english) == (0, english_weight)
    reads, weight = _window_reads(kb, chinese)
    assert reads == 1 and weight == pytest.approx(min(0.95, chinese_weight + 0.1))
    # And the other way round, the western shift moving the English query's weight.
    settings.KNOWLEDGE_RETRIEVAL = {"hybrid_window_dense": 0, "hybrid_window_keyword": 0,
                                    "hybrid_window_shift_western": 0.2}
    assert _window_reads(kb, chinese) == (0, chinese_weight)
    reads, weight = _window_reads(kb, english)
    assert reads == 1 and weight == pytest.approx(min(0.95, english_weight + 0.2))


def test_a_traditional_query_blends_the_windows_by_its_own_shares(settings):
    settings.KNOWLEDGE_WINDOW_CHARS = 40
    kb = KnowledgeBaseFactory()
    ingest_texts(kb, {"rules.md": LONG})
    simplified, traditional = "定制商品 退货", "定製商品 退貨"
    settings.KNOWLEDGE_RETRIEVAL = {"hybrid_window_dense_traditional": 0, "hybrid_window_keyword_traditional": 0}
    reads, traditional_weight = _window_reads(kb, traditional)
    assert reads == 0
    assert _window_reads(kb, simplified)[0] == 1
    settings.KNOWLEDGE_RETRIEVAL = {"hybrid_window_dense": 0, "hybrid_window_keyword": 0,
                                    "hybrid_window_shift_traditional": 0.2}
    assert _window_reads(kb, simplified)[0] == 0
    reads, weight = _window_reads(kb, traditional)
    assert reads == 1 and weight == pytest.approx(min(0.95, traditional_weight + 0.2))


def test_a_window_pool_reads_the_windows_of_the_best_candidates_only(settings):
    settings.KNOWLEDGE_WINDOW_CHARS = 40
    kb = KnowledgeBaseFactory()
    ingest_texts(kb, {"rules.md": LONG, "more.md": EDITED, "other.md": LONG.replace("退货", "换货")})
    query = "定制商品 退货"
    options = SearchOptions(mode="hybrid", explain=True, rollup=False, top_k=20)
    # Without windows: the order the pool is cut from.
    settings.KNOWLEDGE_RETRIEVAL = {"hybrid_window_dense": 0, "hybrid_window_keyword": 0}
    plain = [hit.chunk_id for hit in search(kbs=[kb], query=query, options=options).hits]
    assert len(plain) > 2
    settings.KNOWLEDGE_RETRIEVAL = {"hybrid_window_pool": 2}
    hits = search(kbs=[kb], query=query, options=options).hits
    read = {hit.chunk_id for hit in hits if hit.explain["window"]["cosine"] is not None}
    assert read == set(plain[:2])
    assert {hit.chunk_id: hit.explain["window"]["blend"] for hit in hits} == {
        c: "best window" if c in read else "own scores" for c in plain}
    assert {hit.chunk_id for hit in hits} == set(plain)  # every candidate is a hit here
    # By hand: an unread candidate's own cosine and BM25 stand in for its window's, scaled with
    # the read windows' (min-max for cosines, over the best for BM25); shares 0.5 and 0.75.
    explain = {hit.chunk_id: hit.explain for hit in hits}
    cosine = {c: e["vector"]["score"] for c, e in explain.items()}
    keyword = {c: e["keyword"]["score"] or 0.0 for c, e in explain.items()}
    window_cosine = {c: e["window"]["cosine"] if c in read else cosine[c] for c, e in explain.items()}
    window_keyword = {c: e["window"]["bm25"] if c in read else keyword[c] for c, e in explain.items()}

    def minmax(values):
        low, high = min(values.values()), max(values.values())
        return {c: (v - low) / (high - low) for c, v in values.items()}

    def over_best(values):
        return {c: v / max(values.values()) for c, v in values.items()}

    d, dw, k, kw = minmax(cosine), minmax(window_cosine), over_best(keyword), over_best(window_keyword)
    for c, e in explain.items():
        w = e["dense_weight"]
        expected = w * (0.5 * d[c] + 0.5 * dw[c]) + (1 - w) * (0.25 * k[c] + 0.75 * kw[c])
        assert e["fused_score"] == pytest.approx(expected, abs=1e-9), c
    # 0: every candidate's windows.
    settings.KNOWLEDGE_RETRIEVAL = {"hybrid_window_pool": 0}
    hits = search(kbs=[kb], query=query, options=options).hits
    assert {hit.chunk_id for hit in hits if hit.explain["window"]["cosine"] is not None} == set(plain)


def test_a_windows_vector_and_terms_stay_in_its_row():
    """A search reads hundreds of windows: out of line (TOAST), each row cost five page reads."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT attname, attstorage FROM pg_attribute "
                       "WHERE attrelid = 'knowledge_chunkwindow'::regclass "
                       "AND attname IN ('embedding', 'search_vector') ORDER BY attname")
        assert cursor.fetchall() == [("embedding", "p"), ("search_vector", "m")]
