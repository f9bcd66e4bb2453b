"""CSV: each row becomes one record, `header: value; header: value`, under the header's names.

Rows are read one at a time and each value is spent from the budget as it is made: a file of
millions of short rows, or one row of millions of cells, stops at the budget instead of being held
whole (as lists of cells, many times the file's size) first. The upload check reads every row and
keeps none.

Each row is a block of its own, ~110 bytes as Python objects however short the row: a 9 MB file of
4.5 million one-letter rows held 660 MiB. So a file of more than KNOWLEDGE_CSV_MAX_ROWS rows is
refused, at upload and in the pipeline, as soon as the row past the limit is read.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterator

from django.conf import settings

from apps.knowledge.pipeline.parsers.base import Block, ConversionFailed, ParsedDocument, Section, TextBudget
from apps.knowledge.pipeline.parsers.text import text_decode

_DELIMITERS = ",\t;|"
_FIELD_SEPARATOR = "; "
# The csv module refuses a field over 131,072 characters unless told otherwise, and a valid file
# with one long cell (a pasted article) was refused as "not valid CSV". A cell is no longer than
# its file, which the upload limit bounds, and the budget bounds the text made from it.
csv.field_size_limit(max(csv.field_size_limit(), sys.maxsize))


def _lines(text: str) -> Iterator[str]:
    """The text's lines with their newlines (text_decode made every line end `\\n`), one at a
    time: a StringIO would hold a copy of the text at four bytes a character."""
    start = 0
    while start < len(text):
        end = text.find("\n", start) + 1 or len(text)
        yield text[start:end]
        start = end


def _rows(data: bytes) -> Iterator[list[str]]:
    """The rows that hold a value, one at a time; ConversionFailed at the first malformed one."""
    text = text_decode(data)
    try:
        dialect = csv.Sniffer().sniff(text[:8192], delimiters=_DELIMITERS)
        delimiter = dialect.delimiter
    except csv.Error:
        delimiter = ","
    reader = csv.reader(_lines(text), delimiter=delimiter, strict=True)
    limit = settings.KNOWLEDGE_CSV_MAX_ROWS + 1  # the header row is not counted
    kept = 0
    start = 1  # the line the row being read starts at (a quoted cell may span lines)
    try:
        for row in reader:
            if any(cell.strip() for cell in row):
                kept += 1
                if kept > limit:
                    raise ConversionFailed(f"The file has more than {limit - 1:,} rows, more than a document may "
                                           "(KNOWLEDGE_CSV_MAX_ROWS). Split the file.")
                yield row
            start = reader.line_num + 1
    except csv.Error as exc:
        raise ConversionFailed(f"The file is not valid CSV: {exc}, in the row that starts at line {start:,}.") from exc


def _record(header: list[str], row: list[str], budget: TextBudget) -> str:
    fields: list[str] = []
    for index, cell in enumerate(row):
        value = cell.strip()
        if not value:
            continue
        name = header[index] if index < len(header) and header[index] else f"column_{index + 1}"
        field = f"{name}: {value}"
        # Each value repeats its column's name: long names over many rows multiply the text.
        budget.spend(len(field) + (len(_FIELD_SEPARATOR) if fields else 0))
        fields.append(field)
    return _FIELD_SEPARATOR.join(fields)


def parse(data: bytes, budget: TextBudget) -> ParsedDocument:
    rows = _rows(data)
    first = next(rows, None)
    if first is None:
        return ParsedDocument(file_type="csv", sections=())
    header = [name.strip() for name in first]
    blocks = []
    for row in rows:
        record = _record(header, row, budget)
        if record:
            blocks.append(Block(text=record, kind="record"))
    return ParsedDocument(file_type="csv", sections=(Section(headings=(), blocks=tuple(blocks)),) if blocks else ())


def check(data: bytes) -> None:
    for _row in _rows(data):
        pass
