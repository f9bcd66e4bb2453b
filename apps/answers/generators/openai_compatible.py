"""An answer generator over an OpenAI-compatible chat completions endpoint.

The prompt numbers the evidence; the model must reply with a JSON object
`{"answer": "... [n] ...", "citations": [n, ...], "missing_points": [...]}`. The reply is checked
here, not trusted: a citation that names no evidence, or an answer sentence whose words the
evidence it cites (or, uncited, any evidence) does not hold, makes the draft `grounded: false`
and is named in `missing_points`.

Every request has a timeout, transient failures (connection errors, timeouts, HTTP 429 and 5xx)
are retried at most `max_retries` times with a short capped backoff, and the whole call has a
deadline; anything else raises GenerationFailed, whose message never carries the URL or the key.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import httpx

from apps.answers.generators.base import (
    Draft,
    Evidence,
    GenerationFailed,
    idf_weights,
    markers,
    sentences,
    strip_markers,
    term_set,
)
from apps.core.outbound import AnswerTooLarge, post_within, url_unrequestable
from apps.knowledge.pipeline.parsers.base import storable

logger = logging.getLogger(__name__)

SUPPORT_MIN = 0.6
BACKOFF_SECONDS = 0.25
BACKOFF_MAX_SECONDS = 2.0
EVIDENCE_CHARS = 1500
# Missing points an answer names at most: the reply's own, then the checks' findings.
MISSING_POINTS_MAX = 20
# A chat completion's whole answer: the reply asked for is a short JSON object.
REPLY_MAX_BYTES = 4 * 1024 * 1024

SYSTEM_PROMPT = (
    "You answer questions using only the numbered evidence you are given. Reply with one JSON object and "
    'nothing else: {"answer": string, "citations": [numbers], "missing_points": [strings]}. In "answer", '
    "write one or two short sentences in the question's language and put the evidence number in square "
    "brackets, like [2], after each sentence. \"citations\" lists every evidence number you used. "
    '"missing_points" lists the parts of the question the evidence does not answer. If the evidence does '
    'not answer the question, reply with an empty "answer" and the question in "missing_points". Never use '
    "knowledge that is not in the evidence."
)


def claims(answer: str) -> list[str]:
    """The answer's sentences, each with the citation markers written after its full stop."""
    out: list[str] = []
    for part in sentences(answer):
        if out and not strip_markers(part):
            out[-1] = f"{out[-1]}{part}"
        else:
            out.append(part)
    return out


class _Transient(Exception):
    pass


def evidence_prompt(question: str, evidence: list[Evidence]) -> str:
    lines = ["Evidence:"]
    for item in evidence:
        where = " / ".join(part for part in (item.document_title, item.chapter_path or "") if part)
        lines.append(f"[{item.ref}] ({where}) {item.text[:EVIDENCE_CHARS]}")
    lines += ["", f"Question: {question}"]
    return "\n".join(lines)


def _reply_object(content: str) -> dict[str, Any]:
    text = content.strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:  # nested thousands deep: RecursionError answered 500
        raise GenerationFailed("The answer generator replied with something other than JSON.") from exc
    if not isinstance(value, dict) or not isinstance(value.get("answer", ""), str):
        raise GenerationFailed("The answer generator's reply has no answer text.")
    for key in ("citations", "missing_points"):
        if value.get(key) is not None and not isinstance(value[key], list):
            raise GenerationFailed(f"The answer generator's reply has {key} that is not a list.")
    return value


