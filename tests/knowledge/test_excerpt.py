"""focused_excerpt: the sentence a query is about, whole sentences around it, within the budget."""

from apps.core.jsonbytes import json_text_bytes
from apps.knowledge.pipeline.excerpt import focused_excerpt

FILLER = "Staff rotas are posted weekly and shifts may be swapped with the manager's consent. "
KEY = "The emergency exit key is kept in the red box behind till number four."


def test_a_text_within_the_budget_is_whole():
    assert focused_excerpt("Short text. Two sentences.", "anything", max_bytes=512) == "Short text. Two sentences."


def test_the_excerpt_begins_with_the_sentence_the_query_is_about():
    text = FILLER * 8 + KEY + " " + FILLER * 8
    excerpt = focused_excerpt(text, "where is the emergency exit key kept", max_bytes=512)
    assert excerpt.startswith(KEY)
    assert excerpt in text
    assert json_text_bytes(excerpt) <= 512
    # whole sentences: it ends at a full stop, and no sentence more would fit
    assert excerpt.endswith(".")
    assert json_text_bytes(excerpt + " " + FILLER.strip()) > 512


def test_sentences_before_the_anchor_fill_what_is_left_at_the_end():
    text = FILLER * 8 + KEY
    excerpt = focused_excerpt(text, "emergency exit key", max_bytes=512)
    assert excerpt.endswith(KEY)
    assert excerpt.startswith("Staff rotas")
    assert json_text_bytes(excerpt) <= 512 < json_text_bytes(FILLER + excerpt)


def test_the_anchor_is_chosen_inside_the_region():
    early = "The emergency exit key used to hang by the door."
    text = early + " " + FILLER * 8 + KEY + " " + FILLER * 8
    start = text.index(KEY) - 5 * len(FILLER)
    excerpt = focused_excerpt(text, "emergency exit key", max_bytes=512, region=(start, len(text)))
    assert excerpt.startswith(KEY)
    everywhere = focused_excerpt(text, "emergency exit key", max_bytes=512)
    assert everywhere.startswith(early)  # a tie goes to the earlier sentence


def test_without_a_term_in_common_the_region_s_first_sentence_leads():
    text = FILLER * 10 + KEY + " " + FILLER * 10
    start = text.index(KEY)
    excerpt = focused_excerpt(text, "zzz qqq", max_bytes=300, region=(start, start + len(KEY)))
    assert excerpt.startswith(KEY)


def test_chinese_sentences_and_a_three_byte_budget():
    filler = "员工排班每周公布，调班需经店长同意。" * 12
    key = "紧急出口的钥匙放在四号收银台后面的红色盒子里。"
    text = filler + key + filler
    excerpt = focused_excerpt(text, "紧急出口钥匙放在哪里", max_bytes=512)
    assert excerpt.startswith(key)
    assert json_text_bytes(excerpt) <= 512


def test_a_sentence_longer_than_the_budget_is_cut_at_a_space():
    long_sentence = "The key " + "word " * 200 + "end."
    text = FILLER * 3 + long_sentence
    excerpt = focused_excerpt(text, "the key word", max_bytes=256)
    assert excerpt.startswith("The key word")
    assert excerpt.endswith("word")
    assert json_text_bytes(excerpt) <= 256


def test_json_escapes_count_against_the_budget():
    text = ('He said "refund".\t' * 10) + ' The refund "window" is seven days.' + (' He said "refund".\t' * 40)
    excerpt = focused_excerpt(text, "refund window days", max_bytes=128)
    assert excerpt.startswith('The refund "window" is seven days.')
    assert json_text_bytes(excerpt) <= 128


def test_a_chinese_name_in_an_english_section_leaves_its_sentences_apart():
    text = "Ask 王经理 about rotas. " + FILLER * 8 + KEY + " " + FILLER * 8
    excerpt = focused_excerpt(text, "where is the emergency exit key kept", max_bytes=512)
    assert excerpt.startswith(KEY)
