"""A document's stages for one generation, as a document's ingestion and a rebuild both run
them: its text (within the cap its file's size allows), its chunks in the generation's
strategy, and the embeddings the cache lacks."""

from __future__ import annotations

from django.conf import settings

from apps.knowledge.models import Document, DocumentContent, IndexGeneration
from apps.knowledge.pipeline import parsers
from apps.knowledge.pipeline.chunkers import TooManyChunks, document_chunk
from apps.knowledge.pipeline.embedders import Embedder
from apps.knowledge.pipeline.index import cache_missing, cache_store
from apps.knowledge.pipeline.strategy import strategy_from_snapshot
from apps.knowledge.runs import PipelineError, heartbeat_seconds


def _batches(items: list, size: int):
    for start in range(0, len(items), max(1, size)):
        yield items[start : start + size]


class TooLargeAfterConversion(PipelineError):
    def __init__(self, message: str):
        super().__init__("document_too_large_after_conversion", f"Document too large after conversion: {message}")


def text_cap(size: int) -> int:
    """The most text a document of `size` bytes may convert to."""
    return min(settings.KNOWLEDGE_MAX_TEXT_RATIO * size, settings.KNOWLEDGE_MAX_TEXT_CHARS)


def text_parse(document: Document, *, heartbeat=None) -> parsers.ParsedDocument:
    """Convert within the document's text cap (TooLargeAfterConversion as soon as it is spent),
    calling `heartbeat` now and then while a long conversion runs."""
    data = bytes(DocumentContent.objects.values_list("data", flat=True).get(document_id=document.pk))
    budget = parsers.TextBudget(max_chars=text_cap(len(data)), on_progress=heartbeat,
                                progress_seconds=heartbeat_seconds())
    try:
        return parsers.document_parse(file_type=document.file_type, data=data, budget=budget)
    except parsers.DocumentTooLarge as exc:
        raise TooLargeAfterConversion(
            f"its text exceeds {exc.max_chars:,} characters, the cap for a file of {len(data):,} bytes "
            f"(KNOWLEDGE_MAX_TEXT_RATIO = {settings.KNOWLEDGE_MAX_TEXT_RATIO} times its size, at most "
            f"KNOWLEDGE_MAX_TEXT_CHARS = {settings.KNOWLEDGE_MAX_TEXT_CHARS:,}). Split the document."
        ) from exc


def chunks_cut(parsed: parsers.ParsedDocument, generation: IndexGeneration, *, size: int):
    """The document's chunks in the generation's strategy. Each child is embedded and indexed
    with its heading path in front (index.embedding_text), so the paths are spent from the text
    cap of a file of `size` bytes as the text was: a short file of long headings over many small
    chunks would otherwise index many times its cap."""
    try:
        chunked = document_chunk(parsed=parsed, strategy=strategy_from_snapshot(generation.chunk_strategy),
                                 max_children=settings.KNOWLEDGE_MAX_CHUNKS)
    except TooManyChunks as exc:
        raise TooLargeAfterConversion(
            f"it makes more than {exc.max_children:,} chunks, the cap per document (KNOWLEDGE_MAX_CHUNKS). "
            "Split the document or use larger chunks."
        ) from exc
    cap = text_cap(size)
    text = sum(len(block.text) for section in parsed.sections for block in section.blocks)
    paths = sum(len(child.chapter_path) + 1 for child in chunked.children if child.chapter_path)
    if text + paths > cap:
        raise TooLargeAfterConversion(
            f"its heading paths, repeated in each of its {len(chunked.children):,} chunks, add {paths:,} "
            f"characters to its {text:,}: more than {cap:,}, the cap for a file of {size:,} bytes "
            f"(KNOWLEDGE_MAX_TEXT_RATIO = {settings.KNOWLEDGE_MAX_TEXT_RATIO} times its size). Shorten its "
            "headings or use larger chunks."
        )
    return chunked


def embeddings_fill(*, texts: dict[str, str], model, embedder: Embedder, on_batch) -> None:
    """Embed the texts whose vectors are not cached, batch by batch; `on_batch(done_count)`
    after each (heartbeat and progress)."""
    missing = sorted(cache_missing(model=model, hashes=texts.keys()))
    done = len(texts) - len(missing)
    on_batch(done)
    for batch in _batches(missing, embedder.batch_size):
        vectors = embedder.embed_documents([texts[digest] for digest in batch])
        cache_store(model=model, vectors=dict(zip(batch, vectors, strict=True)))
        done += len(batch)
        on_batch(done)
