"""`auto`: markdown headings make sections; inside a section, sentences merge up to `max_chars`
with `overlap_chars`, never across a heading. Code fences, tables and records stay whole."""

from __future__ import annotations

from apps.knowledge.pipeline.chunkers.base import ChunkedDocument, block_units, chunk_by_sections, merge
from apps.knowledge.pipeline.parsers.base import ParsedDocument
from apps.knowledge.pipeline.strategy import ChunkStrategy


def _split(text, placed, strategy):
    return merge(block_units(text, placed, strategy), max_chars=strategy.max_chars,
                 overlap_chars=strategy.overlap_chars, min_chars=strategy.min_chars)


def chunk(parsed: ParsedDocument, strategy: ChunkStrategy, *, max_children: int | None = None) -> ChunkedDocument:
    return chunk_by_sections(parsed, strategy, _split, max_children=max_children)
