"""References and cursors: tampering, binding, expiry, rotation, and every refusal of a read."""

import dataclasses
import struct
import uuid

import pytest

from apps.core.signing import b64decode, b64encode
from apps.knowledge import rebuild, services
from apps.knowledge.models import Chunk, Document
from apps.routes.services import route_update
from apps.runtime import knowledge
from apps.runtime.errors import KnowledgeReferenceInvalid
from apps.runtime.knowledge import scope as knowledge_scope
from apps.runtime.knowledge.references import RefClaims, ref_issue
from tests.agent_auth.factories import AgentClientFactory
from tests.agent_auth.helpers import PRINCIPAL, session_for
from tests.ledger.helpers import complete_run, open_turn
from tests.runtime.knowledge_helpers import (
    DELIVERY,
    REFUND,
    T0,
    chunks_locked,
    first_ref,
    ingest_texts,
    read,
    row_counts,
    search,
)

pytest_plugins = ["tests.runtime.knowledge_fixtures"]

QUERY = "退款政策 七天无理由退货"
HEADER = struct.Struct(">BQ")


def _split(ref: str) -> tuple[int, RefClaims, str]:
    payload, mac = ref.split(".")
    raw = b64decode(payload)
    _, expires_at = HEADER.unpack_from(raw)
    return expires_at, RefClaims.unpack(raw[HEADER.size:], expires_at=expires_at), mac


def _with_old_mac(ref: str, claims: RefClaims, expires_at: int) -> str:
    _, _, mac = _split(ref)
    return b64encode(HEADER.pack(1, expires_at) + claims.pack()) + "." + mac


def _refused(response, status: int, code: str) -> None:
    assert (response.status_code, response.json()) == (status, {"error": code, "message": response.json()["message"]})
    assert response["Cache-Control"] == "no-store"
    for text in (REFUND[:12], DELIVERY[:12], "SELECT", "postgres", "127.0.0.1", "Traceback"):
        assert text not in response.json()["message"]


@pytest.fixture
def ref(api_client, ksession, kroute, docs, clock):
    return first_ref(api_client, ksession.access_token, kroute.key, QUERY)


@pytest.fixture
def long_ref(api_client, ksession, kroute, kb, clock):
    ingest_texts(kb, {"长篇.md": "\n\n".join(f"# 第{n}章\n\n{REFUND * 12}" for n in range(12))})
    return first_ref(api_client, ksession.access_token, kroute.key, "退款政策 七天 长篇")


def _second_page(api_client, ksession, kroute, long_ref) -> str:
    page = read(api_client, ksession.access_token, kroute.key, long_ref, max_bytes=4096).json()
    assert page["next_cursor"] is not None
    return page["next_cursor"]


# Tampering


FLIPS = {
    "session_id": lambda c: dataclasses.replace(c, session_id=uuid.uuid4()),
    "identity": lambda c: dataclasses.replace(c, identity=bytes(16)),
    "run_id": lambda c: dataclasses.replace(c, run_id=uuid.uuid4()),
    "document_id": lambda c: dataclasses.replace(c, document_id=uuid.uuid4()),
    "scope_revision": lambda c: dataclasses.replace(c, scope_revision="0" * 64),
    "document_revision": lambda c: dataclasses.replace(c, document_revision="f" * 64),
    "route_key": lambda c: dataclasses.replace(c, route_key="after-sales"),
    "section_id": lambda c: dataclasses.replace(c, section_id=uuid.uuid4()),
}


@pytest.mark.parametrize("field", [*FLIPS, "expires_at"])
def test_a_ref_with_any_field_changed_under_the_old_mac_is_400(api_client, ksession, kroute, ref, field):
    expires_at, claims, _ = _split(ref)
    if field == "expires_at":
        forged = _with_old_mac(ref, claims, expires_at + 3600)
    else:
        forged = _with_old_mac(ref, FLIPS[field](claims), expires_at)
    before = row_counts()
    _refused(read(api_client, ksession.access_token, kroute.key, forged), 400, "knowledge_reference_invalid")
    assert row_counts() == before


