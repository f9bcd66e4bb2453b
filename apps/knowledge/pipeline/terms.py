"""Keyword terms: the one tokenisation that indexing and querying share.

CJK runs become their characters plus overlapping character bigrams (measured on
dureader-robust-a: BM25 over unigrams+bigrams 0.824 nDCG@10, bigrams alone 0.794); everything
else becomes lower-cased words of letters and digits. Text is NFKC-normalised first,
so full-width letters and digits match their ASCII forms. No dictionary: zero dependencies, and
good on product codes and names; a word segmenter can replace it later (change both sides here).
"""

from __future__ import annotations

import re
import unicodedata

# Han (with extensions and compatibility ideographs), kana and Hangul syllables.
_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af\U00020000-\U0002fa1f"
_TOKEN = re.compile(rf"(?P<cjk>[{_CJK}]+)|(?P<word>[^\W_{_CJK}]+)")
# Longer "words" are base64, hashes or minified code: no one searches for them.
MAX_WORD_CHARS = 64


def keyword_terms(text: str) -> list[str]:
    """The terms of `text`, in order, repeats kept (the index counts them)."""
    terms: list[str] = []
    for match in _TOKEN.finditer(normalise(text)):
        run = match.group()
        if match.lastgroup == "cjk":
            terms.extend(run)
            terms.extend(run[i : i + 2] for i in range(len(run) - 1))
        elif len(run) <= MAX_WORD_CHARS:
            terms.append(run)
    return terms


def normalise(text: str) -> str:
    """The form keyword_terms reads text in (NFKC, lower case): count terms in this."""
    if unicodedata.is_normalized("NFKC", text):
        return text.lower()
    return unicodedata.normalize("NFKC", text).lower()


_WORD = re.compile(rf"[^\W_{_CJK}]+")


def word_terms(normal: str) -> list[str]:
    """The Western-word terms of already normalised text (keyword_terms without the CJK part)."""
    return [word for word in _WORD.findall(normal) if len(word) <= MAX_WORD_CHARS]


def is_cjk_term(term: str) -> bool:
    return bool(_CJK_CHAR.match(term))


_CJK_CHAR = re.compile(rf"[{_CJK}]")
