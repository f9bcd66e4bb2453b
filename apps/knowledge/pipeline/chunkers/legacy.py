"""`legacy`: the old split, kept for knowledge bases created before strategies — fixed windows of
`max_chars` with `overlap_chars` over the whole document's text, headings included as lines.
No parents and no `chapter_path` (null), so existing KBs behave as before until they rebuild."""

from __future__ import annotations

from apps.knowledge.pipeline.chunkers.base import ChildPiece, ChunkedDocument, TooManyChunks, window_spans
from apps.knowledge.pipeline.parsers.base import ParsedDocument
from apps.knowledge.pipeline.strategy import ChunkStrategy


def chunk(parsed: ParsedDocument, strategy: ChunkStrategy, *, max_children: int | None = None) -> ChunkedDocument:
    text = parsed.plain_text()
    spans = window_spans(text, (0, len(text)), strategy.max_chars, strategy.overlap_chars)
    if max_children is not None and len(spans) > max_children:
        raise TooManyChunks(max_children)
    children = tuple(
        ChildPiece(index=index, text=text[start:end], chapter_path=None, parent_index=None)
        for index, (start, end) in enumerate(spans)
    )
    return ChunkedDocument(parents=(), children=children)