def check_reply(reply: dict[str, Any], evidence: list[Evidence]) -> Draft:
    """The draft a reply makes, with every citation and sentence checked against the evidence."""
    by_ref = {item.ref: item for item in evidence}
    # A JSON reply may escape NUL or a lone surrogate into its text, which no record (or UTF-8
    # answer) can hold: a lone surrogate answered 500, NUL an answer without its record.
    answer = storable(str(reply.get("answer") or "")).strip()
    listed = [n for n in reply.get("citations") or [] if isinstance(n, int) and not isinstance(n, bool)]
    missing = [storable(p[:500]) for p in reply.get("missing_points") or [] if isinstance(p, str) and p.strip()]
    grounded = True
    # In order, once each: a list's membership test made a reply of many citations quadratic.
    cited = list(dict.fromkeys([*markers(answer), *listed]))
    for n in cited:
        if n not in by_ref:
            grounded = False
            missing.append(f"Citation [{n}] names no evidence.")
    evidence_terms = {item.ref: term_set(item.text) for item in evidence}
    idf, _ = idf_weights(evidence_terms.values())
    # Each ref's claims, joined once at the end: adding each claim to a string copied it whole (a
    # reply of 150,000 sentences citing [1], within the reply's bytes, took 15 s).
    claims_of: dict[int, list[str]] = {}
    supported_terms: set[str] = set()
    for sentence in claims(answer):
        own = [n for n in markers(sentence) if n in by_ref]
        claim = strip_markers(sentence)
        terms = term_set(claim)
        if not terms:
            continue
        pool = own or list(by_ref)
        present = set().union(*(evidence_terms[n] for n in pool)) if pool else set()
        weight = sum(idf.get(t, 1.0) for t in terms)
        share = sum(idf.get(t, 1.0) for t in terms & present) / weight if weight else 0.0
        if share < SUPPORT_MIN:
            grounded = False
            missing.append(f"Not supported by the evidence: {claim[:300]}")
            continue
        supported_terms |= terms
        for n in own:
            claims_of.setdefault(n, []).append(claim)
    quotes = {n: " ".join(texts) for n, texts in claims_of.items()}
    return Draft(answer=answer, cited=sorted(n for n in cited if n in by_ref), quotes=quotes,
                 grounded=grounded, missing_points=missing[:MISSING_POINTS_MAX], found=bool(answer),
                 support=1.0 if grounded and answer else 0.0)


class OpenAICompatibleGenerator:
    name = "openai_compatible"

    def __init__(self, *, base_url: str, model: str, api_key: str = "", timeout_seconds: float = 20.0,
                 max_retries: int = 1, **_ignored: Any) -> None:
        base = (base_url or "").rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise GenerationFailed("The answer generator is not configured (no http(s) base URL).")
        if not model:
            raise GenerationFailed("The answer generator is not configured (no model).")
        self.url = f"{base}/chat/completions"
        unrequestable = url_unrequestable(self.url)
        if unrequestable is not None:
            raise GenerationFailed(f"The answer generator's base URL is not a URL a request can be made to "
                                   f"({unrequestable}).")
        self.model = model
        self.api_key = api_key
        self.timeout = max(0.1, float(timeout_seconds))
        self.max_retries = max(0, int(max_retries))

    def _post(self, body: dict[str, Any], *, timeout: float) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            # `timeout` for the whole exchange, not for each read (apps.core.outbound).
            response, data = post_within(self.url, content=json.dumps(body, ensure_ascii=False).encode("utf-8"),
                                         headers=headers, timeout=timeout, max_bytes=REPLY_MAX_BYTES)
        except AnswerTooLarge as error:
            raise GenerationFailed(f"The answer generator's reply is over {REPLY_MAX_BYTES:,} bytes.") from error
        except httpx.HTTPError as error:
            raise _Transient(type(error).__name__) from error
        if response.status_code == 429 or response.status_code >= 500:
            raise _Transient(f"HTTP {response.status_code}")
        if not response.is_success:
            raise GenerationFailed(f"The answer generator refused the request (HTTP {response.status_code}).")
        try:
            return json.loads(data.decode("utf-8"))
        except (ValueError, RecursionError) as error:
            raise GenerationFailed("The answer generator answered with invalid JSON.") from error

    def generate(self, *, question: str, evidence: list[Evidence]) -> Draft:
        body = {
            "model": self.model,
            "temperature": 0,
            "response_format": {"type": "json_object"},
            "messages": [{"role": "system", "content": SYSTEM_PROMPT},
                         {"role": "user", "content": evidence_prompt(question, evidence)}],
        }
        deadline = time.monotonic() + self.timeout * (self.max_retries + 1)
        attempt = 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise GenerationFailed("The answer generator did not answer in time.")
            try:
                payload = self._post(body, timeout=min(self.timeout, remaining))
                break
            except _Transient as transient:
                attempt += 1
                logger.warning("answer generator attempt %d failed: %s", attempt, transient)
                if attempt > self.max_retries:
                    raise GenerationFailed("The answer generator did not answer in time.") from transient
                time.sleep(min(BACKOFF_SECONDS * 2 ** (attempt - 1), BACKOFF_MAX_SECONDS,
                               max(0.0, deadline - time.monotonic())))
        try:
            content = payload["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise GenerationFailed("The answer generator's reply has no message.") from exc
        if not isinstance(content, str):
            raise GenerationFailed("The answer generator's reply has no message.")
        draft = check_reply(_reply_object(content), evidence)
        return Draft(answer=draft.answer, cited=draft.cited, quotes=draft.quotes, grounded=draft.grounded,
                     missing_points=draft.missing_points, support=draft.support, found=draft.found,
                     extra={"model": self.model, "usage": payload.get("usage")})
