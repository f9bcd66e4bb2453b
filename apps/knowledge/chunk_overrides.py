"""Operators' changes to chunks — disable, enable, edit the text — and their re-application to
every index generation built later from the same document.

A change is a ChunkOverride (the standing state, keyed by what the chunker produced; see its
docstring) plus an append-only ChunkEdit row (who, when, what). It applies at once to the
document's chunks in every *live* generation (active, and building during a rebuild), under the
locks the pipeline takes: the knowledge base row FOR SHARE (a generation switch waits), then the
document row FOR UPDATE (chunk creation and completion wait). A generation that creates the
document's chunks later gets the overrides in the same transaction (override_apply, called by
apps.knowledge.ingest), before anything is embedded.

Sections stay consistent with their children: a parent's `text` is what readers see (agent
reads, the roll-up of search hits), so it is recomposed from the section as chunked
(`metadata["source_text"]`, kept once a child changes) with edited children's text spliced in
and the text that only disabled children cover left out. Children's `parent_start`/`parent_end`
follow the visible text; `source_start`/`source_end` keep their place in the source.

A disabled child keeps its vector and keyword terms (so enabling it needs no work) and stays
counted in the keyword statistics, as every writer of those statistics counts indexed rows;
searches skip it (pipeline.retrieve). An edited child is re-embedded alone: its vector comes from
the embedding cache (filled before the transaction), its keyword terms are rewritten and their
statistics moved from the old terms to the new ones in the same transaction.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from apps.core.bidi import bidi_controls_escaped, bidi_formatting_found
from apps.knowledge import errors
from apps.knowledge.models import Chunk, ChunkEdit, ChunkOverride, Document, IndexGeneration
from apps.knowledge.pipeline.embedders import embedder_for
from apps.knowledge.pipeline.index import (
    SEARCH_VECTOR_SQL,
    STATS_ADD_SQL,
    cache_missing,
    cache_store,
    embedding_text,
    search_terms,
    stats_counts_sql,
    text_hash,
    windows_recut,
    windows_write,
)
from apps.knowledge.pipeline.strategy import strategy_from_snapshot
from apps.knowledge.pipeline.windows import window_spans

TEXT_MAX_CHARS = 20_000


# Sections (pure)


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    disabled: bool


def section_splice(spans: Sequence[tuple[int, int]], *, at: int, text_len: int, new_len: int
                   ) -> list[tuple[int, int]]:
    """Spans of a section after [at, at + text_len) is replaced by `new_len` characters: spans
    after it move, spans that overlapped it keep only their part outside it (their own text is
    unchanged; the replaced text is the edited child's now)."""
    end, new_end, delta = at + text_len, at + new_len, new_len - text_len
    out = []
    for start, stop in spans:
        if start >= end:
            start += delta
        elif start > at:
            start = new_end
        if stop >= end:
            stop += delta
        elif stop > at:
            stop = at
        out.append((start, max(start, stop)))
    return out


def section_visible(source: str, spans: Sequence[Span]) -> tuple[str, list[tuple[int, int]]]:
    """The section's visible text: `source` without the characters that only disabled spans
    cover; where text was left out, one separator (the text no span covers: whitespace between
    children) stays between what is kept on either side, none at the ends. Also each span's
    place in the visible text. With nothing disabled, the text is `source` itself."""
    enabled = [0] * (len(source) + 1)
    disabled = [0] * (len(source) + 1)
    for span in spans:
        marks = disabled if span.disabled else enabled
        marks[span.start] += 1
        marks[span.end] -= 1
    out: list[str] = []
    position = [0] * (len(source) + 1)
    stretch: list[str] = []  # everything skipped or uncovered since the last kept character
    gap = ""  # the last uncovered run in that stretch
    hidden = False
    on = off = 0
    i = 0
    while i < len(source):
        on += enabled[i]
        off += disabled[i]
        if on == 0 and off == 0:  # uncovered: a separator
            j = i
            while j + 1 < len(source) and enabled[j + 1] == 0 and disabled[j + 1] == 0:
                j += 1
            for k in range(i, j + 1):
                position[k] = len(out)
            gap = source[i:j + 1]
            stretch.append(gap)
            i = j + 1
            continue
        position[i] = len(out)
        if on == 0:  # only disabled spans cover it
            hidden = True
            gap = ""
        else:
            if stretch or hidden:
                out.extend(gap if hidden and out else ("" if hidden else "".join(stretch)))
                stretch, gap, hidden = [], "", False
                position[i] = len(out)
            out.append(source[i])
        i += 1
    if stretch and not hidden:
        out.extend("".join(stretch))
    position[len(source)] = len(out)
    return "".join(out), [(position[s.start], position[s.end]) for s in spans]


# Writes (the caller holds the locks)


def _lock(document: Document) -> Document:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM knowledge_knowledgebase WHERE id = %s FOR SHARE",
                       [document.knowledge_base_id])
    locked = Document.objects.select_for_update(of=("self",)).filter(pk=document.pk).first()
    if locked is None:
        raise errors.DocumentNotFound()
    return locked