def test_every_flipped_byte_of_a_ref_is_400(ksession, kroute, ref, clock):
    payload, mac = ref.split(".")
    raw = b64decode(payload)
    for index in range(len(raw)):
        changed = bytearray(raw)
        changed[index] ^= 0x20
        forged = b64encode(bytes(changed)) + "." + mac
        with pytest.raises(KnowledgeReferenceInvalid):
            knowledge.knowledge_read(session=ksession.session, route=kroute, ref=forged)


@pytest.mark.parametrize(("field", "status", "code"), [
    ("session_id", 400, "knowledge_reference_invalid"),
    ("identity", 400, "knowledge_reference_invalid"),
    ("run_id", 400, "knowledge_reference_invalid"),
    ("route_key", 400, "knowledge_reference_invalid"),
    ("scope_revision", 409, "knowledge_scope_changed"),
    ("document_id", 409, "knowledge_changed"),
    ("document_revision", 409, "knowledge_changed"),
])
def test_a_validly_signed_ref_for_something_else_is_refused_by_what_it_claims(api_client, ksession, kroute, ref,
                                                                              field, status, code):
    expires_at, claims, _ = _split(ref)
    resigned = ref_issue(FLIPS[field](claims), expires_at=expires_at)
    _refused(read(api_client, ksession.access_token, kroute.key, resigned), status, code)


@pytest.mark.parametrize("garbage", ["", "x", "a.b", "a.b.c", "🙂.🙂", "A" * 4096])
def test_garbage_refs_are_400(api_client, ksession, kroute, docs, garbage):
    _refused(read(api_client, ksession.access_token, kroute.key, garbage), 400, "knowledge_reference_invalid")


@pytest.mark.parametrize("length", [4097, 12_000])
def test_a_ref_longer_than_any_issued_is_invalid_not_a_malformed_request(api_client, ksession, kroute, docs, length):
    _refused(read(api_client, ksession.access_token, kroute.key, "A" * length), 400, "knowledge_reference_invalid")


def test_a_cursor_longer_than_any_issued_is_invalid_not_a_malformed_request(api_client, ksession, kroute, long_ref):
    _refused(read(api_client, ksession.access_token, kroute.key, long_ref, cursor="A" * 4097), 400,
             "knowledge_reference_invalid")


def test_a_ref_is_not_a_cursor_and_a_cursor_is_not_a_ref(api_client, ksession, kroute, long_ref):
    cursor = _second_page(api_client, ksession, kroute, long_ref)
    _refused(read(api_client, ksession.access_token, kroute.key, long_ref, cursor=long_ref), 400,
             "knowledge_reference_invalid")
    _refused(read(api_client, ksession.access_token, kroute.key, cursor), 400, "knowledge_reference_invalid")


def test_a_cursor_of_another_ref_is_400(api_client, ksession, kroute, long_ref, docs):
    cursor = _second_page(api_client, ksession, kroute, long_ref)
    other_ref = first_ref(api_client, ksession.access_token, kroute.key, "配送说明 同城订单")
    assert other_ref != long_ref
    _refused(read(api_client, ksession.access_token, kroute.key, other_ref, cursor=cursor), 400,
             "knowledge_reference_invalid")


def test_a_tampered_cursor_is_400(api_client, ksession, kroute, long_ref):
    cursor = _second_page(api_client, ksession, kroute, long_ref)
    payload, mac = cursor.split(".")
    raw = bytearray(b64decode(payload))
    raw[-1] ^= 0x01  # the exposed byte count
    forged = b64encode(bytes(raw)) + "." + mac
    _refused(read(api_client, ksession.access_token, kroute.key, long_ref, cursor=forged), 400,
             "knowledge_reference_invalid")


def test_rotating_the_secret_invalidates_refs(api_client, ksession, kroute, ref, settings):
    settings.SECRET_KEY = "rotated-secret-0123456789-abcdefghijklmnopqrstuvwxyz"
    _refused(read(api_client, ksession.access_token, kroute.key, ref), 400, "knowledge_reference_invalid")


# Binding


def test_another_session_of_the_same_principal_cannot_use_a_ref(api_client, kclient, kroute, ref):
    other = session_for(kclient, principal=PRINCIPAL)
    _refused(read(api_client, other.access_token, kroute.key, ref), 400, "knowledge_reference_invalid")


