from apps.knowledge.pipeline.terms import keyword_terms


def test_cjk_runs_become_characters_and_bigrams():
    assert keyword_terms("退款政策") == ["退", "款", "政", "策", "退款", "款政", "政策"]


def test_a_single_cjk_character_stays_a_term():
    assert keyword_terms("A 类 B") == ["a", "类", "b"]


def test_western_words_are_lower_cased_and_split_at_punctuation():
    assert keyword_terms("Vue.js uses defineModel() in v3_5") == ["vue", "js", "uses", "definemodel", "in", "v3", "5"]


def test_full_width_letters_and_digits_match_ascii():
    assert keyword_terms("ＳＫＵ１２３ 七天") == ["sku123", "七", "天", "七天"]


def test_mixed_text_keeps_order_and_repeats():
    assert keyword_terms("退款 refund 退款") == ["退", "款", "退款", "refund", "退", "款", "退款"]


def test_overlong_tokens_are_dropped():
    assert keyword_terms("a" * 65 + " ok") == ["ok"]


def test_term_frequencies_count_as_the_tokeniser_does():
    from collections import Counter

    from apps.knowledge.pipeline.retrieve import term_frequencies

    text = "退款政策：ＳＫＵ１２３退款，Refund refunds refund；七天无理由退款。"
    terms = ["退款", "退", "sku123", "refund", "refunds", "七天", "运费", "ref"]
    full = Counter(keyword_terms(text))
    assert term_frequencies(text, terms) == Counter({t: full[t] for t in terms if full[t]})
    assert term_frequencies(text, terms)["退款"] == 3
    assert "ref" not in term_frequencies(text, terms)  # whole words only