def _section_update(parent_id, changed: Chunk, *, old_text: str | None = None) -> None:
    """Recompose a parent from its children after `changed` was disabled, enabled or (with
    `old_text`) given new text. `changed` already carries its new text and state."""
    parent = Chunk.objects.select_for_update().get(pk=parent_id)
    children = list(Chunk.objects.filter(parent_id=parent_id, kind=Chunk.Kind.CHILD).order_by("index")
                    .only("id", "metadata", "disabled", "text"))
    metadata = dict(parent.metadata or {})
    source = metadata.get("source_text", parent.text)

    def source_span(child: Chunk) -> tuple[int, int] | None:
        m = child.metadata or {}
        start = m.get("source_start", m.get("parent_start"))
        end = m.get("source_end", m.get("parent_end"))
        return None if start is None or end is None else (start, end)

    placed = [(child, span) for child in children if (span := source_span(child)) is not None]
    spans = [span for _, span in placed]
    if old_text is not None:
        mine = next((span for child, span in placed if child.pk == changed.pk), None)
        if mine is not None:
            start, end = mine
            source = source[:start] + changed.text + source[end:]
            spans = section_splice(spans, at=start, text_len=end - start, new_len=len(changed.text))
            spans = [(start, start + len(changed.text)) if child.pk == changed.pk else span
                     for (child, _), span in zip(placed, spans, strict=True)]
    disabled = {child.pk: (changed.disabled if child.pk == changed.pk else child.disabled) for child, _ in placed}
    visible, places = section_visible(source, [Span(s, e, disabled[child.pk])
                                               for (child, _), (s, e) in zip(placed, spans, strict=True)])
    for (child, _), (s, e), (vs, ve) in zip(placed, spans, places, strict=True):
        child.metadata = {**(child.metadata or {}), "source_start": s, "source_end": e,
                          "parent_start": vs, "parent_end": ve}
    Chunk.objects.bulk_update([child for child, _ in placed], ["metadata"])
    metadata["source_text"] = source
    parent.text = visible
    parent.metadata = metadata
    parent.save(update_fields=["text", "metadata"])


_UNCOUNT = f"""
    WITH rows AS (
        SELECT generation_id, search_vector FROM knowledge_chunk
         WHERE id = ANY(%s::uuid[]) AND search_vector IS NOT NULL
    ), {stats_counts_sql("rows")}
    UPDATE knowledge_keywordtermstat s SET df = s.df - c.df
      FROM counts c WHERE s.generation_id = c.generation_id AND s.term = c.term
"""  # noqa: S608 -- fixed SQL, values bound

_REINDEX = f"""
    WITH upd AS (
        UPDATE knowledge_chunk AS c
           SET embedding = e.embedding, embedding_model_id = e.embedding_model_id, search_vector = {SEARCH_VECTOR_SQL}
          FROM unnest(%s::uuid[], %s::text[]) AS v(id, terms), knowledge_embeddingcache AS e
         WHERE c.id = v.id AND e.embedding_model_id = %s AND e.text_hash = c.text_hash
     RETURNING c.generation_id, c.search_vector
    ), {stats_counts_sql("upd")}, ins AS (
        {STATS_ADD_SQL}
    )
    SELECT count(*) FROM upd
"""  # noqa: S608 -- fixed SQL, values bound


def _text_set(chunk: Chunk, text: str, *, model) -> None:
    """Give a child new text: its hash, its section, and — when it was indexed — its vector
    (from the cache) and keyword terms, with their statistics."""
    old_text = chunk.text
    indexed = chunk.search_vector is not None
    chunk.text = text
    chunk.text_hash = text_hash(embedding_text(text=text, chapter_path=chunk.chapter_path))
    chunk.save(update_fields=["text", "text_hash"])
    windows = windows_recut(chunk)
    if chunk.parent_id:
        _section_update(chunk.parent_id, chunk, old_text=old_text)
    if not indexed:
        return  # the pipeline embeds and indexes it with the rest of the document
    with connection.cursor() as cursor:
        cursor.execute(_UNCOUNT, [[chunk.pk]])
        cursor.execute(_REINDEX, [[chunk.pk], search_terms([(text, chunk.chapter_path)]), model.pk])
        if cursor.fetchone()[0] != 1:
            raise errors.ChunkNotEditable("The new text's vector is missing; try again.")
    if windows_write(children=[(chunk.pk, text, chunk.chapter_path)], model=model) != windows:
        raise errors.ChunkNotEditable("A vector of the new text's windows is missing; try again.")


