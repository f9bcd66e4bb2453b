"""`fixed`: windows of `max_chars` characters, `overlap_chars` apart, inside each section."""

from __future__ import annotations

from apps.knowledge.pipeline.chunkers.base import ChunkedDocument, chunk_by_sections, window_spans
from apps.knowledge.pipeline.parsers.base import ParsedDocument
from apps.knowledge.pipeline.strategy import ChunkStrategy


def _split(text, placed, strategy):
    return window_spans(text, (0, len(text)), strategy.max_chars, strategy.overlap_chars)


def chunk(parsed: ParsedDocument, strategy: ChunkStrategy, *, max_children: int | None = None) -> ChunkedDocument:
    return chunk_by_sections(parsed, strategy, _split, max_children=max_children)
