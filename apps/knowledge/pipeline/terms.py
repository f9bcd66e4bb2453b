"""Keyword terms: the one tokenisation that indexing and querying share.

Text is read in one normal form (`normalise`): NFKC (full-width letters and digits match their
ASCII forms), lower case, and Traditional Chinese folded onto Simplified (pipeline.han), so
國家 and 国家 are one term. Then:

- CJK runs become their characters plus overlapping character bigrams (measured on
  dureader-robust-a: BM25 over unigrams+bigrams 0.824 nDCG@10, bigrams alone 0.794);
- other runs of letters and digits become words; words of ASCII letters are reduced to their
  English Snowball stem, so "claims", "claimed" and "claiming" are one term (BM25 on
  scifact-train 0.667 → 0.698; dropping English stop words as well changed nothing measurable
  there, BM25's idf already ignores them, so the index keeps them; a query leaves them out of its
  keyword terms, for small KBs: query_terms).

No dictionary segmenter: good on product codes and names; one can replace the CJK part later
(change both sides here, and bump ANALYZER so existing indexes are rebuilt).

`term_frequencies` counts terms in a text the way BM25 reads them. The index stores each term's
count with it (analyzer 3), so a search scores candidates without reading their text.
"""

from __future__ import annotations

import itertools
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable

import Stemmer

from apps.knowledge.pipeline.han import fold

# The version of this tokenisation and of the index format. A generation records the version it
# was indexed with; one indexed with another needs its keyword index rewritten (manage.py
# reindex_keywords). 2: Han folding and stemming. 3: the same terms, each with its frequency in
# the chunk as its one tsvector position; a generation still at 2 is searched by recounting text.
ANALYZER = 3

# Han (with extensions and compatibility ideographs), kana and Hangul syllables.
CJK_CHARS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af\U00020000-\U0002fa1f"
_TOKEN = re.compile(rf"(?P<cjk>[{CJK_CHARS}]+)|(?P<word>[^\W_{CJK_CHARS}]+)")
_WORD = re.compile(rf"[^\W_{CJK_CHARS}]+")
_CJK_CHAR = re.compile(rf"[{CJK_CHARS}]")
# Longer "words" are base64, hashes or minified code: no one searches for them.
MAX_WORD_CHARS = 64

# PyStemmer objects are not thread-safe (the web server runs requests in threads): one per thread.
_local = threading.local()


def _stemmer() -> Stemmer.Stemmer:
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = Stemmer.Stemmer("english")
    return stemmer


def keyword_terms(text: str) -> list[str]:
    """The terms of `text`, in order, repeats kept (the index counts them)."""
    terms: list[str] = []
    for match in _TOKEN.finditer(normalise(text)):
        run = match.group()
        if match.lastgroup == "cjk":
            terms.extend(run)
            terms.extend(run[i : i + 2] for i in range(len(run) - 1))
        elif len(run) <= MAX_WORD_CHARS:
            terms.append(word_term(run))
    return terms


def term_runs(text: str) -> list[tuple[str, bool]]:
    """The runs keyword_terms cuts `text`'s normal form into, in order, each with whether it is a
    CJK run (its characters and pairs are terms) or a word (one term, when not too long)."""
    return [(match.group(), match.lastgroup == "cjk") for match in _TOKEN.finditer(normalise(text))]


def normalise(text: str) -> str:
    """The form keyword_terms reads text in (NFKC, lower case, Han folded): count terms in this."""
    if not unicodedata.is_normalized("NFKC", text):
        text = unicodedata.normalize("NFKC", text)
    return fold(text.lower())


def word_term(word: str) -> str:
    """The term of one normalised word: its English stem when it is made of ASCII letters."""
    if word.isascii() and word.isalpha():
        return _stemmer().stemWord(word)
    return word


def word_terms(normal: str) -> list[str]:
    """The Western-word terms of already normalised text (keyword_terms without the CJK part)."""
    return [word_term(word) for word in _WORD.findall(normal) if len(word) <= MAX_WORD_CHARS]


def is_cjk_term(term: str) -> bool:
    return bool(_CJK_CHAR.match(term))


def has_cjk(text: str) -> bool:
    return bool(_CJK_CHAR.search(text))


def term_frequencies(text: str, terms: Iterable[str]) -> Counter:
    """How often each of `terms` occurs in `text` (CJK terms by substring count, words by
    whole-word count), zeros left out. What BM25 reads as a term's frequency: the index stores it
    (pipeline.index), and a search of a generation indexed before analyzer 3 recounts it here.
    A few CJK terms (a query's) are counted with str.count; many (a chunk's own, when it is
    indexed) from one pass over the text: one scan of it per term made that quadratic."""
    normal = normalise(text)
    terms = list(terms)
    counts: Counter = Counter()
    words: Counter | None = None
    cjk: Counter | None = None
    if sum(1 for term in terms if is_cjk_term(term)) > _CJK_SCANS_MAX:
        cjk = _cjk_counts(normal)
    for term in terms:
        if is_cjk_term(term):
            n = normal.count(term) if cjk is None else cjk.get(term, 0)
        else:
            if words is None:
                words = Counter(word_terms(normal))
            n = words.get(term, 0)
        if n:
            counts[term] = n
    return counts