def _state_apply(chunk: Chunk, override: ChunkOverride, *, model) -> bool:
    """Make one chunk what `override` says. Whether anything changed."""
    wanted_text = override.original_text if override.text is None else override.text
    changed = False
    if chunk.override_id != override.pk:
        chunk.override = override
        chunk.save(update_fields=["override"])
    if chunk.disabled != override.disabled:
        chunk.disabled = override.disabled
        chunk.save(update_fields=["disabled"])
        if chunk.parent_id and chunk.text == wanted_text:
            _section_update(chunk.parent_id, chunk)
        changed = True
    if chunk.text != wanted_text:
        _text_set(chunk, wanted_text, model=model)
        changed = True
    return changed


def _children(generation_ids: Iterable, document: Document):
    return Chunk.objects.filter(generation_id__in=list(generation_ids), document=document,
                                kind=Chunk.Kind.CHILD).defer("embedding")


def _matches(overrides: list[ChunkOverride], children: list[Chunk]) -> dict:
    """{override id: chunk} in one generation: the chunk already linked to it, else an unlinked
    chunk with its key (the nearest in position among identical ones); no chunk, no entry."""
    found: dict = {}
    taken: set = set()
    for chunk in children:
        if chunk.override_id is not None:
            found[chunk.override_id] = chunk
            taken.add(chunk.pk)
    for override in sorted(overrides, key=lambda o: o.chunk_index):
        if override.pk in found:
            continue
        same = [c for c in children if c.text_hash == override.chunk_key and c.pk not in taken
                and c.override_id is None]
        if same:
            chunk = min(same, key=lambda c: (abs(c.index - override.chunk_index), c.index))
            found[override.pk] = chunk
            taken.add(chunk.pk)
    return found


def override_apply(*, generation: IndexGeneration, document: Document) -> dict[str, int]:
    """Re-apply a document's overrides to its chunks just created in `generation` (the caller,
    the pipeline, holds the document's lock in a transaction). An effective override without its
    chunk there is marked orphaned and recorded; one found again is no longer orphaned."""
    overrides = list(ChunkOverride.objects.filter(document=document, document_revision=document.content_hash))
    if not overrides:
        return {"reapplied": 0, "orphaned": 0}
    model = document.knowledge_base.embedding_model
    children = list(_children([generation.pk], document))
    found = _matches(overrides, children)
    reapplied = orphaned = 0
    edits = []
    now = timezone.now()
    for override in overrides:
        chunk = found.get(override.pk)
        if chunk is None:
            if override.effective:
                override.orphaned_at, override.orphaned_generation = now, generation.number
                override.save(update_fields=["orphaned_at", "orphaned_generation", "updated_at"])
                edits.append(ChunkEdit(override=override, document=document, action=ChunkEdit.Action.ORPHANED,
                                       generation_number=generation.number))
                orphaned += 1
            continue
        if _state_apply(chunk, override, model=model):
            edits.append(ChunkEdit(override=override, document=document, action=ChunkEdit.Action.REAPPLIED,
                                   chunk_id=chunk.pk, generation_number=generation.number,
                                   text_after=override.text or ""))
            reapplied += 1
        if override.orphaned_at is not None:
            override.orphaned_at = override.orphaned_generation = None
            override.save(update_fields=["orphaned_at", "orphaned_generation", "updated_at"])
    ChunkEdit.objects.bulk_create(edits)
    return {"reapplied": reapplied, "orphaned": orphaned}


def _embed(*, document: Document, chunk: Chunk, text: str) -> None:
    """Put the vectors of a child's new text, and of its windows in every live generation, in the
    embedding cache (outside any lock)."""
    model = document.knowledge_base.embedding_model
    contents = [embedding_text(text=text, chapter_path=chunk.chapter_path)]
    for snapshot in IndexGeneration.objects.filter(
            knowledge_base_id=document.knowledge_base_id, status__in=IndexGeneration.LIVE).values_list(
            "chunk_strategy", flat=True):
        contents += [embedding_text(text=text[start:end], chapter_path=chunk.chapter_path)
                     for start, end in window_spans(text, strategy_from_snapshot(snapshot).window_chars)]
    by_hash = {text_hash(content): content for content in contents}
    missing = sorted(cache_missing(model=model, hashes=by_hash))
    if missing:
        vectors = embedder_for(model).embed_documents([by_hash[digest] for digest in missing])
        cache_store(model=model, vectors=dict(zip(missing, vectors, strict=True)))


def text_max_chars() -> int:
    """The longest text an edit gives a chunk: a parent's size (KNOWLEDGE_PARENT_MAX_CHARS), at
    most TEXT_MAX_CHARS."""
    return min(TEXT_MAX_CHARS, getattr(settings, "KNOWLEDGE_PARENT_MAX_CHARS", TEXT_MAX_CHARS))


