"""`by_section`: one child per section; a section longer than `max_chars` is cut at block
boundaries (and a longer block at its sentences). No overlap."""

from __future__ import annotations

from apps.knowledge.pipeline.chunkers.base import ChunkedDocument, block_units, chunk_by_sections, fit, merge
from apps.knowledge.pipeline.parsers.base import ParsedDocument
from apps.knowledge.pipeline.strategy import ChunkStrategy


def _split(text, placed, strategy):
    units = []
    for item in placed:
        if item.end - item.start <= strategy.max_chars:
            units.append((item.start, item.end))
        else:
            units.extend(block_units(text, [item], strategy))
    return merge(fit(text, units, strategy.max_chars, 0), max_chars=strategy.max_chars, overlap_chars=0,
                 min_chars=0)


def chunk(parsed: ParsedDocument, strategy: ChunkStrategy, *, max_children: int | None = None) -> ChunkedDocument:
    return chunk_by_sections(parsed, strategy, _split, max_children=max_children)