_CJK_RUN = re.compile(rf"[{CJK_CHARS}]+")
# Up to this many CJK terms, one str.count each beats building every count of the text.
_CJK_SCANS_MAX = 32


def _cjk_counts(normal: str) -> Counter:
    """Every CJK character's and bigram's count in `normal`, as str.count gives it: occurrences
    that do not overlap, so a run of k equal characters holds k // 2 of their bigram."""
    counts: Counter = Counter()
    for run in _CJK_RUN.findall(normal):
        counts.update(run)
        counts.update(run[i : i + 2] for i in range(len(run) - 1) if run[i] != run[i + 1])
        for char, group in itertools.groupby(run):
            repeats = sum(1 for _ in group) // 2
            if repeats:
                counts[char + char] += repeats
    return counts


# Lucene's English stop words (its StandardAnalyzer's set), as terms. A query leaves them out of
# its keyword terms unless nothing else is left; the index keeps them. In a small KB a shared "to"
# or "at" weighs half a content word (its idf over three documents), and it ranked a store's
# opening hours first for "How long do I have to return an item?". In a big one their idf is
# already near zero (scifact: bench/README.md, stop 26).
QUERY_STOP_WORDS = frozenset(word_term(word) for word in [
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not",
    "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was",
    "will", "with"])


def query_terms(query: str) -> list[str]:
    """The query's keyword terms, each once, in order; English stop words left out unless the
    query has nothing else."""
    terms = list(dict.fromkeys(keyword_terms(query)))
    return [term for term in terms if term not in QUERY_STOP_WORDS] or terms


# The formulae a Chinese question is wrapped in when typed as chat — greetings, "may I ask",
# thanks, "please tell me", urgency — and the modal particles that end a clause; and English chat
# words. Counted among a question's terms, at the idf of a term nothing holds, they made a covered
# question look uncovered to the extractive answer generator (answers.generators; answerability
# measured with them cut, bench/README.md stop 49, and left as it was). They are cut from the
# question's normal text (Traditional folded), not its terms, since a CJK term is a character or a
# pair: cutting 好 would cut it from 什么材质的好 too; and only where a formula stands as one — a
# greeting or an asking phrase where a clause starts, thanks and urgency as a clause of their own,
# particles where a clause ends — so 大家电, 在线等待 and 感谢信 keep their words.
_CLAUSE_START = r"(?:^|(?<=[\s,.?!:;。、~～]))"
_CLAUSE_END = r"(?=[\s,.?!:;。、~～]|$)"
_OPENING = ("你好", "您好", "大家好", "各位好", "嗨", "哈喽", "请问一下", "请问", "请教一下", "请教", "想问一下",
            "想问问", "想问", "问一下", "问下", "咨询一下", "想咨询一下", "我想知道", "想知道", "谁知道",
            "有谁知道", "有人知道", "有没有人知道", "求助", "求问", "求大神", "大神们")
_CLAUSE = ("大家", "各位", "谢谢你", "谢谢您", "谢谢大家", "谢谢", "多谢", "感谢", "先谢了", "先谢谢了",
           "麻烦告诉我", "麻烦问一下", "麻烦", "告诉我", "帮我看看", "帮忙看看", "帮我", "帮忙", "能不能告诉我",
           "可以告诉我", "在线等", "挺急的", "很急", "急急急", "急求", "知道的", "求解答")


def _alternatives(phrases: tuple[str, ...]) -> str:
    return "|".join(sorted(phrases, key=len, reverse=True))


_CHAT_FORMULAE = re.compile(
    f"{_CLAUSE_START}(?:{_alternatives(_OPENING)})"
    f"|{_CLAUSE_START}(?:{_alternatives(_CLAUSE)})[了啊呀哦啦]*{_CLAUSE_END}"
    f"|[吗呢啊呀哦嘛哈啦]+{_CLAUSE_END}"
)
CHAT_WORDS = frozenset(word_term(word) for word in [
    "hi", "hello", "hey", "thanks", "thank", "help", "wonder", "wondering", "quick", "question", "explain"])


def asked_terms(question: str, *, held: Callable[[str], bool] | None = None) -> set[str]:
    """The keyword terms of what a question asks: its terms without the formulae of chat — but
    those `held` says the text it is read against holds (a formula the knowledge itself has is a
    word of it) — and the whole question's terms if nothing else is left."""
    text = normalise(question)
    for _ in range(4):  # "你好请问一下…": each cut formula may start the next clause
        cut = _CHAT_FORMULAE.sub(" ", text)
        if cut == text:
            break
        text = cut
    every = set(keyword_terms(question))
    asked = set(keyword_terms(text)) - CHAT_WORDS
    if held is not None:
        asked |= {term for term in every if held(term)}
    return asked or every
