"""Operators' chunk overrides: disable / enable / edit take effect in every search channel at
once, keep sections and keyword statistics consistent, are recorded, and survive a rebuild."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, transaction

from apps.knowledge import errors, rebuild, selectors, services
from apps.knowledge.chunk_overrides import Span, section_splice, section_visible
from apps.knowledge.models import Chunk, ChunkEdit, ChunkOverride, IndexGeneration, KeywordTermStat
from apps.knowledge.pipeline.embedders import embedder_for
from apps.knowledge.pipeline.index import embedding_text
from apps.knowledge.pipeline.retrieve import SearchOptions
from tests.knowledge.factories import KnowledgeBaseFactory
from tests.knowledge.helpers import ingest_texts
from tests.projects.factories import UserFactory

pytestmark = pytest.mark.django_db

HANDBOOK = (
    "# Handbook\n\n## Refunds\n\n"
    "Customers may return unopened parcels within seven days for a complete refund of the price paid. "
    "Refunds reach the original card within five working days after the warehouse inspection. "
    "Damaged parcels need photographs uploaded within two days of delivery for review by the claims desk.\n\n"
    "## Exchanges\n\n"
    "Exchanges of sizes are free of charge in every store of the retail chain. "
    "Store managers approve exchanges of discounted items only with the printed receipt."
)
DAMAGED = "Damaged parcels need photographs uploaded within two days of delivery for review by the claims desk."
EDITED = "Damaged parcels need pictures emailed to the claims desk within two days of delivery."


@pytest.fixture
def user():
    return UserFactory()


@pytest.fixture
def kb():
    kb = KnowledgeBaseFactory()
    ingest_texts(kb, {"handbook.md": HANDBOOK})
    return kb


def _children(kb) -> dict[str, Chunk]:
    """The active generation's children by their first words."""
    return {" ".join(c.text.split()[:2]): c
            for c in Chunk.objects.filter(generation__knowledge_base=kb, generation__status="active", kind="child")}


def _hit_ids(kb, query: str, mode: str) -> set:
    result = selectors.knowledge_search(kbs=[kb], query=query, options=SearchOptions(top_k=10, mode=mode,
                                                                                     rollup=False))
    return {hit.chunk_id for hit in result.hits}


def _rebuild(kb, **strategy) -> IndexGeneration:
    if strategy:
        services.knowledge_base_update(kb=kb, chunk_strategy={"strategy": "auto", "min_chars": 0, **strategy})
    generation = services.knowledge_base_rebuild(kb=kb)
    assert rebuild.generation_build(generation_id=generation.pk) == "activated"
    return generation


@pytest.mark.parametrize("mode", ["keyword", "vector", "hybrid"])
def test_a_disabled_chunk_leaves_every_search_mode_at_once(kb, user, mode):
    damaged = _children(kb)["Damaged parcels"]
    before = _hit_ids(kb, "photographs damaged parcels", mode)
    services.chunk_disable(chunk=damaged, user=user)
    after = _hit_ids(kb, "photographs damaged parcels", mode)
    assert damaged.pk in before
    assert after == before - {damaged.pk}


def test_keyword_search_for_a_word_only_a_disabled_chunk_has_finds_nothing(kb, user):
    services.chunk_disable(chunk=_children(kb)["Damaged parcels"], user=user)
    assert _hit_ids(kb, "photographs", "keyword") == set()


def test_enabling_a_chunk_brings_it_back(kb, user):
    damaged = _children(kb)["Damaged parcels"]
    services.chunk_disable(chunk=damaged, user=user)
    services.chunk_enable(chunk=damaged, user=user)
    assert _hit_ids(kb, "photographs", "keyword") == {damaged.pk}
    assert Chunk.objects.get(pk=damaged.pk).disabled is False


