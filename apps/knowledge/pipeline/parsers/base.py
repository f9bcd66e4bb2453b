"""What a parser returns: sections (under their heading breadcrumb) of blocks, frozen."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings


class UnsupportedFileType(Exception):
    """The file's extension is not on the whitelist, or its content is not what the extension says."""


class ConversionFailed(Exception):
    """The file is of its declared type but cannot be turned into text; the message says why."""


class DocumentTooLarge(Exception):
    """Converting the file would give more text than its budget allows (an expansion bomb, or
    a file that is mostly repetition); raised as soon as the budget is spent, not at the end."""

    def __init__(self, max_chars: int):
        super().__init__(f"Its text exceeds {max_chars:,} characters.")
        self.max_chars = max_chars


@dataclass
class TextBudget:
    """How much text one conversion may produce. Parsers `spend` as they extract, so a file that
    expands without bound stops early; `on_progress` (the pipeline's heartbeat) is called at most
    every `progress_seconds` while a long conversion runs."""

    max_chars: int
    on_progress: Callable[[], None] | None = None
    progress_seconds: float = 5.0
    used: int = 0
    exceeded: bool = False
    _last_progress: float = field(default_factory=time.monotonic)

    def spend(self, chars: int) -> None:
        self.used += chars
        if self.used > self.max_chars:
            self.exceeded = True
            raise DocumentTooLarge(self.max_chars)
        self.tick()

    def tick(self) -> None:
        if self.exceeded:
            raise DocumentTooLarge(self.max_chars)
        if self.on_progress is not None and time.monotonic() - self._last_progress >= self.progress_seconds:
            self._last_progress = time.monotonic()
            self.on_progress()


class ParagraphCount:
    """A text or Markdown document's blocks (paragraphs, code blocks, tables), counted as they are
    made; ConversionFailed past KNOWLEDGE_MAX_PARAGRAPHS. Each is ~100 bytes in the worker however
    short, and the text budget does not stop short ones: 6.5 million one-letter paragraphs (a
    19.5 MB file) held 570-620 MB and took 40-75 s to fail over KNOWLEDGE_MAX_CHUNKS."""

    def __init__(self) -> None:
        self.limit = settings.KNOWLEDGE_MAX_PARAGRAPHS
        self.count = 0

    def add(self) -> None:
        self.count += 1
        if self.count > self.limit:
            raise ConversionFailed(f"The document has more than {self.limit:,} paragraphs, more than a document may "
                                   "(KNOWLEDGE_MAX_PARAGRAPHS). Split it into smaller files.")


def unlimited() -> TextBudget:
    return TextBudget(max_chars=2**62)


CHAPTER_SEPARATOR = " / "
# A character that is neither white space nor invisible formatting (zero-width spaces and joiners,
# the word joiner, bidi marks, the soft hyphen, variation selectors, a BOM): text someone can read.
_VISIBLE = re.compile(r"[^\s\u00ad\u034f\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufe00-\ufe0f\ufeff]")
# What neither PostgreSQL nor any UTF-8 encoder stores: NUL, and a surrogate without its pair.
_UNSTORABLE = re.compile(r"\x00|[\ud800-\udfff]")


def has_visible_text(text: str) -> bool:
    return _VISIBLE.search(text) is not None


def storable(text: str) -> str:
    """`text` without NUL, each lone surrogate replaced by U+FFFD: a JSON escape (\\u0000, \\ud800)
    or a PDF's broken character map can put them in any text a parser returns."""
    if _UNSTORABLE.search(text) is None:
        return text
    return _UNSTORABLE.sub(lambda match: "" if match.group() == "\x00" else "\ufffd", text)


@dataclass(frozen=True, slots=True)
class Block:
    """A paragraph, a code fence (kept whole), a table, or one record (JSON value group, CSV row)."""

    text: str
    kind: str = "paragraph"  # paragraph | code | table | record
    page: int | None = None

    @property
    def atomic(self) -> bool:
        """Atomic blocks are never split at sentences (only at lines, when too long)."""
        return self.kind != "paragraph"


@dataclass(frozen=True, slots=True)
class Section:
    headings: tuple[str, ...]  # breadcrumb, outermost first; () before the first heading or without any
    blocks: tuple[Block, ...]

    @property
    def chapter_path(self) -> str | None:
        return CHAPTER_SEPARATOR.join(self.headings) if self.headings else None


@dataclass(frozen=True)
class ParsedDocument:
    file_type: str
    sections: tuple[Section, ...]

    @property
    def has_headings(self) -> bool:
        return any(section.headings for section in self.sections)

    def plain_text(self) -> str:
        """All text in reading order, each new heading as its own line (what `legacy` splits)."""
        parts: list[str] = []
        previous: tuple[str, ...] = ()
        for section in self.sections:
            if section.headings and section.headings != previous:
                common = 0
                while (common < min(len(previous), len(section.headings))
                       and previous[common] == section.headings[common]):
                    common += 1
                parts.extend(section.headings[common:])
            previous = section.headings
            parts.extend(block.text for block in section.blocks)
        return "\n\n".join(parts)

    @property
    def is_empty(self) -> bool:
        """No text anyone can read: only white space and invisible formatting characters."""
        return not any(has_visible_text(block.text) for section in self.sections for block in section.blocks)

    def storable(self) -> ParsedDocument:
        """This document with every text and heading `storable`; itself when all already are."""
        if not any(_UNSTORABLE.search(text) for section in self.sections
                   for text in (*section.headings, *(block.text for block in section.blocks))):
            return self
        return ParsedDocument(file_type=self.file_type, sections=tuple(
            Section(headings=tuple(storable(heading) for heading in section.headings),
                    blocks=tuple(Block(text=storable(block.text), kind=block.kind, page=block.page)
                                 for block in section.blocks))
            for section in self.sections))
