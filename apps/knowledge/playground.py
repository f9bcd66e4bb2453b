"""The operator search playground on a KB's admin page: its form, and hits made ready to show.

Content is escaped first and only then are the query's keyword terms wrapped in <mark>, so no
document text ever reaches the page unescaped; its bidi controls are then shown as escapes
(apps.core.bidi.quoted_text_html), not obeyed. Terms are matched the way pipeline.terms reads
text: case- and width-insensitively, Western words whole and by their stem, Traditional and
Simplified Chinese alike.

Each hit also gets a sentence on why it ranks there (explain_sentence), and the page lists the
operator's recent searches on the KB (PlaygroundQuery, recorded by playground_extra) with a button
that runs each again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from django import forms
from django.http import QueryDict
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from apps.core.bidi import quoted_text_html
from apps.knowledge import selectors, services
from apps.knowledge.pipeline.candidates import Hit
from apps.knowledge.pipeline.retrieval_settings import retrieval_settings
from apps.knowledge.pipeline.retrieve import SearchResult
from apps.knowledge.pipeline.terms import CJK_CHARS, keyword_terms, normalise

QUERY_MAX_CHARS = 2000
TOP_K_DEFAULT = 5
TOP_K_MAX = 50
MODE_DEFAULT = "hybrid"
MODE_CHOICES = [("hybrid", "hybrid (vector + keyword)"), ("vector", "vector"), ("keyword", "keyword")]
TIMING_NAMES = ["keyword_ms", "query_embedding_ms", "vector_ms", "fusion_ms", "total_ms"]
CHAPTER_SEPARATOR = " / "


SCORE_THRESHOLD_HELP = (
    "Optional, −1 to 1: hits scoring below it are left out. In hybrid mode with convex fusion a score is the hit's "
    "fused score (relative to this query's candidates, the best near 1) times how likely the knowledge base "
    "answers the question at all — with the local e5 model; other models keep the relative score. With RRF "
    "every score is at most 2/61 (0.033). The vector mode's cosine is the absolute measure.")


class PlaygroundSearchForm(forms.Form):
    query = forms.CharField(max_length=QUERY_MAX_CHARS,
                            widget=forms.TextInput(attrs={"size": 70, "autofocus": True}),
                            # The browser cuts a longer paste at the limit without a word: said here.
                            help_text=f"At most {QUERY_MAX_CHARS:,} characters: a longer paste is cut there.")
    mode = forms.ChoiceField(choices=MODE_CHOICES, required=False, initial=MODE_DEFAULT)
    top_k = forms.IntegerField(label="Top k", min_value=1, max_value=TOP_K_MAX, required=False,
                               initial=TOP_K_DEFAULT, widget=forms.NumberInput(attrs={"style": "width:5em"}))
    score_threshold = forms.FloatField(min_value=-1.0, max_value=1.0, required=False,
                                       widget=forms.NumberInput(attrs={"step": "any", "style": "width:6em"}),
                                       help_text=SCORE_THRESHOLD_HELP)

    @classmethod
    def from_params(cls, params: QueryDict, *, submitted: bool = False) -> PlaygroundSearchForm:
        """A submitted form (a POST), or a GET carrying any of the form's fields, is a search: the
        form is bound to it, with the defaults filled in so the page shows what ran. A bare GET
        gets the empty form."""
        if not submitted and not any(name in params for name in cls.base_fields):
            return cls()
        data = params.copy()
        data.setdefault("mode", MODE_DEFAULT)
        data.setdefault("top_k", str(TOP_K_DEFAULT))
        return cls(data)

    def clean_mode(self) -> str:
        return self.cleaned_data.get("mode") or MODE_DEFAULT

    def clean_top_k(self) -> int:
        top_k = self.cleaned_data.get("top_k")
        return TOP_K_DEFAULT if top_k is None else top_k


_TOKEN = re.compile(rf"(?P<entity>&(?:[a-z]+|#x?[0-9a-f]+);)|(?P<cjk>[{CJK_CHARS}]+)|(?P<word>[^\W_{CJK_CHARS}]+)",
                    re.IGNORECASE)


def _marked_cjk(run: str, terms: set[str]) -> str:
    """`run` with each stretch covered by a query character or bigram wrapped in one <mark>."""
    folded = normalise(run)
    if len(folded) != len(run):  # normalisation changed the length: no safe offsets
        return run
    covered = [False] * len(run)
    for i, ch in enumerate(folded):
        if ch in terms:
            covered[i] = True
        if folded[i : i + 2] in terms and i + 1 < len(run):
            covered[i] = covered[i + 1] = True
    out, i = [], 0
    while i < len(run):
        j = i
        while j < len(run) and covered[j] == covered[i]:
            j += 1
        out.append(f"<mark>{run[i:j]}</mark>" if covered[i] else run[i:j])
        i = j
    return "".join(out)


def highlight(text: str, terms: Iterable[str]) -> SafeString:
    """`text` escaped, with what the keyword channel matched wrapped in <mark>: each word whose
    term (stem, folded, any case or width) is a query term, and each run of CJK characters covered
    by a query character or bigram (Traditional and Simplified alike). Tokens are read from the
    escaped text with HTML entities taken whole, so a mark can never cut into an entity."""
    escaped = str(escape(text))
    wanted = {t for t in terms if t}
    if not wanted:
        return mark_safe(escaped)  # noqa: S308 -- escaped above

    def mark(match: re.Match) -> str:
        found = match.group()
        if match.lastgroup == "cjk":
            return _marked_cjk(found, wanted)
        if match.lastgroup == "word" and any(t in wanted for t in keyword_terms(found)):
            return f"<mark>{found}</mark>"
        return found

    return mark_safe(_TOKEN.sub(mark, escaped))  # noqa: S308 -- only <mark> tags added to escaped text


@dataclass(frozen=True)
class PlaygroundHit:
    rank: int
    hit: Hit
    content_html: SafeString
    chapter_parts: list[str]
    explain: dict
    window: tuple[int, int, int] | None  # (start, end, parent length) when the content was cut
    why: str = ""


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def explain_sentence(explain: Mapping, *, candidate_limit: int) -> str:
    """One plain sentence on why a hit ranks where it does: its rank and score in each channel
    that ran, the keyword terms it matched, and how the channels were fused."""
    if not explain:
        return ""
    parts = []
    vector, keyword = explain.get("vector") or {}, explain.get("keyword") or {}
    if vector.get("rank") is not None:
        parts.append(f"{_ordinal(vector['rank'])} by meaning (cosine {vector['score']:.3f})")
    elif vector.get("score") is not None:
        parts.append(f"beyond the vector channel's top {candidate_limit} (cosine {vector['score']:.3f})")
    terms = explain.get("matched_terms") or []
    if keyword.get("rank") is not None:
        parts.append(f"{_ordinal(keyword['rank'])} by keywords (BM25 {keyword['score']:.2f}, "
                     f"matching {', '.join(terms)})")
    elif keyword.get("score"):
        parts.append(f"beyond the keyword channel's top {candidate_limit} (BM25 {keyword['score']:.2f})")
    elif keyword.get("score") is not None:
        parts.append("no query term in its text")
    if not parts:
        return ""
    sentence = "Ranked " + " and ".join(parts)
    if explain.get("dense_weight") is not None:
        weight = explain["dense_weight"]
        sentence += (f"; fused {explain.get('fused_score', 0):.3f} = {weight:.2f} × meaning + "
                     f"{1 - weight:.2f} × keywords, each scaled to the best candidate")
        window = explain.get("window") or {}
        if window.get("cosine") is not None:
            sentence += (f" and blended with those of its best sentence window (cosine {window['cosine']:.3f}, "
                         f"BM25 {window.get('bm25') or 0:.2f})")
        elif window.get("blend") == "own scores":
            # Outside the candidates whose windows are read (or without windows): its own cosine
            # and BM25 stood in for a window's, scaled with the windows read.
            sentence += ", its own scores standing in for a sentence window's (its windows were not read)"
    if explain.get("answerability") is not None:
        sentence += (f"; then × {explain['answerability']:.2f}, how likely the knowledge base answers "
                     "this question at all")
    return sentence + "."


def terms_as_typed(terms: Iterable[str], query: str) -> list[str]:
    """The matched keyword terms as the query has them: the index reads text folded onto
    Simplified Chinese (and lower case, NFKC), so a Traditional query's 退貨 matched as 退货. A term
    found in the query's folded form is shown as the query writes it there; the others (a Western
    word's stem, a query whose folding changes its length) as they are."""
    folded = normalise(query)
    aligned = len(folded) == len(query)
    shown = []
    for term in terms:
        at = folded.find(term) if aligned else -1
        shown.append(query[at:at + len(term)] if at >= 0 else term)
    return list(dict.fromkeys(shown))


