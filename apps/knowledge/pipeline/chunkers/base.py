"""What a chunker returns, and the span arithmetic every strategy shares.

Parents are section text (cut at block boundaries past `parent_max_chars`); children are
contiguous slices of their parent: `parent.text[child.start:child.end] == child.text`. That lets a
reader cut the parent around a hit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from apps.knowledge.pipeline.parsers.base import Block, ParsedDocument, Section
from apps.knowledge.pipeline.strategy import ChunkStrategy

Span = tuple[int, int]

CJK_TERMINATORS = "。！？；"
WESTERN_TERMINATORS = ".!?"
CLOSERS = "”’」』）)]\"'》"
PARAGRAPH_SEPARATOR = "\n\n"


@dataclass(frozen=True, slots=True)
class ParentPiece:
    index: int
    text: str
    chapter_path: str | None
    pages: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ChildPiece:
    index: int
    text: str
    chapter_path: str | None
    parent_index: int | None
    start: int | None = None  # offsets in the parent's text (None without a parent)
    end: int | None = None
    pages: tuple[int, ...] = ()


@dataclass(frozen=True)
class ChunkedDocument:
    parents: tuple[ParentPiece, ...]
    children: tuple[ChildPiece, ...]


@dataclass(frozen=True, slots=True)
class PlacedBlock:
    """A block and where it sits in its parent's text."""

    block: Block
    start: int
    end: int


def trim(text: str, span: Span) -> Span | None:
    start, end = span
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if end > start else None


def sentence_spans(text: str, offset: int = 0) -> list[Span]:
    """Sentences of `text` (terminators 。！？； and .!? before a space, closing quotes kept with
    their sentence; a line break also ends one), as spans shifted by `offset`."""
    spans: list[Span] = []
    start = 0
    index = 0
    length = len(text)

    def close(end: int) -> None:
        span = trim(text, (start, end))
        if span:
            spans.append((span[0] + offset, span[1] + offset))

    while index < length:
        char = text[index]
        if char in CJK_TERMINATORS or char in WESTERN_TERMINATORS:
            terminators = CJK_TERMINATORS if char in CJK_TERMINATORS else WESTERN_TERMINATORS
            end = index + 1
            while end < length and text[end] in terminators:
                end += 1
            while end < length and text[end] in CLOSERS:
                end += 1
            if terminators is CJK_TERMINATORS or end == length or text[end].isspace():
                close(end)
                start = index = end
            else:
                index = end
            continue
        if char == "\n":
            close(index)
            start = index = index + 1
            continue
        index += 1
    close(length)
    return spans


def window_spans(text: str, span: Span, size: int, overlap: int) -> list[Span]:
    """Fixed windows of `size` characters over `span`, each starting `size - overlap` after the last."""
    start, end = span
    step = max(1, size - overlap)
    out: list[Span] = []
    position = start
    while position < end:
        piece = trim(text, (position, min(position + size, end)))
        if piece:
            out.append(piece)
        if position + size >= end:
            break
        position += step
    return out


def _lines(text: str, start: int, end: int) -> Iterator[Span]:
    """The lines of text[start:end], one at a time: a list of them all was 60 times the text (an
    unclosed code fence of 9 million short lines, a 19 MB file, held 1.3 GB)."""
    position = start
    while position < end:
        newline = text.find("\n", position, end)
        stop = end if newline < 0 else newline
        yield position, stop
        position = stop + 1


def line_spans(text: str, span: Span, size: int) -> list[Span]:
    """Cut a long atomic block (code, table) at line breaks into pieces of at most `size`
    characters; a single longer line is cut into windows."""
    pieces: list[Span] = []
    current: Span | None = None
    for line in _lines(text, *span):
        if line[1] - line[0] > size:
            if current:
                pieces.append(current)
                current = None
            pieces.extend(window_spans(text, line, size, 0))
        elif current is None:
            current = line
        elif line[1] - current[0] <= size:
            current = (current[0], line[1])
        else:
            pieces.append(current)
            current = line
    if current:
        pieces.append(current)
    return [piece for piece in (trim(text, p) for p in pieces) if piece]


def fit(text: str, units: list[Span], size: int, overlap: int) -> list[Span]:
    """Units no longer than `size`: longer ones become overlapping windows."""
    out: list[Span] = []
    for unit in units:
        if unit[1] - unit[0] > size:
            out.extend(window_spans(text, unit, size, overlap))
        else:
            out.append(unit)
    return out


