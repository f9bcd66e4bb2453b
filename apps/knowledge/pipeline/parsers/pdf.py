"""PDF: the text of each page, with its page number. Encrypted or unreadable files fail."""

from __future__ import annotations

import io
import logging

from apps.knowledge.pipeline.parsers.base import Block, ConversionFailed, ParsedDocument, Section
from apps.knowledge.pipeline.parsers.text import paragraphs

logging.getLogger("pypdf").setLevel(logging.ERROR)


def _reader(data: bytes):
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        encrypted = reader.is_encrypted
        pages = None if encrypted else len(reader.pages)
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError) as exc:
        raise ConversionFailed("The PDF is damaged and cannot be read.") from exc
    if encrypted:
        raise ConversionFailed("The PDF is encrypted; upload a copy without a password.")
    if not pages:
        raise ConversionFailed("The PDF has no pages.")
    return reader


def parse(data: bytes) -> ParsedDocument:
    from pypdf.errors import PyPdfError

    reader = _reader(data)
    blocks: list[Block] = []
    try:
        for number, page in enumerate(reader.pages, start=1):
            text = (page.extract_text() or "").replace("\r\n", "\n").replace("\x00", "")
            blocks.extend(Block(text=paragraph, page=number) for paragraph in paragraphs(text))
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError) as exc:
        raise ConversionFailed("The PDF is damaged and its text cannot be extracted.") from exc
    if not blocks:
        raise ConversionFailed("The PDF has no extractable text (scanned pages need OCR first).")
    return ParsedDocument(file_type="pdf", sections=(Section(headings=(), blocks=tuple(blocks)),))


def check(data: bytes) -> None:
    _reader(data)