def playground_hits(*, hits: Iterable[Hit], query: str, candidate_limit: int | None = None) -> list[PlaygroundHit]:
    """Hits ready for the page: ranked, content highlighted with the query's keyword terms (the
    terms the keyword channel matches), matched terms as the query writes them, chapter path split
    for a breadcrumb."""
    terms = set(keyword_terms(query))
    out = []
    for rank, hit in enumerate(hits, start=1):
        metadata = hit.metadata or {}
        window = None
        if metadata.get("truncated") and metadata.get("parent_window"):
            start, end = metadata["parent_window"]
            window = (start, end, metadata.get("parent_chars", end))
        explain = dict(hit.explain or {})
        if explain.get("matched_terms"):
            explain["matched_terms"] = terms_as_typed(explain["matched_terms"], query)
        out.append(PlaygroundHit(
            rank=rank, hit=hit, content_html=quoted_text_html(highlight(hit.content, terms)),
            chapter_parts=[p for p in (hit.chapter_path or "").split(CHAPTER_SEPARATOR) if p],
            explain=explain, window=window,
            why=explain_sentence(explain, candidate_limit=candidate_limit or _candidate_limit()),
        ))
    return out


def playground_timings(timings_ms: Mapping[str, float]) -> list[tuple[str, float]]:
    """(label, milliseconds) in pipeline order, then any others the engine reports."""
    names = [n for n in TIMING_NAMES if n in timings_ms] + sorted(set(timings_ms) - set(TIMING_NAMES))
    return [(name.removesuffix("_ms").replace("_", " "), round(timings_ms[name], 2)) for name in names]