def test_another_principal_cannot_use_a_ref(api_client, kclient, kroute, ref):
    other = session_for(kclient, principal={**PRINCIPAL, "id": "u-2002"}, on_behalf_of="bob@example.com")
    _refused(read(api_client, other.access_token, kroute.key, ref), 400, "knowledge_reference_invalid")


def test_another_client_cannot_use_a_ref(api_client, project, kroute, ref):
    client = AgentClientFactory(project=project, allowed_routes=[kroute.key])
    other = session_for(client, principal=PRINCIPAL)
    _refused(read(api_client, other.access_token, kroute.key, ref), 400, "knowledge_reference_invalid")


def test_a_ref_of_one_route_is_400_on_another(api_client, ksession, other_route, ref):
    _refused(read(api_client, ksession.access_token, other_route.key, ref), 400, "knowledge_reference_invalid")


def test_a_ref_bound_to_a_run_must_be_read_with_that_run(api_client, ksession, kroute, docs, clock):
    run_id = open_turn(api_client, ksession.access_token, kroute.key).json()["run_id"]
    other_run = open_turn(api_client, ksession.access_token, kroute.key, n=2).json()["run_id"]
    ref = first_ref(api_client, ksession.access_token, kroute.key, QUERY, run_id=run_id)
    assert read(api_client, ksession.access_token, kroute.key, ref, run_id=run_id).status_code == 200
    _refused(read(api_client, ksession.access_token, kroute.key, ref), 400, "knowledge_reference_invalid")
    _refused(read(api_client, ksession.access_token, kroute.key, ref, run_id=other_run), 400,
             "knowledge_reference_invalid")


def test_a_ref_without_a_run_cannot_be_read_with_one(api_client, ksession, kroute, ref):
    run_id = open_turn(api_client, ksession.access_token, kroute.key).json()["run_id"]
    _refused(read(api_client, ksession.access_token, kroute.key, ref, run_id=run_id), 400,
             "knowledge_reference_invalid")


def test_a_run_finished_between_pages_ends_the_chain(api_client, ksession, kroute, kb, clock):
    ingest_texts(kb, {"长篇.md": "\n\n".join(f"# 第{n}章\n\n{REFUND * 12}" for n in range(12))})
    run_id = open_turn(api_client, ksession.access_token, kroute.key).json()["run_id"]
    ref = first_ref(api_client, ksession.access_token, kroute.key, "退款政策 七天 长篇", run_id=run_id)
    page = read(api_client, ksession.access_token, kroute.key, ref, run_id=run_id, max_bytes=4096).json()
    complete_run(api_client, ksession.access_token, run_id)
    _refused(read(api_client, ksession.access_token, kroute.key, ref, run_id=run_id, cursor=page["next_cursor"]),
             409, "run_not_active")


# Expiry


def test_a_ref_lives_300_seconds(api_client, ksession, kroute, ref, clock):
    clock.at = T0 + 299.9
    assert read(api_client, ksession.access_token, kroute.key, ref).status_code == 200
    clock.at = T0 + 300
    _refused(read(api_client, ksession.access_token, kroute.key, ref), 410, "knowledge_reference_expired")


def test_a_cursor_expires_with_its_ref(api_client, ksession, kroute, long_ref, clock):
    clock.at = T0 + 200
    cursor = _second_page(api_client, ksession, kroute, long_ref)
    clock.at = T0 + 300
    _refused(read(api_client, ksession.access_token, kroute.key, long_ref, cursor=cursor), 410,
             "knowledge_reference_expired")


def test_an_expired_ref_of_someone_else_is_invalid_not_expired(api_client, kclient, kroute, ref, clock):
    other = session_for(kclient, principal=PRINCIPAL)
    clock.at = T0 + 301
    _refused(read(api_client, other.access_token, kroute.key, ref), 400, "knowledge_reference_invalid")


# Scope and document changes


def test_a_kb_unbound_between_pages_is_scope_changed(api_client, ksession, kroute, kb, long_ref):
    cursor = _second_page(api_client, ksession, kroute, long_ref)
    services.route_knowledge_unbind(route=kroute, knowledge_base=kb)
    _refused(read(api_client, ksession.access_token, kroute.key, long_ref, cursor=cursor), 409,
             "knowledge_scope_changed")


