"""Folding Traditional Chinese characters onto their Simplified forms, for matching only.

A question typed in Simplified Chinese should find a passage written in Traditional Chinese and the
other way round, and the keyword index should count 國 and 国 as one character. Stored text is
never changed; keyword terms are computed over the folded form. The embedder reads the text as
written: folding it too lowered e5's vector nDCG@10 on drcd (bench/README.md, stop 17).

The table is OpenCC's character table (TSCharacters, shipped in the pinned
`opencc-python-reimplemented` package), reduced to what can be folded safely one character at a
time: a character is folded only when it never occurs in Simplified text (it is neither a
Simplified character nor one of a Traditional character's Simplified candidates), so 乾, 於, 麽 and
著 — all used in Simplified text too — stay as they are. Folding replaces one code point by one
code point, so offsets into folded text are offsets into the original. Measured on the dev sets:
the fold changes 27 % of drcd-dev's characters and 0.01 % of dureader's and cmrc's (Traditional
forms quoted in Simplified text).
"""

from __future__ import annotations

from functools import cache
from importlib import resources


def _rows(name: str):
    text = resources.files("opencc").joinpath("dictionary", name).read_text(encoding="utf-8")
    for line in text.splitlines():
        if "\t" in line:
            source, targets = line.split("\t", 1)
            yield source, targets.split(" ")


@cache
def folding_table() -> dict[int, str]:
    """{code point: Simplified character} for str.translate."""
    simplified = {source for source, _ in _rows("STCharacters.txt")}
    traditional = dict(_rows("TSCharacters.txt"))
    for targets in traditional.values():
        simplified.update(targets)
    return {
        ord(source): targets[0]
        for source, targets in traditional.items()
        if len(source) == 1 and len(targets[0]) == 1 and source not in simplified
    }


@cache
def _traditional_characters() -> frozenset[str]:
    return frozenset(chr(code) for code in folding_table())


def fold(text: str) -> str:
    """`text` with Traditional-only characters replaced by their Simplified forms (same length).
    Hot (every keyword-scored candidate of every search): text without such a character, which
    is most text, is returned after one set scan (~8 µs for 270 characters) instead of a
    translate through the table (~45 µs)."""
    if _traditional_characters().isdisjoint(text):
        return text
    return text.translate(folding_table())


def is_traditional(text: str) -> bool:
    """Whether `text` has a character only Traditional Chinese uses."""
    return not _traditional_characters().isdisjoint(text)