def _candidate_limit() -> int:
    return retrieval_settings().search_candidates


def playground_params(*, query: str, mode: str, top_k: int, score_threshold: float | None) -> dict[str, str]:
    """The form's fields for these search parameters: a "Run again" button posts them (a link
    could not carry a long query)."""
    params = {"query": query, "mode": mode, "top_k": str(top_k)}
    if score_threshold is not None:
        params["score_threshold"] = str(score_threshold)
    return params


def playground_extra(*, request, kb, form: PlaygroundSearchForm, result: SearchResult | None) -> dict:
    """What the page shows beside the hits: whether the KB has an index to search (`missing`: no
    active generation; `empty`: nothing indexed in it yet; `ready`), the channels' candidate
    limit (a hit's rank in a channel is blank beyond it), and the operator's recent searches on
    this KB — the one that just ran recorded first, each with the fields its "Run again" button posts."""
    if result is not None:
        data = form.cleaned_data
        services.playground_query_record(user=request.user, kb=kb, query=data["query"], mode=data["mode"],
                                         top_k=data["top_k"], score_threshold=data["score_threshold"],
                                         hit_count=len(result.hits))
    now = timezone.now()
    recent = [
        (entry, playground_params(query=entry.query, mode=entry.mode, top_k=entry.top_k,
                                  score_threshold=entry.score_threshold),
         (now - entry.ran_at).total_seconds() < 60)
        for entry in selectors.playground_recent_queries(user=request.user, kb=kb)
    ]
    return {
        "index_state": selectors.generation_active_state(kb=kb),
        "candidate_limit": _candidate_limit(),
        "recent_queries": recent,
    }