def test_knowledge_disabled_between_pages_is_scope_changed(api_client, ksession, kroute, long_ref):
    cursor = _second_page(api_client, ksession, kroute, long_ref)
    route_update(route=kroute, knowledge_enabled=False)
    _refused(read(api_client, ksession.access_token, kroute.key, long_ref, cursor=cursor), 409,
             "knowledge_scope_changed")


def test_a_new_threshold_is_scope_changed(api_client, ksession, kroute, ref):
    route_update(route=kroute, knowledge_score_threshold=0.2)
    _refused(read(api_client, ksession.access_token, kroute.key, ref), 409, "knowledge_scope_changed")


def test_a_rebuild_switching_the_generation_is_scope_changed(api_client, ksession, kroute, kb, ref):
    generation = services.knowledge_base_rebuild(kb=kb)
    assert read(api_client, ksession.access_token, kroute.key, ref).status_code == 200  # still building
    assert rebuild.generation_build(generation_id=generation.pk) == "activated"
    _refused(read(api_client, ksession.access_token, kroute.key, ref), 409, "knowledge_scope_changed")


def test_a_document_deleted_after_search_is_changed(api_client, ksession, kroute, docs, ref):
    services.document_delete(document=docs["退款.md"])
    _refused(read(api_client, ksession.access_token, kroute.key, ref), 409, "knowledge_changed")


def test_a_document_edited_between_search_and_read_is_changed(api_client, ksession, kroute, docs, ref):
    # No edit service exists yet: re-indexing new text rewrites the stored section text in place.
    parent = Chunk.objects.filter(document=docs["退款.md"], kind="parent").first()
    Chunk.objects.filter(pk=parent.pk).update(text=parent.text.replace("七天", "十五天"))
    response = read(api_client, ksession.access_token, kroute.key, ref)
    _refused(response, 409, "knowledge_changed")
    assert "十五天" not in response.content.decode()


def test_a_document_edited_between_pages_is_changed(api_client, ksession, kroute, long_ref):
    cursor = _second_page(api_client, ksession, kroute, long_ref)
    document = Document.objects.get(filename="长篇.md")
    last = Chunk.objects.filter(document=document, kind="parent").order_by("-index").first()
    Chunk.objects.filter(pk=last.pk).update(text=last.text + "补充条款。")
    _refused(read(api_client, ksession.access_token, kroute.key, long_ref, cursor=cursor), 409, "knowledge_changed")


def test_a_renamed_document_is_changed(api_client, ksession, kroute, docs, ref):
    Document.objects.filter(pk=docs["退款.md"].pk).update(filename="退款（新）.md")
    _refused(read(api_client, ksession.access_token, kroute.key, ref), 409, "knowledge_changed")


def test_a_document_no_longer_ready_is_changed(api_client, ksession, kroute, docs, ref):
    Document.objects.filter(pk=docs["退款.md"].pk).update(status=Document.Status.FAILED)
    _refused(read(api_client, ksession.access_token, kroute.key, ref), 409, "knowledge_changed")


def test_a_refused_read_changes_nothing(api_client, ksession, kroute, docs, ref):
    services.document_delete(document=docs["退款.md"])
    before = row_counts()
    read(api_client, ksession.access_token, kroute.key, ref)
    assert row_counts() == before


# The knowledge service down


@pytest.mark.django_db(transaction=True)
def test_a_read_while_the_index_is_locked_is_503(api_client, ksession, kroute, docs, clock, monkeypatch):
    ref = first_ref(api_client, ksession.access_token, kroute.key, QUERY)
    monkeypatch.setattr(knowledge_scope, "LOCK_TIMEOUT_MS", 100)
    with chunks_locked():
        response = read(api_client, ksession.access_token, kroute.key, ref)
    _refused(response, 503, "knowledge_unavailable")
    assert response["Retry-After"] == "5"
    assert read(api_client, ksession.access_token, kroute.key, ref).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_a_search_while_the_index_is_locked_is_unavailable(api_client, ksession, kroute, docs, monkeypatch):
    monkeypatch.setattr(knowledge_scope, "LOCK_TIMEOUT_MS", 100)
    with chunks_locked():
        response = search(api_client, ksession.access_token, kroute.key, QUERY)
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["hints"]) == ("unavailable", [])
