"""`by_paragraph`: one child per paragraph (code fence, table, record); paragraphs shorter than
`min_chars` join the following ones up to `max_chars`; a longer paragraph is cut at sentences
with `overlap_chars`."""

from __future__ import annotations

from apps.knowledge.pipeline.chunkers.base import ChunkedDocument, block_units, chunk_by_sections, merge
from apps.knowledge.pipeline.parsers.base import ParsedDocument
from apps.knowledge.pipeline.strategy import ChunkStrategy


def _split(text, placed, strategy):
    spans = []
    pending = None  # short paragraphs gathered until they reach min_chars
    for item in placed:
        length = item.end - item.start
        if length > strategy.max_chars:
            if pending:
                spans.append(pending)
                pending = None
            spans.extend(merge(block_units(text, [item], strategy), max_chars=strategy.max_chars,
                               overlap_chars=strategy.overlap_chars, min_chars=strategy.min_chars))
            continue
        if pending and item.end - pending[0] <= strategy.max_chars:
            pending = (pending[0], item.end)
        else:
            if pending:
                spans.append(pending)
            pending = (item.start, item.end)
        if pending[1] - pending[0] >= strategy.min_chars:
            spans.append(pending)
            pending = None
    if pending:
        spans.append(pending)
    return spans


def chunk(parsed: ParsedDocument, strategy: ChunkStrategy, *, max_children: int | None = None) -> ChunkedDocument:
    return chunk_by_sections(parsed, strategy, _split, max_children=max_children)