def test_a_disabled_chunks_text_leaves_its_section_and_the_rest_stays_aligned(kb, user):
    children = _children(kb)
    services.chunk_disable(chunk=children["Customers may"], user=user)
    parent = Chunk.objects.get(pk=children["Customers may"].parent_id)
    kept = Chunk.objects.get(pk=children["Damaged parcels"].pk)
    assert parent.text == DAMAGED
    start, end = kept.metadata["parent_start"], kept.metadata["parent_end"]
    assert parent.text[start:end] == kept.text
    services.chunk_enable(chunk=children["Customers may"], user=user)
    assert Chunk.objects.get(pk=parent.pk).text == HANDBOOK.split("## Refunds\n\n")[1].split("\n\n")[0]


def test_a_hit_next_to_a_disabled_chunk_does_not_carry_its_text(kb, user):
    children = _children(kb)
    services.chunk_disable(chunk=children["Customers may"], user=user)
    [hit] = selectors.knowledge_search(kbs=[kb], query="photographs", options=SearchOptions(top_k=1,
                                                                                           mode="keyword")).hits
    assert hit.content == DAMAGED


def test_an_edit_is_found_by_its_new_word_and_no_longer_by_the_old_one(kb, user):
    damaged = _children(kb)["Damaged parcels"]
    services.chunk_text_edit(chunk=damaged, text=EDITED, user=user)
    assert _hit_ids(kb, "pictures emailed", "keyword") == {damaged.pk}
    assert _hit_ids(kb, "photographs", "keyword") == set()


def test_an_edit_re_embeds_only_that_chunk(kb, user):
    children = _children(kb)
    before = {c.pk: (list(c.embedding), c.search_vector) for c in Chunk.objects.filter(
        pk__in=[c.pk for c in children.values()])}
    damaged = children["Damaged parcels"]
    services.chunk_text_edit(chunk=damaged, text=EDITED, user=user)
    after = {c.pk: (list(c.embedding), c.search_vector) for c in Chunk.objects.filter(
        pk__in=[c.pk for c in children.values()])}
    others = set(before) - {damaged.pk}
    assert {pk: after[pk] for pk in others} == {pk: before[pk] for pk in others}
    expected = embedder_for(kb.embedding_model).embed_documents(
        [embedding_text(text=EDITED, chapter_path="Handbook / Refunds")])[0]
    assert after[damaged.pk][0] == pytest.approx(expected, abs=1e-6)
    assert after[damaged.pk][0] != pytest.approx(before[damaged.pk][0], abs=1e-6)


def test_an_edit_rewrites_the_section_around_it(kb, user):
    children = _children(kb)
    services.chunk_text_edit(chunk=children["Damaged parcels"], text=EDITED, user=user)
    parent = Chunk.objects.get(pk=children["Damaged parcels"].parent_id)
    first = Chunk.objects.get(pk=children["Customers may"].pk)
    edited = Chunk.objects.get(pk=children["Damaged parcels"].pk)
    assert parent.text == f"{first.text} {EDITED}"
    assert [parent.text[c.metadata["parent_start"]:c.metadata["parent_end"]] for c in (first, edited)] == [
        first.text, EDITED]


def test_an_edit_moves_the_keyword_statistics_from_the_old_terms_to_the_new(kb, user):
    generation = IndexGeneration.objects.get(knowledge_base=kb, status="active")

    def df(term: str) -> int:
        return KeywordTermStat.objects.filter(generation=generation, term=term).values_list("df", flat=True).first()

    n_before = df("#n")
    services.chunk_text_edit(chunk=_children(kb)["Damaged parcels"], text=EDITED, user=user)
    assert (df("photograph"), df("pictur"), df("#n")) == (0, 1, n_before)


