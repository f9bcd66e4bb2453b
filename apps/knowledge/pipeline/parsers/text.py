"""Plain text: UTF-8 (with or without BOM), UTF-16/32 with BOM, or GB18030, detected."""

from __future__ import annotations

import re

from apps.knowledge.pipeline.parsers.base import Block, ConversionFailed, ParsedDocument, Section, TextBudget

_BOMS = (
    (b"\xef\xbb\xbf", "utf-8"),
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)
# C0 controls other than tab and newline, and DEL: noise in text, harmful in a tsvector.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_BLANK_LINES = re.compile(r"\n[ \t\u3000]*\n")


def has_bom(data: bytes) -> bool:
    return any(data.startswith(bom) for bom, _ in _BOMS)


def text_decode(data: bytes) -> str:
    """Bytes to text with newlines normalised; ConversionFailed when no supported encoding fits."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                text = data[len(bom):].decode(encoding)
            except UnicodeDecodeError as exc:
                raise ConversionFailed(f"The text starts with a {encoding} byte order mark but is not "
                                       f"valid {encoding} (at byte {exc.start}).") from exc
            break
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            try:
                text = data.decode("gb18030")
            except UnicodeDecodeError as exc:
                raise ConversionFailed(
                    "The text is neither UTF-8 nor GB18030; save it as UTF-8 and upload it again."
                ) from exc
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\ufeff", "")
    return _CONTROL.sub("", text)


def paragraphs(text: str) -> list[str]:
    """Blank-line separated paragraphs, trimmed, empty ones dropped."""
    return [part.strip() for part in _BLANK_LINES.split(text) if part.strip()]


def parse(data: bytes, budget: TextBudget) -> ParsedDocument:
    text = text_decode(data)
    budget.spend(len(text))  # no more text than the file holds: counted once
    blocks = tuple(Block(text=paragraph) for paragraph in paragraphs(text))
    return ParsedDocument(file_type="txt", sections=(Section(headings=(), blocks=blocks),) if blocks else ())


def check(data: bytes) -> None:
    text_decode(data)
