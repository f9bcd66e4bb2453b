
import pytest

from apps.knowledge.pipeline.chunkers import TooManyChunks, document_chunk
from apps.knowledge.pipeline.chunkers.base import merge, sentence_spans
from apps.knowledge.pipeline.parsers import document_parse
from apps.knowledge.pipeline.parsers.base import ParsedDocument
from apps.knowledge.pipeline.parsers.markdown import parse_text
from apps.knowledge.pipeline.strategy import ChunkStrategy, StrategyInvalid, strategy_parse
from tests.memory import memory_peak

DEFAULTS = {"strategy": "auto", "min_chars": 256, "max_chars": 768, "overlap_chars": 96}


def _strategy(**values):
    """Defaults, or — when the test sets max_chars — no minimum and no overlap unless given."""
    if "max_chars" in values:
        values = {"min_chars": 0, "overlap_chars": 0, **values}
    return strategy_parse({**DEFAULTS, **values}, defaults=DEFAULTS)


def _policy(fixture_bytes):
    return document_parse(file_type="markdown", data=fixture_bytes("policy.zh.md"))


def _sentences(text):
    return [text[start:end] for start, end in sentence_spans(text)]


def test_sentences_split_at_chinese_punctuation_which_is_kept():
    assert _sentences("第一句。第二句！第三句？第四句；尾巴") == [
        "第一句。", "第二句！", "第三句？", "第四句；", "尾巴",
    ]


def test_sentences_split_at_western_punctuation_before_a_space_only():
    assert _sentences("Pi is 3.14 here. Really? Yes!") == ["Pi is 3.14 here.", "Really?", "Yes!"]


def test_closing_quotes_stay_with_their_sentence():
    assert _sentences("他说：“可以退款。”然后离开。") == ["他说：“可以退款。”", "然后离开。"]


def test_merge_respects_max_and_overlaps_whole_units():
    units = [(0, 10), (10, 20), (20, 30), (30, 40)]
    assert merge(units, max_chars=20, overlap_chars=10, min_chars=0) == [(0, 20), (10, 30), (20, 40)]


def test_merge_joins_a_short_tail_to_the_previous_span():
    units = [(0, 10), (10, 20), (20, 23)]
    assert merge(units, max_chars=20, overlap_chars=0, min_chars=5) == [(0, 23)]


def test_auto_children_carry_the_chapter_path_of_their_section(fixture_bytes):
    chunked = document_chunk(parsed=_policy(fixture_bytes), strategy=_strategy())
    assert [(child.chapter_path, child.text) for child in chunked.children] == [
        ("售后政策", "本政策适用于所有门店。"),
        ("售后政策 / 退款", "退款需要提供购物凭证。"),
        ("售后政策 / 退款 / 七天无理由",
         "自签收之日起七天内，商品完好可申请无理由退款。退款将在三个工作日内原路退回！如有疑问，请联系客服；客服会在一小时内答复。"),
        ("售后政策 / 退款 / 质量问题", "质量问题的商品可以在三十天内退款。运费由门店承担。"),
        ("售后政策 / 换货",
         "换货流程如下：\n\n```bash\n# 这不是标题\nexchange --order 123\n```\n\n换货不收取费用。"),
    ]


def test_auto_never_merges_across_a_heading(fixture_bytes):
    chunked = document_chunk(parsed=_policy(fixture_bytes), strategy=_strategy(max_chars=2000))
    assert len(chunked.children) == 5
    assert len(chunked.parents) == 5


def test_auto_splits_at_sentences_with_overlap_and_punctuation_kept(fixture_bytes):
    strategy = _strategy(max_chars=40, min_chars=0, overlap_chars=20)
    chunked = document_chunk(parsed=_policy(fixture_bytes), strategy=strategy)
    seven_days = [c.text for c in chunked.children if c.chapter_path == "售后政策 / 退款 / 七天无理由"]
    assert seven_days == [
        "自签收之日起七天内，商品完好可申请无理由退款。退款将在三个工作日内原路退回！",
        "退款将在三个工作日内原路退回！如有疑问，请联系客服；客服会在一小时内答复。",
    ]


def test_children_are_slices_of_their_parent(fixture_bytes):
    chunked = document_chunk(parsed=_policy(fixture_bytes), strategy=_strategy(max_chars=64, overlap_chars=16))
    for child in chunked.children:
        parent = chunked.parents[child.parent_index]
        assert parent.text[child.start:child.end] == child.text
        assert parent.chapter_path == child.chapter_path