def test_every_change_is_recorded_with_who_when_and_what(kb, user):
    damaged = _children(kb)["Damaged parcels"]
    services.chunk_disable(chunk=damaged, user=user)
    services.chunk_enable(chunk=damaged, user=user)
    services.chunk_text_edit(chunk=damaged, text=EDITED, user=user)
    rows = list(ChunkEdit.objects.order_by("id").values_list("action", "user_id", "chunk_id", "text_before",
                                                              "text_after"))
    assert rows == [("disabled", user.pk, damaged.pk, "", ""), ("enabled", user.pk, damaged.pk, "", ""),
                    ("edited", user.pk, damaged.pk, DAMAGED, EDITED)]
    assert all(edit.created_at is not None for edit in ChunkEdit.objects.all())
    override = ChunkOverride.objects.get()
    assert (override.updated_by, override.disabled, override.text, override.original_text) == (
        user, False, EDITED, DAMAGED)


def test_a_change_already_in_place_is_not_recorded_again(kb, user):
    damaged = _children(kb)["Damaged parcels"]
    services.chunk_disable(chunk=damaged, user=user)
    services.chunk_disable(chunk=damaged, user=user)
    assert ChunkEdit.objects.count() == 1


def test_the_change_record_is_append_only(kb, user):
    services.chunk_disable(chunk=_children(kb)["Damaged parcels"], user=user)
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        ChunkEdit.objects.update(action="enabled")
    assert list(ChunkEdit.objects.values_list("action", flat=True)) == ["disabled"]


def test_giving_back_the_original_text_removes_the_edit(kb, user):
    damaged = _children(kb)["Damaged parcels"]
    services.chunk_text_edit(chunk=damaged, text=EDITED, user=user)
    services.chunk_text_edit(chunk=damaged, text=DAMAGED, user=user)
    assert ChunkOverride.objects.get().text is None
    assert _hit_ids(kb, "photographs", "keyword") == {damaged.pk}


@pytest.mark.parametrize("text", ["", "   \n "])
def test_an_empty_text_is_refused_and_nothing_changes(kb, user, text):
    damaged = _children(kb)["Damaged parcels"]
    with pytest.raises(errors.ChunkTextInvalid) as raised:
        services.chunk_text_edit(chunk=damaged, text=text, user=user)
    assert (raised.value.code, raised.value.status) == ("chunk_text_invalid", 422)
    assert (Chunk.objects.get(pk=damaged.pk).text, ChunkOverride.objects.count(), ChunkEdit.objects.count()) == (
        DAMAGED, 0, 0)


def test_a_text_over_the_limit_is_refused(kb, user, settings):
    settings.KNOWLEDGE_PARENT_MAX_CHARS = 50
    with pytest.raises(errors.ChunkTextInvalid, match="at most 50 characters"):
        services.chunk_text_edit(chunk=_children(kb)["Damaged parcels"], text="x" * 51, user=user)
    assert ChunkEdit.objects.count() == 0


def test_a_parent_chunk_cannot_be_changed(kb, user):
    parent = Chunk.objects.filter(generation__knowledge_base=kb, kind="parent").first()
    with pytest.raises(errors.ChunkNotEditable) as raised:
        services.chunk_disable(chunk=parent, user=user)
    assert (raised.value.code, raised.value.status) == ("chunk_not_editable", 409)
    assert (Chunk.objects.filter(disabled=True).count(), ChunkEdit.objects.count()) == (0, 0)


def test_a_chunk_of_a_retired_generation_cannot_be_changed(kb, user):
    old = _children(kb)["Damaged parcels"]
    _rebuild(kb)
    with pytest.raises(errors.ChunkNotEditable):
        services.chunk_disable(chunk=old, user=user)
    assert Chunk.objects.filter(disabled=True).count() == 0


def test_a_rebuild_re_applies_a_disable_and_an_edit(kb, user):
    children = _children(kb)
    services.chunk_disable(chunk=children["Exchanges of"], user=user)
    services.chunk_text_edit(chunk=children["Damaged parcels"], text=EDITED, user=user)
    generation = _rebuild(kb)
    rebuilt = _children(kb)
    assert rebuilt["Damaged parcels"].generation_id == generation.pk
    assert (rebuilt["Exchanges of"].disabled, rebuilt["Damaged parcels"].text) == (True, EDITED)
    assert _hit_ids(kb, "pictures", "keyword") == {rebuilt["Damaged parcels"].pk}
    assert _hit_ids(kb, "exchanges receipt", "keyword") == set()
    assert sorted(ChunkEdit.objects.filter(action="reapplied").values_list("generation_number", flat=True)) == [
        generation.number, generation.number]