def merge(units: list[Span], *, max_chars: int, overlap_chars: int, min_chars: int) -> list[Span]:
    """Greedily join consecutive units into spans of at most `max_chars`; the next span starts at
    the earliest units that fit in `overlap_chars` before the previous end (always moving on);
    a last span shorter than `min_chars` joins the one before."""
    spans: list[Span] = []
    first = 0
    count = len(units)
    while first < count:
        last = first
        while last + 1 < count and units[last + 1][1] - units[first][0] <= max_chars:
            last += 1
        spans.append((units[first][0], units[last][1]))
        if last == count - 1:
            break
        following = last + 1
        while (
            following - 1 > first
            and units[last][1] - units[following - 1][0] <= overlap_chars
            and units[last + 1][1] - units[following - 1][0] <= max_chars
        ):
            following -= 1
        first = following
    if len(spans) > 1 and spans[-1][1] - spans[-1][0] < min_chars:
        tail = spans.pop()
        spans[-1] = (spans[-1][0], tail[1])
    return spans


def block_units(text: str, placed: list[PlacedBlock], strategy: ChunkStrategy) -> list[Span]:
    """Sentences of paragraphs and whole atomic blocks (cut at lines when too long)."""
    units: list[Span] = []
    for item in placed:
        if item.block.atomic:
            if item.end - item.start > strategy.max_chars:
                units.extend(line_spans(text, (item.start, item.end), strategy.max_chars))
            else:
                units.append((item.start, item.end))
        else:
            units.extend(sentence_spans(text[item.start:item.end], item.start))
    return fit(text, units, strategy.max_chars, strategy.overlap_chars)


def section_parents(section: Section, parent_max_chars: int) -> Iterator[tuple[str, list[PlacedBlock]]]:
    """The parent texts of a section: its blocks, joined by blank lines, cut at block boundaries
    once a parent would pass `parent_max_chars` (a single longer block stays whole). One parent at
    a time: a section of millions of tiny blocks never has them all placed at once."""
    group: list[Block] = []
    size = 0
    for block in section.blocks:
        if group and size + len(PARAGRAPH_SEPARATOR) + len(block.text) <= parent_max_chars:
            group.append(block)
            size += len(PARAGRAPH_SEPARATOR) + len(block.text)
        else:
            if group:
                yield _placed(group)
            group = [block]
            size = len(block.text)
    if group:
        yield _placed(group)


def _placed(group: list[Block]) -> tuple[str, list[PlacedBlock]]:
    placed: list[PlacedBlock] = []
    position = 0
    for block in group:
        if placed:
            position += len(PARAGRAPH_SEPARATOR)
        placed.append(PlacedBlock(block=block, start=position, end=position + len(block.text)))
        position += len(block.text)
    return PARAGRAPH_SEPARATOR.join(block.text for block in group), placed


def pages_of(placed: list[PlacedBlock], span: Span | None = None) -> tuple[int, ...]:
    pages = {
        item.block.page for item in placed
        if item.block.page is not None and (span is None or (item.start < span[1] and item.end > span[0]))
    }
    return tuple(sorted(pages))


ChildSplitter = Callable[[str, list[PlacedBlock], ChunkStrategy], list[Span]]


class TooManyChunks(Exception):
    """A document makes more than `max_children` children: raised as soon as it does, before the
    rest is cut (a flood of tiny paragraphs must not be chunked whole only to be refused)."""

    def __init__(self, max_children: int):
        super().__init__(f"It makes more than {max_children:,} chunks.")
        self.max_children = max_children


def chunk_by_sections(parsed: ParsedDocument, strategy: ChunkStrategy, split: ChildSplitter, *,
                      max_children: int | None = None) -> ChunkedDocument:
    """Parents from sections, children from `split` inside each parent: never across a heading.
    TooManyChunks as soon as there are more than `max_children` children."""
    parents: list[ParentPiece] = []
    children: list[ChildPiece] = []
    for section in parsed.sections:
        for text, placed in section_parents(section, strategy.parent_max_chars):
            spans = [span for span in (trim(text, s) for s in split(text, placed, strategy)) if span]
            if not spans:
                continue
            if max_children is not None and len(children) + len(spans) > max_children:
                raise TooManyChunks(max_children)
            parent = ParentPiece(index=len(parents), text=text, chapter_path=section.chapter_path,
                                 pages=pages_of(placed))
            parents.append(parent)
            for start, end in spans:
                children.append(ChildPiece(
                    index=len(children), text=text[start:end], chapter_path=section.chapter_path,
                    parent_index=parent.index, start=start, end=end, pages=pages_of(placed, (start, end)),
                ))
    return ChunkedDocument(parents=tuple(parents), children=tuple(children))
