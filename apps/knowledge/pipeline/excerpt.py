"""What a hit shows of its passage for a query: an excerpt of whole sentences that begins with the
sentence holding the most of the query's terms.

A search hit's text is its section cut to a byte budget around the chunk that matched (pipeline.
rollup); a short summary taken from the front of that text can stop just before the sentence the
question is about (found in a trial: a 512-byte summary of a 1,000-character chunk ending "…kept in
the red box behind till numbe"). `focused_excerpt` picks the sentence instead: within the matched
chunk's span of the section, the sentence whose keyword terms (pipeline.terms, the channels' own
tokenisation, English stop words left out) cover the most of the query's, a single CJK character
weighing a quarter of a word or bigram; ties go to the earlier sentence; with no term in common (a
match of meaning alone) the span's first sentence. The excerpt runs on from there over whole
sentences while they fit, then takes sentences before it while they fit; a sentence longer than the
budget is cut, at a space when there is one near the cut. It never starts inside a word.
"""

from __future__ import annotations

from apps.core.jsonbytes import json_text_bytes, json_text_prefix
from apps.knowledge.pipeline.terms import has_cjk, is_cjk_term, keyword_terms, query_terms
from apps.knowledge.pipeline.windows import WESTERN_SENTENCE_END, sentence_pieces

CJK_CHARACTER_WEIGHT = 0.25
# A cut inside an over-long sentence backs up to a space at most this many characters away.
WORD_BACKOFF_CHARS = 24


def _weights(query: str) -> dict[str, float]:
    return {term: CJK_CHARACTER_WEIGHT if is_cjk_term(term) and len(term) == 1 else 1.0
            for term in query_terms(query)}


def _cut_at_space(text: str) -> str:
    """`text` shortened to end before its last space within WORD_BACKOFF_CHARS of its end, when the
    cut fell inside a word of a text without CJK characters."""
    if has_cjk(text[-WORD_BACKOFF_CHARS:]):
        return text
    space = text.rfind(" ", max(0, len(text) - WORD_BACKOFF_CHARS))
    return text[:space].rstrip() if space > 0 else text


def focused_excerpt(text: str, query: str, *, max_bytes: int, region: tuple[int, int] | None = None) -> str:
    """At most `max_bytes` of JSON string (apps.core.jsonbytes) of `text` for `query` (the module
    doc), the anchor sentence chosen among those overlapping `region`, [start, end) in characters
    (the whole text when None or empty)."""
    if json_text_bytes(text) <= max_bytes:
        return text
    # Chinese and Western sentence ends in any text: one Chinese name in an English section must not
    # make its sentences one (windows.py chooses by script, for its widths; an excerpt needs no width).
    sentences = sentence_pieces(text, len(text), WESTERN_SENTENCE_END)  # whole sentences, however long
    if not sentences:
        return json_text_prefix(text, max_bytes)
    lo, hi = region if region and region[0] < region[1] else (0, len(text))
    inside = [i for i, (start, end) in enumerate(sentences) if start < hi and end > lo] or list(range(len(sentences)))
    weights = _weights(query)

    def score(i: int) -> float:
        start, end = sentences[i]
        found = set(keyword_terms(text[start:end]))
        return sum(weight for term, weight in weights.items() if term in found)

    anchor = max(inside, key=lambda i: (score(i), -i))
    first = last = anchor

    def fits(a: int, b: int) -> bool:
        return json_text_bytes(text[sentences[a][0]:sentences[b][1]]) <= max_bytes

    if not fits(anchor, anchor):
        start, end = sentences[anchor]
        piece = json_text_prefix(text[start:end], max_bytes)
        return _cut_at_space(piece) if len(piece) < end - start else piece
    while last + 1 < len(sentences) and fits(first, last + 1):
        last += 1
    while first > 0 and fits(first - 1, last):
        first -= 1
    return text[sentences[first][0]:sentences[last][1]]
