"""Signed references and cursors of the knowledge protocol.

A reference is a self-contained token (apps.core.signing, domain REF_DOMAIN) binding the agent
client, session, principal and `on_behalf_of`, the route, the optional run, the scope revision, the
document id and the document's revision, and naming the section (chunk) its hit lies in: a reading
chain starts there, so that a hit deep in a long document is on its first page. A cursor (domain
CURSOR_DOMAIN) carries the reference's digest, the byte offset of the next page and the bytes the
chain has exposed. Neither is an authorization: reads re-check everything they name.
"""

from __future__ import annotations

import hashlib
import struct
import time
import uuid
from dataclasses import dataclass

from apps.agent_auth.models import AgentSession
from apps.core.revisions import canonical_json
from apps.core.signing import BadSignature, SignatureExpired, Signer
from apps.routes.models import Route
from apps.runtime.errors import KnowledgeReferenceExpired, KnowledgeReferenceInvalid
from apps.runtime.knowledge.limits import REFERENCE_TTL_SECONDS

REF_DOMAIN = "bailinghub.agent-knowledge.ref.v1"
CURSOR_DOMAIN = "bailinghub.agent-knowledge.cursor.v1"
REF_SIGNER = Signer(REF_DOMAIN, ttl_seconds=REFERENCE_TTL_SECONDS)
CURSOR_SIGNER = Signer(CURSOR_DOMAIN, ttl_seconds=REFERENCE_TTL_SECONDS)


def now() -> float:
    """The clock references are issued and checked against (tests set it)."""
    return time.time()


_REF_LAYOUT = struct.Struct(">16s16s16s16s16s32s32s")
_CURSOR_LAYOUT = struct.Struct(">32sII")
_NONE = bytes(16)  # no run, no section


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
    # The section the hit lies in (a parent chunk, or a child in a document without parents);
    # None: the chain starts at the body's beginning.
    section_id: uuid.UUID | None = None

    def pack(self) -> bytes:
        return _REF_LAYOUT.pack(
            self.session_id.bytes, self.identity, self.run_id.bytes if self.run_id else _NONE,
            self.document_id.bytes, self.section_id.bytes if self.section_id else _NONE,
            bytes.fromhex(self.scope_revision), bytes.fromhex(self.document_revision),
        ) + self.route_key.encode("ascii")

    @classmethod
    def unpack(cls, body: bytes, *, expires_at: int) -> RefClaims:
        if len(body) <= _REF_LAYOUT.size:
            raise BadSignature("Malformed reference.")
        session_id, identity, run_id, document_id, section_id, scope, revision = _REF_LAYOUT.unpack_from(body)
        try:
            route_key = body[_REF_LAYOUT.size:].decode("ascii")
        except UnicodeDecodeError as exc:
            raise BadSignature("Malformed reference.") from exc
        return cls(
            session_id=uuid.UUID(bytes=session_id), identity=identity,
            run_id=None if run_id == _NONE else uuid.UUID(bytes=run_id), document_id=uuid.UUID(bytes=document_id),
            scope_revision=scope.hex(), document_revision=revision.hex(), route_key=route_key, expires_at=expires_at,
            section_id=None if section_id == _NONE else uuid.UUID(bytes=section_id),
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


def ref_verify(ref: str, *, session: AgentSession, route: Route, run_id: uuid.UUID | None, at: float) -> RefClaims:
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


def cursor_verify(cursor: str, *, ref: str, at: float) -> tuple[int, int]:
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