def test_a_rebuild_that_cuts_a_chunk_away_orphans_its_override(kb, user):
    children = _children(kb)
    services.chunk_disable(chunk=children["Customers may"], user=user)
    services.chunk_disable(chunk=children["Damaged parcels"], user=user)
    generation = _rebuild(kb, max_chars=120, overlap_chars=0)
    rebuilt = _children(kb)
    assert sorted(c.index for c in rebuilt.values() if c.disabled) == [rebuilt["Damaged parcels"].index]
    assert _hit_ids(kb, "unopened", "keyword") == {rebuilt["Customers may"].pk}
    orphan = ChunkOverride.objects.get(chunk_index=children["Customers may"].index)
    assert (orphan.orphaned_generation, orphan.orphaned_at is not None) == (generation.number, True)
    assert list(selectors.chunk_override_orphans(document=rebuilt["Customers may"].document)) == [orphan]
    assert ChunkEdit.objects.filter(action="orphaned", override=orphan).count() == 1


def test_a_change_during_a_rebuild_reaches_the_building_generation(kb, user):
    building = services.knowledge_base_rebuild(kb=kb)
    document = _children(kb)["Damaged parcels"].document
    rebuild._generation_document(IndexGeneration.objects.get(pk=building.pk), None, document.pk,
                                kb.embedding_model, embedder_for(kb.embedding_model))
    services.chunk_disable(chunk=_children(kb)["Damaged parcels"], user=user)
    copies = Chunk.objects.filter(generation__knowledge_base=kb, generation__status__in=["active", "building"],
                                  text=DAMAGED)
    assert sorted((c.generation_id == building.pk, c.disabled) for c in copies) == [(False, True), (True, True)]


def test_section_visible_drops_what_only_disabled_spans_cover_and_their_separators():
    source = "s1. s2. s3. s4."
    spans = [Span(0, 7, False), Span(4, 11, True), Span(12, 15, False)]
    assert section_visible(source, spans) == ("s1. s2. s4.", [(0, 7), (4, 7), (8, 11)])


def test_section_visible_keeps_everything_when_nothing_is_disabled():
    source = "s1. s2.\n\ns3."
    spans = [Span(0, 3, False), Span(4, 7, False), Span(9, 12, False)]
    assert section_visible(source, spans) == (source, [(0, 3), (4, 7), (9, 12)])


def test_section_splice_moves_later_spans_and_clips_overlapping_ones():
    assert section_splice([(0, 6), (4, 10), (11, 15)], at=4, text_len=6, new_len=2) == [(0, 4), (4, 6), (7, 11)]


def test_section_visible_leaves_no_separator_at_either_end():
    source = "s1. s2. s3."
    first = section_visible(source, [Span(0, 3, True), Span(4, 7, False), Span(8, 11, False)])
    last = section_visible(source, [Span(0, 3, False), Span(4, 7, False), Span(8, 11, True)])
    assert (first[0], last[0]) == ("s2. s3.", "s1. s2.")


def test_deleting_an_operator_keeps_their_changes_without_a_name(kb, user):
    services.chunk_disable(chunk=_children(kb)["Damaged parcels"], user=user)
    user.delete()
    assert list(ChunkEdit.objects.values_list("action", "user_id")) == [("disabled", None)]


def test_deleting_a_document_deletes_its_overrides_and_history(kb, user):
    damaged = _children(kb)["Damaged parcels"]
    services.chunk_text_edit(chunk=damaged, text=EDITED, user=user)
    services.document_delete(document=damaged.document)
    assert (Chunk.objects.count(), ChunkOverride.objects.count(), ChunkEdit.objects.count()) == (0, 0, 0)