def test_a_document_without_headings_has_null_chapter_paths(fixture_bytes):
    parsed = document_parse(file_type="txt", data=fixture_bytes("plain.txt"))
    chunked = document_chunk(parsed=parsed, strategy=_strategy())
    assert [child.chapter_path for child in chunked.children] == [None]
    assert chunked.parents[0].chapter_path is None


def test_a_code_fence_longer_than_max_is_cut_at_lines():
    code = "```\n" + "\n".join(f"line {i:02d} = value" for i in range(20)) + "\n```"
    chunked = document_chunk(parsed=parse_text(f"# 代码\n\n{code}\n"), strategy=_strategy(max_chars=100,
                                                                                          overlap_chars=0,
                                                                                          min_chars=0))
    assert all(len(child.text) <= 100 for child in chunked.children)
    assert "\n".join(child.text for child in chunked.children) == code


def test_by_section_makes_one_child_per_section(fixture_bytes):
    chunked = document_chunk(parsed=_policy(fixture_bytes), strategy=_strategy(strategy="by_section"))
    assert [child.chapter_path for child in chunked.children] == [
        "售后政策", "售后政策 / 退款", "售后政策 / 退款 / 七天无理由", "售后政策 / 退款 / 质量问题", "售后政策 / 换货",
    ]


def test_by_paragraph_makes_one_child_per_paragraph_when_min_is_zero(fixture_bytes):
    chunked = document_chunk(parsed=_policy(fixture_bytes), strategy=_strategy(strategy="by_paragraph", min_chars=0))
    exchange = [c.text for c in chunked.children if c.chapter_path == "售后政策 / 换货"]
    assert exchange == ["换货流程如下：", "```bash\n# 这不是标题\nexchange --order 123\n```", "换货不收取费用。"]


def test_by_paragraph_joins_short_paragraphs_up_to_min(fixture_bytes):
    chunked = document_chunk(parsed=_policy(fixture_bytes), strategy=_strategy(strategy="by_paragraph", min_chars=30))
    exchange = [c.text for c in chunked.children if c.chapter_path == "售后政策 / 换货"]
    assert exchange == ["换货流程如下：\n\n```bash\n# 这不是标题\nexchange --order 123\n```", "换货不收取费用。"]


def test_fixed_cuts_windows_inside_each_section():
    parsed = parse_text("# 甲\n\n" + "一二三四五六七八九十" * 10 + "\n\n# 乙\n\n短。\n")
    chunked = document_chunk(parsed=parsed, strategy=_strategy(strategy="fixed", max_chars=64, overlap_chars=16))
    assert [(c.chapter_path, len(c.text)) for c in chunked.children] == [("甲", 64), ("甲", 52), ("乙", 2)]


def test_legacy_splits_the_whole_text_without_parents_or_paths(fixture_bytes):
    chunked = document_chunk(parsed=_policy(fixture_bytes), strategy=_strategy(strategy="legacy", max_chars=100,
                                                                               overlap_chars=10))
    assert chunked.parents == ()
    assert {child.chapter_path for child in chunked.children} == {None}
    assert {child.parent_index for child in chunked.children} == {None}
    assert chunked.children[0].text.startswith("售后政策\n\n本政策适用于所有门店。\n\n退款")


@pytest.mark.parametrize("strategy", ["auto", "by_section", "by_paragraph", "fixed", "legacy"])
def test_chunking_is_deterministic(fixture_bytes, strategy):
    first = document_chunk(parsed=_policy(fixture_bytes), strategy=_strategy(strategy=strategy, max_chars=64,
                                                                             overlap_chars=16))
    second = document_chunk(parsed=_policy(fixture_bytes), strategy=_strategy(strategy=strategy, max_chars=64,
                                                                              overlap_chars=16))
    assert first == second


def test_parents_are_cut_at_block_boundaries_past_their_limit():
    parsed = parse_text("# 长章\n\n" + "\n\n".join(f"第{i}条 内容。" * 5 for i in range(10)))
    strategy = ChunkStrategy(strategy="auto", min_chars=0, max_chars=100, overlap_chars=0, parent_max_chars=120)
    chunked = document_chunk(parsed=parsed, strategy=strategy)
    assert [parent.text.count("\n\n") for parent in chunked.parents] == [2, 2, 2, 0]
    assert {parent.chapter_path for parent in chunked.parents} == {"长章"}


