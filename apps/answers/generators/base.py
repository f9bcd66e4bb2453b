"""The answer generator interface: a question and numbered evidence in, a cited draft out.

Generators are pure with respect to the database: they read the evidence they are given and
nothing else. A generator that depends on a remote service raises GenerationFailed when that
service cannot answer; the caller turns it into DEPENDENCY_UNAVAILABLE.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Set
from dataclasses import dataclass, field
from typing import Any, Protocol

from apps.knowledge.pipeline.terms import asked_terms, keyword_terms


class GenerationFailed(Exception):
    """The generator's dependency did not answer usably (timeout, refusal, garbage)."""


@dataclass(frozen=True)
class Evidence:
    """One retrieved passage, numbered from 1 in the order it is shown to the generator."""

    ref: int
    document_title: str
    chapter_path: str | None
    text: str
    score: float
    document_id: str = ""
    chunk_id: str = ""


@dataclass(frozen=True)
class Draft:
    """A generator's answer. `quotes` maps each cited ref to the text it was quoted for;
    `support` (0–1) is how much of the question the cited text covers, an input to confidence."""

    answer: str
    cited: list[int]
    quotes: dict[int, str]
    grounded: bool
    missing_points: list[str] = field(default_factory=list)
    support: float = 0.0
    found: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


class AnswerGenerator(Protocol):
    name: str

    def generate(self, *, question: str, evidence: list[Evidence]) -> Draft: ...


_SENTENCE_END = re.compile(r"(?<=[。！？；!?;])|(?<=[.])(?=\s)|\n+")
_MARKER = re.compile(r"\[(\d{1,3})\]")


def sentences(text: str) -> list[str]:
    """Sentences of `text`: Chinese 。！？； and Western .!?; ends, and line breaks."""
    return [part.strip() for part in _SENTENCE_END.split(text) if part and part.strip()]


def markers(text: str) -> list[int]:
    return [int(n) for n in _MARKER.findall(text)]


def strip_markers(text: str) -> str:
    return _MARKER.sub("", text).strip()


def term_set(text: str) -> set[str]:
    return set(keyword_terms(text))


# English function words, as keyword terms (stemmed): a question's "what is the …" says nothing
# about what it asks, and sentences share them with every question.
_ENGLISH_FUNCTION_WORDS = (
    "a an the is are was were be been being am do does did doing have has had having what which who whom "
    "whose when where why how of to in on at by for with about from into onto over under than then and or "
    "but not no nor if so as it its this that these those there here i me my we us our you your he him his "
    "she her they them their can could would should will shall may might must please tell know s t d ll re ve m"
)
FUNCTION_TERMS = frozenset(keyword_terms(_ENGLISH_FUNCTION_WORDS))


def question_terms(question: str, *, held: Callable[[str], bool] | None = None) -> set[str]:
    """The terms that say what a question asks: its keyword terms but English function words and
    the formulae of chat, unless `held` says the evidence holds them (pipeline.terms.asked_terms;
    all its terms but function words if nothing else is left)."""
    return (asked_terms(question, held=held) - FUNCTION_TERMS) or (term_set(question) - FUNCTION_TERMS)


def idf_weights(documents: Iterable[Set[str]]) -> tuple[dict[str, float], int]:
    """Smoothed idf of each term over `documents` (sets of terms), and how many there were."""
    documents = list(documents)
    df: dict[str, int] = {}
    for terms in documents:
        for term in terms:
            df[term] = df.get(term, 0) + 1
    n = len(documents)
    return {term: math.log(1 + n / count) for term, count in df.items()}, n


def coverage(needed: set[str], present: set[str], idf: dict[str, float], *, unseen: float) -> float:
    """The idf-weighted share of `needed` terms found in `present` (0–1)."""
    total = sum(idf.get(term, unseen) for term in needed)
    if total <= 0:
        return 0.0
    return sum(idf.get(term, unseen) for term in needed & present) / total
