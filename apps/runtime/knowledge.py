"""Agent knowledge on demand, protocol `bailing.agent-knowledge.v1`: capabilities, search hints
and paged reads through signed references.

The knowledge *scope* of a route is everything that decides what its agents may read: the route's
knowledge settings and, for each bound knowledge base, its id, embedding model and active index
generation. Its SHA-256 (`knowledge_scope_revision`) changes with any of them.

Search returns at most three hints, one per document, each with a *reference*: a self-contained
token (apps.core.signing, domain REF_DOMAIN) binding the agent client, session, principal and
`on_behalf_of`, the route, the optional run, the scope revision, the document id and the
document's revision (SHA-256 of its title and body). A read presents the reference again and,
after the first page, the *cursor* of the previous page (domain CURSOR_DOMAIN: the reference's
digest, the byte offset of the next page and the bytes the chain has exposed). Neither is an
authorization: every read re-checks the identity, the route, the run, the scope, the document's
ownership, ready state and revision, and refuses with the protocol's error instead of ever
serving another revision. Nothing here writes: no invocation, job or ledger row is created.

A document's readable body is the text of its parent chunks in the KB's active generation, in
order, separated by blank lines (children for a document without parents). Byte budgets are
measured over the exact bytes the views send (KnowledgeJSONRenderer).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import struct
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import OuterRef, Subquery
from rest_framework.renderers import JSONRenderer

from apps.agent_auth.models import AgentSession
from apps.core.errors import ApiError
from apps.core.revisions import canonical_json, revision_of
from apps.core.signing import BadSignature, SignatureExpired, Signer
from apps.knowledge.models import Chunk, Document, IndexGeneration, KnowledgeBase
from apps.knowledge.pipeline.embedders import EmbeddingFailed
from apps.knowledge.pipeline.retrieve import Hit, SearchOptions, clean_query
from apps.knowledge.selectors import knowledge_search, route_knowledge_bases
from apps.ledger.errors import RunNotFound
from apps.ledger.models import Run
from apps.ledger.selectors import run_get_for_session
from apps.routes.models import Route
from apps.runtime.errors import KnowledgeUnavailable

logger = logging.getLogger("bailinghub.runtime")

PROTOCOL = "bailing.agent-knowledge.v1"
CAPABILITIES_SCHEMA = "bailing.agent-knowledge-capabilities.v1"
SEARCH_SCHEMA = "bailing.agent-knowledge-search.v1"
READ_SCHEMA = "bailing.agent-knowledge-read.v1"
DELIVERY_SCHEMA = "bailing.agent-knowledge-delivery.v1"
TRUST = "reference_only"
DELIVERY_MODES = ["inline", "on_demand"]

SEARCH_MAX_RESULTS = 3
SEARCH_MAX_BYTES = 4096
READ_DEFAULT_BYTES = 16384
READ_MIN_BYTES = 4096
READ_MAX_BYTES = 32768
REFERENCE_TTL_SECONDS = 300
READ_CHAIN_MAX_BYTES = 131072
QUERY_MAX_CHARS = 2000
LIMITS = {
    "search_max_results": SEARCH_MAX_RESULTS,
    "search_max_bytes": SEARCH_MAX_BYTES,
    "read_default_bytes": READ_DEFAULT_BYTES,
    "read_max_bytes": READ_MAX_BYTES,
    "reference_ttl_seconds": REFERENCE_TTL_SECONDS,
    "read_chain_max_bytes": READ_CHAIN_MAX_BYTES,
}
# A hint's summary: an excerpt of the hit, at most this many bytes of JSON string. Three hints
# with ordinary titles fit the 4096-byte search budget.
SUMMARY_MAX_BYTES = 512
BODY_SEPARATOR = "\n\n"
# Knowledge reads give up rather than hang: a locked index or a runaway query is "unavailable".
LOCK_TIMEOUT_MS = 2000
STATEMENT_TIMEOUT_MS = 10000

REF_DOMAIN = "bailinghub.agent-knowledge.ref.v1"
CURSOR_DOMAIN = "bailinghub.agent-knowledge.cursor.v1"
REF_SIGNER = Signer(REF_DOMAIN, ttl_seconds=REFERENCE_TTL_SECONDS)
CURSOR_SIGNER = Signer(CURSOR_DOMAIN, ttl_seconds=REFERENCE_TTL_SECONDS)


def now() -> float:
    """The clock references are issued and checked against (tests set it)."""
    return time.time()


# Errors: fixed messages, never a body, an address, SQL or a credential. 503 `knowledge_unavailable`
# is the turns' error class (with its Retry-After), with this message:
UNAVAILABLE_MESSAGE = "Knowledge is unavailable right now; retry later."


class KnowledgeReferenceInvalid(ApiError):
    code = "knowledge_reference_invalid"
    status = 400
    message = "This knowledge reference or cursor is not valid for this session, route and run; search again."


class KnowledgeReferenceExpired(ApiError):
    code = "knowledge_reference_expired"
    status = 410
    message = "This knowledge reference has expired; search again."


class KnowledgeScopeChanged(ApiError):
    code = "knowledge_scope_changed"
    status = 409
    message = "The route's knowledge configuration changed since this reference was issued; search again."


class KnowledgeChanged(ApiError):
    code = "knowledge_changed"
    status = 409
    message = "The document changed, was removed or is no longer ready; search again."


class RunNotActive(ApiError):
    code = "run_not_active"
    status = 409
    message = "This run is not ready for knowledge requests: it is still being prepared or has finished."


# Rendering: the budgets count exactly these bytes.


class KnowledgeJSONRenderer(JSONRenderer):
    """DRF's JSON renderer (compact, UTF-8, U+2028/U+2029 escaped), ignoring an `indent` asked for
    in the Accept header, so the bytes sent are the bytes measured."""

    def get_indent(self, accepted_media_type, renderer_context):
        return None


_RENDERER = KnowledgeJSONRenderer()


def json_bytes(value: Any) -> int:
    """The size of `value` as the knowledge views send it."""
    return len(_RENDERER.render(value))


def _json_text_bytes(text: str) -> int:
    return json_bytes(text) - 2


def _excerpt(text: str, max_json_bytes: int) -> str:
    """The longest prefix of `text` whose JSON string form has at most `max_json_bytes` bytes."""
    lo, hi = 0, min(len(text), max_json_bytes)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _json_text_bytes(text[:mid]) <= max_json_bytes:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


def _iso(timestamp: int) -> str:
    return datetime.fromtimestamp(timestamp, tz=UTC).isoformat().replace("+00:00", "Z")


@contextlib.contextmanager
def _bounded():
    """Knowledge queries give up instead of hanging (LOCK_TIMEOUT_MS, STATEMENT_TIMEOUT_MS); their
    DatabaseError is the caller's to turn into "unavailable".

    Outside a transaction none is opened — retrieval embeds the query between its statements and
    must not sit idle in one — so the limits are set on the session and reset afterwards. Inside
    one (a caller's atomic block, a test) a savepoint keeps a failed statement from aborting it.
    """
    values = [f"{LOCK_TIMEOUT_MS}ms", f"{STATEMENT_TIMEOUT_MS}ms"]
    if connection.in_atomic_block:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config('lock_timeout', %s, true), "
                               "set_config('statement_timeout', %s, true)", values)
            yield
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('lock_timeout', %s, false), set_config('statement_timeout', %s, false)",
                       values)
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
            cursor.execute("RESET statement_timeout")


# Scope


@dataclass(frozen=True)
class KnowledgeScope:
    """What a route's agents may read now; `knowledge_bases` carry `active_generation_id`."""

    enabled: bool
    knowledge_bases: tuple[KnowledgeBase, ...]
    revision: str

    @property
    def configured(self) -> bool:
        return self.enabled and bool(self.knowledge_bases)

    @property
    def knowledge_base_ids(self) -> list:
        return [kb.pk for kb in self.knowledge_bases]

    @property
    def generation_ids(self) -> list:
        return [kb.active_generation_id for kb in self.knowledge_bases if kb.active_generation_id]


def knowledge_scope_get(*, route: Route) -> KnowledgeScope:
    """The route's knowledge scope and its revision. One query."""
    active = IndexGeneration.objects.filter(knowledge_base=OuterRef("pk"), status=IndexGeneration.Status.ACTIVE)
    kbs = tuple(route_knowledge_bases(route=route).annotate(active_generation_id=Subquery(active.values("pk")[:1])))
    configuration = {
        "knowledge": {
            "enabled": route.knowledge_enabled,
            "mode": route.knowledge_mode,
            "top_k": route.knowledge_top_k,
            "max_docs": route.knowledge_max_docs,
            "page_boost": route.knowledge_page_boost,
            "score_threshold": route.knowledge_score_threshold,
        },
        "knowledge_bases": sorted(
            ({"id": str(kb.pk), "embedding_model_id": str(kb.embedding_model_id), "embedding_dim": kb.embedding_dim,
              "active_generation_id": str(kb.active_generation_id) if kb.active_generation_id else None}
             for kb in kbs),
            key=lambda item: item["id"],
        ),
    }
    return KnowledgeScope(enabled=route.knowledge_enabled, knowledge_bases=kbs, revision=revision_of(configuration))


def _scope_or_unavailable(route: Route) -> KnowledgeScope:
    try:
        with _bounded():
            return knowledge_scope_get(route=route)
    except DatabaseError as exc:
        logger.warning("Agent knowledge scope unavailable: %s", type(exc).__name__)
        raise KnowledgeUnavailable(UNAVAILABLE_MESSAGE) from exc


# Runs


def run_get_current(*, session: AgentSession, route: Route, run_id: uuid.UUID | str) -> Run:
    """A run this session opened on this route, in `context_ready`: 404 `run_not_found` for any
    other run (another session's, another route's, unknown), 409 `run_not_active` while it is
    being prepared or once it has finished."""
    run = run_get_for_session(session=session, run_id=run_id)
    if run.route_id != route.pk:
        raise RunNotFound()
    if run.state != Run.State.CONTEXT_READY:
        raise RunNotActive()
    return run


# References and cursors

_REF_LAYOUT = struct.Struct(">16s16s16s16s32s32s")
_CURSOR_LAYOUT = struct.Struct(">32sII")
_NO_RUN = bytes(16)


def identity_digest(session: AgentSession) -> bytes:
    """Who a reference was issued to, beyond the session id: client, principal, on_behalf_of."""
    who = [session.client.app_id, session.principal_id, session.on_behalf_of]
    return hashlib.sha256(canonical_json(who).encode("utf-8")).digest()[:16]


@dataclass(frozen=True)
class RefClaims:
    session_id: uuid.UUID
    identity: bytes
    run_id: uuid.UUID | None
    document_id: uuid.UUID
    scope_revision: str
    document_revision: str
    route_key: str
    expires_at: int = 0

    def pack(self) -> bytes:
        return _REF_LAYOUT.pack(
            self.session_id.bytes, self.identity, self.run_id.bytes if self.run_id else _NO_RUN,
            self.document_id.bytes, bytes.fromhex(self.scope_revision), bytes.fromhex(self.document_revision),
        ) + self.route_key.encode("ascii")

    @classmethod
    def unpack(cls, body: bytes, *, expires_at: int) -> RefClaims:
        if len(body) <= _REF_LAYOUT.size:
            raise BadSignature("Malformed reference.")
        session_id, identity, run_id, document_id, scope, revision = _REF_LAYOUT.unpack_from(body)
        try:
            route_key = body[_REF_LAYOUT.size:].decode("ascii")
        except UnicodeDecodeError as exc:
            raise BadSignature("Malformed reference.") from exc
        return cls(
            session_id=uuid.UUID(bytes=session_id), identity=identity,
            run_id=None if run_id == _NO_RUN else uuid.UUID(bytes=run_id), document_id=uuid.UUID(bytes=document_id),
            scope_revision=scope.hex(), document_revision=revision.hex(), route_key=route_key, expires_at=expires_at,
        )


def ref_issue(claims: RefClaims, *, expires_at: int) -> str:
    return REF_SIGNER.sign(claims.pack(), expires_at=expires_at)


def ref_decode(ref: str, *, at: float) -> tuple[RefClaims, bool]:
    """The claims of an authentic reference and whether it has expired; BadSignature otherwise."""
    try:
        signed, expired = REF_SIGNER.unsign(ref, at=at), False
    except SignatureExpired as exc:
        signed, expired = exc.signed, True
    return RefClaims.unpack(signed.body, expires_at=signed.expires_at), expired


def _ref_digest(ref: str) -> bytes:
    return hashlib.sha256(ref.encode("ascii")).digest()


def cursor_issue(*, ref: str, offset: int, exposed: int, expires_at: int) -> str:
    """The cursor of the page starting at byte `offset` of the body, `exposed` bytes into the
    chain of `ref`; it lives as long as the reference."""
    return CURSOR_SIGNER.sign(_CURSOR_LAYOUT.pack(_ref_digest(ref), offset, exposed), expires_at=expires_at)


def _ref_verify(ref: str, *, session: AgentSession, route: Route, run_id: uuid.UUID | None, at: float) -> RefClaims:
    """400 unless the reference is authentic and was issued to this session, identity, route and
    run (checked before its age: a foreign reference says nothing about itself); then 410 if old."""
    try:
        claims, expired = ref_decode(ref, at=at)
    except BadSignature as exc:
        raise KnowledgeReferenceInvalid() from exc
    if (claims.session_id != session.pk or claims.identity != identity_digest(session)
            or claims.route_key != route.key or claims.run_id != run_id):
        raise KnowledgeReferenceInvalid()
    if expired:
        raise KnowledgeReferenceExpired()
    return claims


def _cursor_verify(cursor: str, *, ref: str, at: float) -> tuple[int, int]:
    try:
        body = CURSOR_SIGNER.unsign(cursor, at=at).body
    except SignatureExpired as exc:
        raise KnowledgeReferenceExpired() from exc
    except BadSignature as exc:
        raise KnowledgeReferenceInvalid() from exc
    if len(body) != _CURSOR_LAYOUT.size:
        raise KnowledgeReferenceInvalid()
    digest, offset, exposed = _CURSOR_LAYOUT.unpack(body)
    if digest != _ref_digest(ref):
        raise KnowledgeReferenceInvalid()
    return offset, exposed


# Documents


def document_revision(*, title: str, body: str) -> str:
    return revision_of({"title": title, "body": body})


def _document_pieces(*, document_ids: Iterable, scope: KnowledgeScope) -> dict[Any, list[tuple[Any, str]]]:
    """{document id: [(chunk id, text)]} in reading order: the parents of each document in its KB's
    active generation, or its children when it has no parents."""
    ids = list(document_ids)
    pieces: dict[Any, list[tuple[Any, str]]] = {}
    rows = (Chunk.objects.filter(document_id__in=ids, generation_id__in=scope.generation_ids, kind=Chunk.Kind.PARENT)
            .order_by("document_id", "index").values_list("document_id", "id", "text"))
    for document_id, chunk_id, text in rows:
        pieces.setdefault(document_id, []).append((chunk_id, text))
    without_parents = [pk for pk in ids if pk not in pieces]
    if without_parents:
        rows = (Chunk.objects.filter(document_id__in=without_parents, generation_id__in=scope.generation_ids,
                                     kind=Chunk.Kind.CHILD)
                .order_by("document_id", "index").values_list("document_id", "id", "text"))
        for document_id, chunk_id, text in rows:
            pieces.setdefault(document_id, []).append((chunk_id, text))
    return pieces


def _documents_ready(*, document_ids: Iterable, scope: KnowledgeScope) -> dict[Any, Document]:
    """The documents among `document_ids` this scope may read now: in a bound KB, completed."""
    return {
        document.pk: document
        for document in Document.objects.filter(
            pk__in=list(document_ids), knowledge_base_id__in=scope.knowledge_base_ids,
            status=Document.Status.COMPLETED,
        ).only("id", "filename", "knowledge_base_id")
    }


# Search


@dataclass(frozen=True)
class _Found:
    document: Document
    hit: Hit
    revision: str


def _model_groups(scope: KnowledgeScope) -> list[list[KnowledgeBase]]:
    groups: dict[str, list[KnowledgeBase]] = {}
    for kb in scope.knowledge_bases:
        groups.setdefault(str(kb.embedding_model_id), []).append(kb)
    return [groups[key] for key in sorted(groups)]


def _merge_by_rank(ranked_lists: list[list[Hit]]) -> list[Hit]:
    """Rankings of separately searched embedding models, merged by rank (their scores are not
    comparable), ties by score."""
    entries = [(rank, -hit.score, group, hit) for group, hits in enumerate(ranked_lists)
               for rank, hit in enumerate(hits)]
    return [hit for *_, hit in sorted(entries, key=lambda entry: entry[:3])]


def _retrieve(*, route: Route, scope: KnowledgeScope, query: str, limit: int) -> tuple[str, list[Hit]]:
    """(status, hits best first). Each embedding model's KBs are searched on their own, so one
    failing model (its embedder down) leaves the others: `partial`; all failing: `unavailable`."""
    options = SearchOptions(
        top_k=max(limit, route.knowledge_top_k), mode="hybrid", score_threshold=route.knowledge_score_threshold,
        max_docs=min(limit, route.knowledge_max_docs), budget_bytes=SUMMARY_MAX_BYTES,
    )
    ranked_lists, failed = [], 0
    for kbs in _model_groups(scope):
        try:
            with _bounded():
                ranked_lists.append(knowledge_search(kbs=kbs, query=query, options=options).hits)
        except (DatabaseError, EmbeddingFailed) as exc:
            logger.warning("Agent knowledge search failed over %d knowledge base(s): %s", len(kbs), type(exc).__name__)
            failed += 1
    status = "ok" if not failed else ("partial" if ranked_lists else "unavailable")
    return status, _merge_by_rank(ranked_lists)


def _validate(*, hits: list[Hit], scope: KnowledgeScope, limit: int) -> list[_Found]:
    """The best hit of each of at most `limit` documents that are still readable in this scope,
    whose hit text is still exactly in the current text of its chunk."""
    order = list(dict.fromkeys(hit.document_id for hit in hits))
    documents = _documents_ready(document_ids=order, scope=scope)
    pieces = _document_pieces(document_ids=documents, scope=scope)
    found: list[_Found] = []
    seen = set()
    for hit in hits:
        document = documents.get(hit.document_id)
        if document is None or document.pk in seen or not hit.content:
            continue
        texts = dict(pieces.get(document.pk, []))
        source = texts.get(hit.parent_id or hit.chunk_id)
        if source is None or hit.content not in source:
            continue
        seen.add(document.pk)
        body = BODY_SEPARATOR.join(texts.values())
        found.append(_Found(document=document, hit=hit,
                            revision=document_revision(title=document.filename, body=body)))
        if len(found) == limit:
            break
    return found


def _documents_find(*, route: Route, scope: KnowledgeScope, query: str, limit: int) -> tuple[str, list[_Found]]:
    """(status, validated documents best first): retrieval, then validation against the database."""
    if not scope.configured:
        return "disabled", []
    query = clean_query(query)[:QUERY_MAX_CHARS]
    if not query:
        return "ok", []
    status, hits = _retrieve(route=route, scope=scope, query=query, limit=limit)
    try:
        with _bounded():
            return status, _validate(hits=hits, scope=scope, limit=limit)
    except DatabaseError as exc:
        logger.warning("Agent knowledge hit validation failed: %s", type(exc).__name__)
        return "unavailable", []


def _hints_issue(*, session: AgentSession, route: Route, run_id: uuid.UUID | None, scope: KnowledgeScope,
                 found: list[_Found]) -> list[dict[str, Any]]:
    """One hint per document, with a reference bound to the caller, the route and `run_id`."""
    expires_at = REF_SIGNER.expiry(at=now())
    identity = identity_digest(session)
    hints = []
    for item in found:
        claims = RefClaims(session_id=session.pk, identity=identity, run_id=run_id, document_id=item.document.pk,
                           scope_revision=scope.revision, document_revision=item.revision, route_key=route.key)
        hints.append({
            "ref": ref_issue(claims, expires_at=expires_at),
            "title": item.document.filename,
            "summary": _excerpt(item.hit.content, SUMMARY_MAX_BYTES),
            "revision": item.revision,
            "score": round(float(item.hit.score), 4),
            "expires_at": _iso(expires_at),
        })
    return hints


def _hints_fit(envelope: dict[str, Any], hints: list[dict[str, Any]], *, max_bytes: int) -> bool:
    """Adds hints to `envelope["hints"]` in order while the whole stays within `max_bytes`;
    whether any was left out. Fewer hints, never more bytes."""
    for hint in hints:
        envelope["hints"].append(hint)
        if json_bytes(envelope) > max_bytes:
            envelope["hints"].pop()
            return True
    return False


def knowledge_capabilities(*, route: Route) -> dict[str, Any]:
    """`bailing.agent-knowledge-capabilities.v1`. `enabled`: the route reads knowledge, has
    sources, and the knowledge service answered (with an embedder configured for a source)."""
    scope = _scope_or_unavailable(route)
    providers = settings.KNOWLEDGE_EMBEDDERS
    enabled = scope.configured and any(kb.embedding_model.provider in providers for kb in scope.knowledge_bases)
    return {
        "schema_version": CAPABILITIES_SCHEMA,
        "protocol": PROTOCOL,
        "supported": True,
        "route": route.key,
        "enabled": enabled,
        "knowledge_scope_revision": scope.revision,
        "delivery_modes": list(DELIVERY_MODES),
        "limits": dict(LIMITS),
    }


def knowledge_search_hints(*, session: AgentSession, route: Route, query: str, limit: int = SEARCH_MAX_RESULTS,
                           run: Run | None = None) -> dict[str, Any]:
    """`bailing.agent-knowledge-search.v1`: hints to at most `limit` documents, the whole answer
    within SEARCH_MAX_BYTES. A retrieval failure is `unavailable` (or `partial`), never an empty
    `ok`; the route's score threshold is applied and never lowered to fill."""
    scope = _scope_or_unavailable(route)
    status, found = _documents_find(route=route, scope=scope, query=query, limit=limit)
    hints = _hints_issue(session=session, route=route, run_id=run.pk if run else None, scope=scope, found=found)
    answer: dict[str, Any] = {"schema_version": SEARCH_SCHEMA, "route": route.key}
    if run is not None:
        answer["run_id"] = str(run.pk)
    answer.update(knowledge_scope_revision=scope.revision, status=status, trust=TRUST, hints=[], truncated=False)
    answer["truncated"] = _hints_fit(answer, hints, max_bytes=SEARCH_MAX_BYTES)
    return answer


@dataclass(frozen=True)
class PreparedDelivery:
    """The knowledge of an `on_demand` turn, searched before its run exists (and before the turn
    takes any lock); `for_run` issues the hints, bound to the run."""

    session: AgentSession
    route: Route
    scope: KnowledgeScope
    status: str
    found: list[_Found]

    def for_run(self, *, run: Run) -> dict[str, Any]:
        """`context.knowledge_delivery` (`bailing.agent-knowledge-delivery.v1`) within
        SEARCH_MAX_BYTES. Its references are readable once the run is `context_ready`."""
        delivery: dict[str, Any] = {
            "schema_version": DELIVERY_SCHEMA,
            "mode": "on_demand",
            "protocol": PROTOCOL,
            "knowledge_scope_revision": self.scope.revision,
            "status": self.status,
            "hints": [],
        }
        hints = _hints_issue(session=self.session, route=self.route, run_id=run.pk, scope=self.scope,
                             found=self.found)
        _hints_fit(delivery, hints, max_bytes=SEARCH_MAX_BYTES)
        return delivery


def knowledge_delivery_prepare(*, session: AgentSession, route: Route, query: str) -> PreparedDelivery:
    """Search for an `on_demand` turn. A retrieval failure is status `unavailable` in the delivery
    (the turn goes on: no body was promised); 503 `knowledge_unavailable` only when the scope
    itself cannot be read."""
    scope = _scope_or_unavailable(route)
    status, found = _documents_find(route=route, scope=scope, query=query, limit=SEARCH_MAX_RESULTS)
    return PreparedDelivery(session=session, route=route, scope=scope, status=status, found=found)


# Read


def _char_floor(data: bytes, index: int) -> int:
    """The largest character boundary of UTF-8 `data` at or before `index`."""
    while 0 < index < len(data) and data[index] & 0xC0 == 0x80:
        index -= 1
    return index


def _page(answer: dict[str, Any], *, body: bytes, offset: int, exposed: int, max_bytes: int, ref: str,
          expires_at: int) -> dict[str, Any]:
    """Fills `content`, `next_cursor`, `truncated` and `budget_exhausted` of `answer` with the
    page of `body` starting at `offset`: as much as fits `max_bytes` of JSON, whole characters,
    never past READ_CHAIN_MAX_BYTES of body exposed by the chain."""
    if offset > len(body) or offset != _char_floor(body, offset) or not 0 <= exposed <= READ_CHAIN_MAX_BYTES:
        raise KnowledgeReferenceInvalid()
    end = _char_floor(body, min(len(body), offset + READ_CHAIN_MAX_BYTES - exposed))
    rest = body[offset:end].decode("utf-8")
    cut_by_chain = end < len(body)
    answer.update(content=rest, next_cursor=None, truncated=cut_by_chain, budget_exhausted=cut_by_chain)
    if json_bytes(answer) <= max_bytes:
        return answer
    cursor = cursor_issue(ref=ref, offset=offset, exposed=exposed, expires_at=expires_at)  # fixed length
    answer.update(content="", next_cursor=cursor, truncated=True, budget_exhausted=False)
    content = _excerpt(rest, max_bytes - json_bytes(answer))
    if not content:  # the envelope alone cannot exceed a quarter of the smallest budget
        raise KnowledgeUnavailable(UNAVAILABLE_MESSAGE)
    used = len(content.encode("utf-8"))
    answer.update(content=content, next_cursor=cursor_issue(ref=ref, offset=offset + used, exposed=exposed + used,
                                                             expires_at=expires_at))
    return answer


def knowledge_read(*, session: AgentSession, route: Route, ref: str, run_id: uuid.UUID | None = None,
                   cursor: str | None = None, max_bytes: int = READ_DEFAULT_BYTES) -> dict[str, Any]:
    """`bailing.agent-knowledge-read.v1`: the next page of the document `ref` names, as long as
    the reference is this caller's, unexpired, and its scope and document revision still hold."""
    at = now()
    claims = _ref_verify(ref, session=session, route=route, run_id=run_id, at=at)
    offset, exposed = _cursor_verify(cursor, ref=ref, at=at) if cursor is not None else (0, 0)
    if run_id is not None:
        run_get_current(session=session, route=route, run_id=run_id)
    try:
        with _bounded():
            scope = knowledge_scope_get(route=route)
            if scope.revision != claims.scope_revision:
                raise KnowledgeScopeChanged()
            document = _documents_ready(document_ids=[claims.document_id], scope=scope).get(claims.document_id)
            pieces = _document_pieces(document_ids=[claims.document_id], scope=scope).get(claims.document_id)
    except DatabaseError as exc:
        logger.warning("Agent knowledge read unavailable: %s", type(exc).__name__)
        raise KnowledgeUnavailable(UNAVAILABLE_MESSAGE) from exc
    if document is None or not pieces:
        raise KnowledgeChanged()
    body = BODY_SEPARATOR.join(text for _, text in pieces)
    revision = document_revision(title=document.filename, body=body)
    if revision != claims.document_revision:
        raise KnowledgeChanged()
    answer: dict[str, Any] = {"schema_version": READ_SCHEMA, "route": route.key}
    if run_id is not None:
        answer["run_id"] = str(run_id)
    answer.update(knowledge_scope_revision=scope.revision, ref=ref, revision=revision, title=document.filename,
                  content="", trust=TRUST, next_cursor=None, truncated=False, budget_exhausted=False)
    encoded = body.encode("utf-8")
    answer.update(total_content_bytes=len(encoded), read_chain_max_bytes=READ_CHAIN_MAX_BYTES)
    return _page(answer, body=encoded, offset=offset, exposed=exposed, max_bytes=max_bytes, ref=ref,
                 expires_at=claims.expires_at)
