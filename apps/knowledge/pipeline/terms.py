"""Keyword terms: the one tokenisation that indexing and querying share.

CJK runs become overlapping character bigrams (a one-character run stays a single character);
everything else becomes lower-cased words of letters and digits. Text is NFKC-normalised first,
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
    for match in _TOKEN.finditer(unicodedata.normalize("NFKC", text).lower()):
        run = match.group()
        if match.lastgroup == "cjk":
            if len(run) == 1:
                terms.append(run)
            else:
                terms.extend(run[i : i + 2] for i in range(len(run) - 1))
        elif len(run) <= MAX_WORD_CHARS:
            terms.append(run)
    return terms
