"""The offline answer generator: quote the sentence (or two) of the evidence that best covers the
question, with its citation. It says nothing the evidence does not say, so it is grounded by
construction; when no sentence covers enough of the question it says the knowledge holds no
answer instead of quoting something unrelated.

A sentence's score is the idf-weighted share of the question's keyword terms (CJK characters
and bigrams, stemmed words; English function words and the formulae of a question typed as chat
left out, base.question_terms; idf over the evidence's sentences) that it contains, plus a small
preference for higher-ranked evidence. A sentence longer than
LONG_SENTENCE_CHARS is cut to its best window of clauses, so the answer stays short and
"contains the gold answer" is earned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from apps.answers.generators.base import Draft, Evidence, coverage, idf_weights, question_terms, sentences, term_set

MIN_SUPPORT = 0.2
SECOND_SENTENCE_RATIO = 0.8
LONG_SENTENCE_CHARS = 120
ANSWER_MAX_CHARS = 200
RANK_PREFERENCE = 0.03
_CLAUSE_END = re.compile(r"(?<=[，,、：:])")


@dataclass(frozen=True)
class _Candidate:
    ref: int
    position: int
    text: str
    terms: frozenset[str]


def _windows(sentence: str) -> list[str]:
    if len(sentence) <= LONG_SENTENCE_CHARS:
        return [sentence]
    clauses = [c for c in _CLAUSE_END.split(sentence) if c]
    out = []
    for start in range(len(clauses)):
        text = ""
        for clause in clauses[start:]:
            if text and len(text) + len(clause) > LONG_SENTENCE_CHARS:
                break
            text += clause
        out.append(text[:LONG_SENTENCE_CHARS * 2].strip())
    return out


class ExtractiveGenerator:
    name = "extractive"

    def __init__(self, **options) -> None:
        self.options = options

    def generate(self, *, question: str, evidence: list[Evidence]) -> Draft:
        candidates = [
            _Candidate(ref=item.ref, position=i, text=window, terms=frozenset(term_set(window)))
            for item in evidence
            for i, sentence in enumerate(sentences(item.text))
            for window in _windows(sentence)
        ]
        idf, _n = idf_weights(c.terms for c in candidates)
        needed = question_terms(question, held=idf.__contains__)
        if not candidates or not needed:
            return Draft(answer="", cited=[], quotes={}, grounded=True, found=False,
                         missing_points=[question])
        unseen = max(idf.values(), default=1.0)

        def score(candidate: _Candidate) -> float:
            return coverage(needed, set(candidate.terms), idf, unseen=unseen)

        ranked = sorted(candidates, key=lambda c: (-(score(c) + RANK_PREFERENCE / c.ref), c.ref, c.position))
        best = ranked[0]
        best_support = score(best)
        if best_support < MIN_SUPPORT:
            return Draft(answer="", cited=[], quotes={}, grounded=True, found=False, support=best_support,
                         missing_points=[question])
        chosen = [best]
        for other in ranked[1:4]:
            if other.text == best.text or best.text in other.text or other.text in best.text:
                continue
            if (score(other) >= SECOND_SENTENCE_RATIO * best_support
                    and len(best.text) + len(other.text) <= ANSWER_MAX_CHARS):
                chosen.append(other)
            break
        chosen.sort(key=lambda c: (c.ref, c.position))
        answer = " ".join(f"{c.text}[{c.ref}]" for c in chosen)
        quotes: dict[int, str] = {}
        for c in chosen:
            quotes[c.ref] = f"{quotes[c.ref]} {c.text}" if c.ref in quotes else c.text
        covered = set().union(*(c.terms for c in chosen))
        return Draft(answer=answer, cited=sorted(quotes), quotes=quotes, grounded=True,
                     support=coverage(needed, covered, idf, unseen=unseen), found=True)