def test_pdf_children_know_their_pages(fixture_bytes):
    parsed = document_parse(file_type="pdf", data=fixture_bytes("sample.pdf"))
    chunked = document_chunk(parsed=parsed, strategy=_strategy(max_chars=64, overlap_chars=0, min_chars=0))
    assert [(child.pages, child.text) for child in chunked.children] == [
        ((1,), "Refund policy.\nRefunds are processed within seven days."),
        ((1, 2), "Keep the receipt.\n\nExchange policy."),
        ((2,), "Exchanges are free within thirty days."),
    ]


@pytest.mark.parametrize(("value", "field"), [
    ({"strategy": "semantic"}, "chunk_strategy.strategy"),
    ({"max_chars": 10}, "chunk_strategy.max_chars"),
    ({"min_chars": 900}, "chunk_strategy.min_chars"),
    ({"overlap_chars": 500}, "chunk_strategy.overlap_chars"),
    ({"max_chars": "768"}, "chunk_strategy.max_chars"),
    ({"colour": "blue"}, "chunk_strategy.colour"),
])
def test_invalid_strategies_name_the_field(value, field):
    with pytest.raises(StrategyInvalid) as caught:
        strategy_parse(value, defaults=DEFAULTS)
    assert field in caught.value.fields


def test_missing_strategy_fields_come_from_defaults():
    assert strategy_parse({"strategy": "fixed"}, defaults=DEFAULTS).public() == {
        "strategy": "fixed", "min_chars": 256, "max_chars": 768, "overlap_chars": 96,
    }


def _tiny_paragraphs(count):
    return document_parse(file_type="txt", data=b"x\n\n" * count)


@pytest.mark.parametrize("name", ["auto", "by_section", "by_paragraph", "fixed", "legacy"])
def test_every_strategy_refuses_a_document_over_the_chunk_cap_and_keeps_one_at_it(name):
    parsed = document_parse(file_type="txt", data="\n\n".join(f"第{i}段：退款规定。" for i in range(30)).encode())
    strategy = _strategy(strategy=name, max_chars=32)
    count = len(document_chunk(parsed=parsed, strategy=strategy).children)
    assert count > 1
    assert len(document_chunk(parsed=parsed, strategy=strategy, max_children=count).children) == count
    with pytest.raises(TooManyChunks) as refused:
        document_chunk(parsed=parsed, strategy=strategy, max_children=count - 1)
    assert refused.value.max_children == count - 1
    assert str(refused.value) == f"It makes more than {count - 1:,} chunks."


def test_chunking_stops_at_the_cap_before_reading_the_sections_after_it():
    parsed = _tiny_paragraphs(50)
    read_past_the_cap = []

    def sections():
        yield from parsed.sections
        read_past_the_cap.append(True)
        yield from parsed.sections

    flood = ParsedDocument(file_type="txt", sections=sections())  # type: ignore[arg-type]
    with pytest.raises(TooManyChunks):
        document_chunk(parsed=flood, strategy=_strategy(strategy="by_paragraph", max_chars=32), max_children=40)
    assert read_past_the_cap == []


def test_a_code_block_of_many_short_lines_is_cut_without_listing_every_line():
    # An unclosed fence of 9 million one-character lines (a 19 MB Markdown file) held 1.3 GB:
    # every line's span was listed before the first piece was cut, ~120 bytes a line (24 MB here).
    code = "```\n" + "x\n" * 200_000
    parsed = parse_text(code)
    with memory_peak() as peak:
        chunked = document_chunk(parsed=parsed, strategy=_strategy(max_chars=768), max_children=2_000)
    assert [len(child.text) for child in chunked.children] == [767] * 520 + [len(code.strip()) - 520 * 768]
    assert peak.bytes < 2 * len(code)  # the children themselves are the text once over


def test_a_flood_of_tiny_paragraphs_is_placed_one_parent_at_a_time():
    # 300,000 one-character paragraphs in one section: placing them all before cutting the first
    # parent held ~70 bytes a paragraph (over 20 MB here); one parent at a time holds ~1,300.
    parsed = _tiny_paragraphs(300_000)
    with memory_peak() as peak, pytest.raises(TooManyChunks):
        document_chunk(parsed=parsed, strategy=_strategy(strategy="by_paragraph", max_chars=32), max_children=2_000)
    assert peak.bytes < 4 * 1024 * 1024
