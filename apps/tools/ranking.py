"""The deterministic lexical order of capability search (ACC contract): pure, no database.

Tiers, each deciding only between tools the tiers before it left tied:

1. the tool's name equals the query;
2. the name contains the query;
3. the query appears inside name + scope + description;
4. each query word (English function words left out) found in the name (weight 3), the scope (2),
   the description (1);
5. shared character bigrams between the query and name + scope + description, so a Chinese
   query, which has no spaces to split words on, still ranks;
6. the name, ascending.

Nothing is filtered: a tool that scores zero everywhere still takes its place by name.
Matching ignores case, and treats ``_``, ``-``, ``.`` and ``/`` in names and scopes as spaces,
so ``order status`` finds ``order_status``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

QUERY_MAX_CHARS = 2000
_SEPARATORS = re.compile(r"[\s_\-./:]+")
_WORD = re.compile(r"\w+")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_WORD_WEIGHTS = (3, 2, 1)  # name, scope, description
# Words that say nothing about which tool is meant; they would only add the same noise to most
# tools. Verbs, modals and "please" count ("get" in get_item: verbs name tools). Measured
# (bench/README.md, capability search, 2026-12-04): counting every word loses 0.044 nDCG@10 of the
# lexical order on the 128 proxy requests; counting these ten too is even with leaving them out
# (0.207 against 0.211; held out 0.202 against 0.198), and closer to the contract's "each query word".
STOP_WORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "has", "have", "i", "in", "is", "it", "its",
    "me", "my", "of", "on", "or", "our", "that", "the", "their", "them", "there", "these", "this", "to", "us", "we",
    "what", "when", "where", "which", "who", "with", "you", "your",
})


@dataclass(frozen=True)
class RankText:
    """What one tool offers to the lexical order."""

    name: str
    scope: str
    description: str


def query_clean(text: str) -> str:
    """The query as searched: control characters removed (tab and newline become spaces), lone
    surrogates dropped, outer whitespace trimmed, at most QUERY_MAX_CHARS characters."""
    text = text.replace("\t", " ").replace("\n", " ").replace("\r", " ")
    text = _CONTROL.sub("", text)
    text = "".join(ch for ch in text if not 0xD800 <= ord(ch) <= 0xDFFF)
    return text.strip()[:QUERY_MAX_CHARS]


def _norm(text: str) -> str:
    return _SEPARATORS.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def _bigrams(text: str) -> set[str]:
    compact = "".join(_WORD.findall(text))
    return {compact[i:i + 2] for i in range(len(compact) - 1)}


@dataclass(frozen=True)
class Prepared:
    """A tool's text, normalized once: what every query is matched against."""

    raw_name: str
    name: str
    scope: str
    description: str
    everything: str
    bigrams: frozenset[str]


def prepare(tools: Sequence[RankText]) -> tuple[Prepared, ...]:
    out = []
    for tool in tools:
        name, scope, description = _norm(tool.name), _norm(tool.scope), _norm(tool.description)
        everything = f"{name} {scope} {description}"
        out.append(Prepared(tool.name, name, scope, description, everything, frozenset(_bigrams(everything))))
    return tuple(out)


def _key(query: str, words: list[str], query_bigrams: set[str], tool: Prepared) -> tuple[int, int, int, int, int, str]:
    word_score = 0
    for word in words:
        for weight, field in zip(_WORD_WEIGHTS, (tool.name, tool.scope, tool.description), strict=True):
            if word in field:
                word_score += weight
    shared = len(query_bigrams & tool.bigrams) if query_bigrams else 0
    return (
        -(bool(query) and tool.name == query),
        -(bool(query) and query in tool.name),
        -(bool(query) and query in tool.everything),
        -word_score,
        -shared,
        tool.raw_name,
    )


def _prepared(tools: Sequence[RankText] | tuple[Prepared, ...]) -> tuple[Prepared, ...]:
    if tools and isinstance(tools[0], Prepared):
        return cast(tuple[Prepared, ...], tools)  # all or none are prepared: the callers pass one kind
    return prepare(cast(Sequence[RankText], tools))


def lexical_ranking(query: str, tools: Sequence[RankText] | tuple[Prepared, ...]) -> tuple[list[int], int]:
    """Indexes of ``tools`` (as given, or already ``prepare``d) in the contract's lexical order for
    ``query`` — all of them — and how many of the first share a word or more with it (tiers 1–4);
    the rest are ordered by shared bigrams alone, which an English query has with nearly every tool."""
    prepared = _prepared(tools)
    normalized = _norm(query)
    words = [word for word in dict.fromkeys(_WORD.findall(normalized)) if word not in STOP_WORDS]
    query_bigrams = _bigrams(normalized)
    keys = [_key(normalized, words, query_bigrams, tool) for tool in prepared]
    order = sorted(range(len(prepared)), key=keys.__getitem__)
    matched = sum(1 for key in keys if any(key[:4]))
    return order, matched


def lexical_order(query: str, tools: Sequence[RankText] | tuple[Prepared, ...]) -> list[int]:
    """Indexes of ``tools`` in the contract's lexical order for ``query`` — all of them."""
    return lexical_ranking(query, tools)[0]
