"""Parsers: pure functions from bytes to a ParsedDocument, one module per whitelisted type.

`file_type_detect` maps a filename and its bytes to a type, refusing (UnsupportedFileType) when
the extension is not whitelisted or the content is not what the extension says. `document_parse`
converts; `document_check` is the cheap part of converting, done at upload.
"""

from __future__ import annotations

import importlib
import posixpath

from apps.knowledge.pipeline.parsers.base import (
    Block,
    ConversionFailed,
    DocumentTooLarge,
    ParsedDocument,
    Section,
    TextBudget,
    UnsupportedFileType,
    unlimited,
)
from apps.knowledge.pipeline.parsers.text import bomless_decode, has_bom

__all__ = ["Block", "ConversionFailed", "DocumentTooLarge", "ParsedDocument", "Section", "TextBudget",
           "UnsupportedFileType", "document_check", "document_parse", "file_type_detect"]

EXTENSIONS = {
    ".txt": "txt",
    ".text": "txt",
    ".md": "markdown",
    ".markdown": "markdown",
    ".json": "json",
    ".csv": "csv",
    ".pdf": "pdf",
}
PARSERS = {
    "txt": "apps.knowledge.pipeline.parsers.text",
    "markdown": "apps.knowledge.pipeline.parsers.markdown",
    "json": "apps.knowledge.pipeline.parsers.json_",
    "csv": "apps.knowledge.pipeline.parsers.csv_",
    "pdf": "apps.knowledge.pipeline.parsers.pdf",
}
# Signatures of binary formats people upload by mistake (or rename to .txt).
_BINARY_MAGIC = (b"%PDF-", b"PK\x03\x04", b"\x89PNG", b"GIF8", b"\xff\xd8\xff", b"\xd0\xcf\x11\xe0",
                 b"\x1f\x8b", b"Rar!", b"7z\xbc\xaf", b"\x7fELF", b"MZ")


def _looks_binary(data: bytes) -> bool:
    """A NUL byte near the start makes a file binary, unless it is UTF-16 or UTF-32: with a byte
    order mark, or recognised without one as text_decode recognises it."""
    head = data[:8192]
    if any(head.startswith(magic) for magic in _BINARY_MAGIC):
        return True
    return b"\x00" in head and not has_bom(head) and bomless_decode(data) is None


def file_type_detect(*, filename: str, data: bytes) -> str:
    extension = posixpath.splitext(filename.lower())[1]
    file_type = EXTENSIONS.get(extension)
    if file_type is None:
        allowed = ", ".join(sorted({ext.lstrip(".") for ext in EXTENSIONS}))
        # Read after "Unsupported file type: ", hence the lower case.
        raise UnsupportedFileType(f"{extension or 'a file without an extension'} is not supported; "
                                  f"upload one of: {allowed}.")
    if file_type == "pdf":
        if b"%PDF-" not in data[:1024]:
            raise UnsupportedFileType(f"{filename} is named .pdf but is not a PDF.")
    elif _looks_binary(data):
        raise UnsupportedFileType(f"{filename} is named {extension} but its content is binary, not text.")
    return file_type


def _module(file_type: str):
    return importlib.import_module(PARSERS[file_type])


def document_parse(*, file_type: str, data: bytes, budget: TextBudget | None = None) -> ParsedDocument:
    """Bytes to structure. Raises ConversionFailed with a message an operator can act on, and
    DocumentTooLarge as soon as the text would exceed `budget` (unbounded without one). What it
    returns can be stored: no NUL, no lone surrogate, whatever escapes or character maps the file
    holds (ParsedDocument.storable)."""
    return _module(file_type).parse(data, budget or unlimited()).storable()


def document_check(*, file_type: str, data: bytes) -> bool:
    """The cheap part of parsing (decoding, syntax, PDF encryption), run at upload. False when a
    text or Markdown file, once decoded, holds only white space and invisible formatting; the
    other types' parsers judge their text later (True)."""
    return _module(file_type).check(data) is not False
