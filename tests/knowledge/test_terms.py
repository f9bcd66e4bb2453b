from apps.knowledge.pipeline.terms import keyword_terms


def test_cjk_runs_become_characters_and_bigrams():
    assert keyword_terms("退款政策") == ["退", "款", "政", "策", "退款", "款政", "政策"]


def test_a_single_cjk_character_stays_a_term():
    assert keyword_terms("A 类 B") == ["a", "类", "b"]


def test_western_words_are_lower_cased_and_split_at_punctuation():
    assert keyword_terms("Vue.js uses defineModel() in v3_5") == ["vue", "js", "use", "definemodel", "in", "v3", "5"]


def test_full_width_letters_and_digits_match_ascii():
    assert keyword_terms("ＳＫＵ１２３ 七天") == ["sku123", "七", "天", "七天"]


def test_mixed_text_keeps_order_and_repeats():
    assert keyword_terms("退款 refund 退款") == ["退", "款", "退款", "refund", "退", "款", "退款"]


def test_overlong_tokens_are_dropped():
    assert keyword_terms("a" * 65 + " ok") == ["ok"]


def test_term_frequencies_count_as_the_tokeniser_does():
    from collections import Counter

    from apps.knowledge.pipeline.terms import term_frequencies

    text = "退款政策：ＳＫＵ１２３退款，Refund refunds refund；七天无理由退款。"
    terms = ["退款", "退", "sku123", "refund", "refunds", "七天", "运费", "ref"]
    full = Counter(keyword_terms(text))
    assert term_frequencies(text, terms) == Counter({t: full[t] for t in terms if full[t]})
    assert term_frequencies(text, terms)["退款"] == 3
    assert "ref" not in term_frequencies(text, terms)  # whole words only


def test_english_words_are_reduced_to_their_stem():
    assert keyword_terms("Claims claimed CLAIMING claim") == ["claim"] * 4
    assert keyword_terms("studies studying") == ["studi", "studi"]


def test_only_words_of_ascii_letters_are_stemmed():
    # Digits, mixed tokens and non-ASCII words are identifiers or other languages: kept whole.
    assert keyword_terms("v3s 2020s café's ports") == ["v3s", "2020s", "café", "s", "port"]


def test_traditional_chinese_is_folded_onto_simplified():
    assert keyword_terms("國家發展") == keyword_terms("国家发展") == ["国", "家", "发", "展", "国家", "家发", "发展"]


def test_characters_used_in_simplified_text_are_never_folded():
    # 乾 (乾隆), 著 (著名), 麽 and 於 occur in Simplified text as they are.
    assert keyword_terms("乾隆著名") == ["乾", "隆", "著", "名", "乾隆", "隆著", "著名"]
    assert keyword_terms("什麽於是") == ["什", "麽", "於", "是", "什麽", "麽於", "於是"]
    assert keyword_terms("什么") == ["什", "么", "什么"]


def test_folding_keeps_every_offset():
    from apps.knowledge.pipeline.han import fold, folding_table

    text = "臺灣的國語與简体字混排：乾隆 著名 abc"
    folded = fold(text)
    assert len(folded) == len(text)
    assert folded == "台湾的国语与简体字混排：乾隆 著名 abc"
    assert all(len(target) == 1 for target in folding_table().values())
    assert len(folding_table()) > 3000


def test_term_frequencies_count_stems_and_folded_characters():
    from collections import Counter

    from apps.knowledge.pipeline.terms import term_frequencies

    text = "Refunding refunds: 退貨與退货"
    assert term_frequencies(text, ["refund", "退货", "货"]) == Counter({"refund": 2, "退货": 2, "货": 2})


def test_the_fast_path_folds_exactly_as_the_table_does():
    """fold skips the translate when no character needs folding: the answer must not change."""
    import random

    from apps.knowledge.pipeline.han import fold, folding_table, is_traditional

    table = folding_table()
    traditional = sorted(chr(code) for code in table)
    simplified_text = "国家的人民在这里生活，乾隆著名 abc ＡＢＣ"
    rng = random.Random(5)
    samples = [simplified_text, "", *("".join(rng.choice([*simplified_text, *traditional[:50], rng.choice(traditional)])
                                          for _ in range(40)) for _ in range(200))]
    for text in samples:
        assert fold(text) == text.translate(table)
        assert is_traditional(text) == (text.translate(table) != text)
    assert fold(simplified_text) is simplified_text
