"""Chunkers: pure functions (ParsedDocument, ChunkStrategy) -> ChunkedDocument, one per strategy,
chosen by name with import_string. Deterministic: the same input always gives the same chunks."""

from __future__ import annotations

from django.utils.module_loading import import_string

from apps.knowledge.pipeline.chunkers.base import ChildPiece, ChunkedDocument, ParentPiece, TooManyChunks
from apps.knowledge.pipeline.parsers.base import ParsedDocument
from apps.knowledge.pipeline.strategy import ChunkStrategy

__all__ = ["CHUNKERS", "ChildPiece", "ChunkedDocument", "ParentPiece", "TooManyChunks", "document_chunk"]

CHUNKERS = {
    "auto": "apps.knowledge.pipeline.chunkers.auto.chunk",
    "by_section": "apps.knowledge.pipeline.chunkers.by_section.chunk",
    "by_paragraph": "apps.knowledge.pipeline.chunkers.by_paragraph.chunk",
    "fixed": "apps.knowledge.pipeline.chunkers.fixed.chunk",
    "legacy": "apps.knowledge.pipeline.chunkers.legacy.chunk",
}


def document_chunk(*, parsed: ParsedDocument, strategy: ChunkStrategy,
                   max_children: int | None = None) -> ChunkedDocument:
    """TooManyChunks as soon as the document makes more than `max_children` children."""
    return import_string(CHUNKERS[strategy.strategy])(parsed, strategy, max_children=max_children)
