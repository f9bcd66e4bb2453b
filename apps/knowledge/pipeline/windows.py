"""Sentence windows: a finer level inside each child chunk.

A question is usually written from one or two sentences of a ~768-character child; scored against
the whole child, that sentence's match is diluted by the rest (measured, bench/README.md "Sentence
windows", stop 19: e5-small's cosine on drcd 0.82 nDCG@10 over children, 0.93 over their best
window). So each child also gets its text cut into windows of at most `width` characters, packed
at sentence ends without overlap; each window is embedded and keyword-indexed under the child's
chapter path, as the child is (pipeline.index). Windows are never searched for themselves: the
channels find children, and hybrid fusion then reads the windows of its candidates for their best
window cosine and BM25 (pipeline.fusion, `hybrid_window_*` in retrieval_settings).

The width is a generation's (ChunkStrategy.window_chars, snapshotted from
KNOWLEDGE_WINDOW_CHARS when a build starts; 0 = no windows), so a rebuild is reproducible and a
change reaches a KB at its next rebuild. It counts Chinese characters: a text without any (English,
say) gets WESTERN_WIDTH_FACTOR times as many, about as many words as the width has characters, and
its sentences end at a full stop too. On scifact (a 2,000-passage sub-corpus, the vector channel
alone, bench/README.md stops 22 and 23), nDCG@10 folds A / B: the passage alone 0.7313 / 0.7507;
the mean of passage and best-window cosine 0.7669 / 0.7692 with 96-character windows (31,360) and
0.7603 / 0.7731 with 384 (8,714); with the full stop as a sentence end (10,175 windows of 384) the
best window alone 0.7639 / 0.7734 instead of 0.7502 / 0.7566, the mean 0.7584 / 0.7727.
"""

from __future__ import annotations

import re

from apps.knowledge.pipeline.terms import has_cjk

WESTERN_WIDTH_FACTOR = 4

# A sentence ends after one of these (Chinese and Western sentence marks, semicolons, a line break).
SENTENCE_END = re.compile(r"(?<=[。！？!?；;\n])")
# In a text without Chinese characters, also after a full stop before a space (an abbreviation's
# stop cuts too; packing joins the pieces again where they fit).
WESTERN_SENTENCE_END = re.compile(SENTENCE_END.pattern + r"|(?<=\.)(?=\s)")


def sentence_pieces(text: str, width: int, ends: re.Pattern[str] = SENTENCE_END) -> list[tuple[int, int]]:
    """[start, end) spans of `text`'s sentences (ending where `ends` matches), surrounding
    whitespace left out, a sentence longer than `width` cut in pieces of `width` characters."""
    spans: list[tuple[int, int]] = []
    at = 0
    for sentence in ends.split(text):
        start, end = at, at + len(sentence)
        at = end
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        spans.extend((lo, min(lo + width, end)) for lo in range(start, end, width))
    return spans


def window_spans(text: str, width: int) -> list[tuple[int, int]]:
    """The windows of `text`: [start, end) spans of at most `width` characters (WESTERN_WIDTH_FACTOR
    times as many in a text without Chinese characters), each as many whole sentences (or pieces of
    one) as fit, one after another, no overlap; none for width 0 or blank text. A text that fits in
    one window is one window, the text itself (trimmed)."""
    if width <= 0:
        return []
    ends = SENTENCE_END
    if not has_cjk(text):
        width *= WESTERN_WIDTH_FACTOR
        ends = WESTERN_SENTENCE_END
    pieces = sentence_pieces(text, width, ends)
    windows: list[tuple[int, int]] = []
    first = 0
    while first < len(pieces):
        start, end = pieces[first]
        last = first + 1
        while last < len(pieces) and pieces[last][1] - start <= width:
            end = pieces[last][1]
            last += 1
        windows.append((start, end))
        first = last
    return windows