def _clean_text(text: str) -> str:
    text = (text or "").replace("\r\n", "\n").strip()
    if not text:
        raise errors.ChunkTextInvalid("The text cannot be empty.", fields={"text": ["This field is required."]})
    limit = text_max_chars()
    if len(text) > limit:
        raise errors.ChunkTextInvalid(f"The text can be at most {limit} characters (it has {len(text)}).",
                                      fields={"text": [f"At most {limit} characters (it has {len(text)})."]})
    return text


def _original_text(chunk: Chunk) -> str:
    """The chunk's text as its document has it, before any edit."""
    original = (ChunkOverride.objects.filter(pk=chunk.override_id).values_list("original_text", flat=True).first()
                if chunk.override_id else None)
    return chunk.text if original is None else original


def _bidi_formatting_refuse(text: str) -> None:
    """An edit puts no embedding, override or isolate in a chunk, as a name holds none: an override
    makes the text read otherwise than it is stored wherever it is shown obeyed (`\\u202e0051`
    reads 1500). The marks (LRM, RLM, ALM) may stay: Arabic and Hebrew text carries them, often from
    the word processor it was written in, to place punctuation and numbers, and each is one
    invisible letter that reverses nothing; the console shows them as escapes anyway. Each control
    is named with the text before it, since a text box shows none of them. The document's own text
    may be given back (it removes the edit), controls and all: the edit adds none."""
    found = bidi_formatting_found(text)
    if not found:
        return
    places = "; ".join(
        f"U+{ord(char):04X} ({unicodedata.name(char)}) "
        + (f"after “{bidi_controls_escaped(text[max(0, at - 24):at]).lstrip()}”" if at else "at the start")
        for at, char in found[:3])
    more = f", and {len(found) - 3} more" if len(found) > 3 else ""
    message = (f"The text holds invisible direction controls, which make it read otherwise than it is stored: "
               f"{places}{more}. Remove them; the marks U+200E and U+200F, which place punctuation and numbers "
               f"in Arabic and Hebrew text, may stay.")
    raise errors.ChunkTextInvalid(message, fields={"text": [message]})


def chunk_change(*, chunk: Chunk, user, disabled: bool | None = None, text: str | None = None) -> Chunk:
    """Disable or enable a child chunk, or replace its text, in every live generation of its
    document; record who did what. Repeating a change that is already in place changes and
    records nothing. Returns the chunk as it is now."""
    if text is not None:
        text = _clean_text(text)
        if text != _original_text(chunk):
            _bidi_formatting_refuse(text)
    document = chunk.document
    if text is not None:
        _embed(document=document, chunk=chunk, text=text)
    with transaction.atomic():
        document = _lock(document)
        current = Chunk.objects.select_related("generation", "override").defer("embedding").filter(
            pk=chunk.pk, document=document).first()
        if current is None:
            raise errors.ChunkNotFound()
        if current.kind != Chunk.Kind.CHILD or current.generation.status not in IndexGeneration.LIVE:
            raise errors.ChunkNotEditable()
        override = current.override
        if override is None:
            override, _ = ChunkOverride.objects.get_or_create(
                document=document, document_revision=document.content_hash, chunk_key=current.text_hash,
                chunk_index=current.index,
                defaults={"knowledge_base_id": document.knowledge_base_id, "original_text": current.text},
            )
        before_text = override.original_text if override.text is None else override.text
        action = None
        if disabled is not None and disabled != override.disabled:
            override.disabled = disabled
            action = ChunkEdit.Action.DISABLED if disabled else ChunkEdit.Action.ENABLED
        if text is not None and text != before_text:
            override.text = None if text == override.original_text else text
            action = ChunkEdit.Action.EDITED
        if action is None:
            return current
        override.updated_by = user
        override.save()
        generation_ids = IndexGeneration.objects.filter(
            knowledge_base_id=document.knowledge_base_id, status__in=IndexGeneration.LIVE).values_list("pk", flat=True)
        by_generation: dict = {}
        for child in _children(generation_ids, document):
            by_generation.setdefault(child.generation_id, []).append(child)
        model = document.knowledge_base.embedding_model
        for children in by_generation.values():
            target = _matches([override], children).get(override.pk)
            if target is not None:
                _state_apply(target, override, model=model)
        ChunkEdit.objects.create(
            override=override, document=document, action=action, chunk_id=current.pk,
            generation_number=current.generation.number, user=user,
            text_before=before_text if action == ChunkEdit.Action.EDITED else "",
            text_after=(override.text or override.original_text) if action == ChunkEdit.Action.EDITED else "",
        )
        return Chunk.objects.defer("embedding").get(pk=current.pk)
